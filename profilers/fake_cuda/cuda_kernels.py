"""What only CUDA's kernels do, on the fake GPU: the ops a GPU runs that the CPU's kernels
refuse (softmax from half to float) or that have no meta kernel for FakeTensorMode (an
optimizer's fused step). Registered with the two modes' handlers on import (the harness
imports this module)."""

from __future__ import annotations

from typing import Any

import torch

from profilers.fake_cuda import mode as placeholder_mode
from profilers.fake_cuda import real
from profilers.fake_cuda.mode import FakeCudaMode, _tensors
from profilers.fake_cuda.real import HostBacked, RealCudaMode
from profilers.memory.gpu_errors import list_mismatch
from profilers.timing.fake_time import note_fake_op

_aten = torch.ops.aten

# -- real values: what the CPU's kernels refuse ------------------------------------------------


@real._handles(_aten._softmax.default, _aten._log_softmax.default)
def _softmax(mode: RealCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``softmax(x_half, dim, dtype=torch.float32)`` on a GPU is one kernel that reads half and
    writes float (``half_to_float``), which the CPU's kernel refuses: computed on the host in
    float, the op the profiler sees is the GPU's.

    NB: aten/src/ATen/native/SoftMax.cpp (``softmax``, ``log_softmax``): a CUDA tensor of Half
    asked for Float calls ``_softmax(input, dim, half_to_float=true)``; the CUDA kernel
    (aten/src/ATen/native/cuda/SoftMax.cu, ``host_softmax``) accumulates and writes float."""
    x, dim, half_to_float = args[0], args[1], bool(args[2])
    if not half_to_float or type(x) is not HostBacked:
        return mode.on_fake(func, args, kwargs)
    if x.dtype is not torch.float16:
        # torch's own check of the input's dtype (the meta kernel's words), raised as it is
        func(torch.empty(x.shape, dtype=x.dtype, device="meta"), dim, True)
    return _on_host(mode, func, args, kwargs, func(x.host.float(), dim, False), x.device)


@real._handles(_aten._softmax_backward_data.default, _aten._log_softmax_backward_data.default)
def _softmax_backward(
    mode: RealCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """The gradient of a ``half_to_float`` softmax: float in, the input's Half out, one kernel
    on a GPU (aten/src/ATen/native/cuda/SoftMax.cu, ``host_softmax_backward``: the grad input
    is made in ``input_dtype``), refused by the CPU's kernel: computed in float, then cast."""
    grad, out, dim, input_dtype = args[0], args[1], args[2], args[3]
    if type(grad) is not HostBacked or grad.dtype == input_dtype:
        return mode.on_fake(func, args, kwargs)
    host_out = out.host if type(out) is HostBacked else out
    result = func(grad.host, host_out, dim, grad.dtype).to(input_dtype)
    return _on_host(mode, func, args, kwargs, result, grad.device)


def _on_host(
    mode: RealCudaMode,
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    result: torch.Tensor,
    device: torch.device,
) -> Any:
    """``result``, computed on the host for ``func``, as the GPU tensor the op makes."""
    out = mode.wrap_out(result, device, {})
    note_fake_op(func, args, kwargs, out, mode.t0)  # --gpu NAME: the model's time for it
    return out


# -- placeholders: what FakeTensorMode has no kernel for ---------------------------------------


_FUSED_STEPS = [
    op
    for name in ("_fused_adam_", "_fused_adamw_", "_fused_sgd_", "_fused_adagrad_")
    for overload in ("default", "tensor_lr")
    if (op := getattr(getattr(_aten, name, None), overload, None)) is not None
]


@placeholder_mode._handles(*_FUSED_STEPS)
def _fused_step(
    mode: FakeCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """An optimizer's fused step (``AdamW(fused=True)``, ``SGD(fused=True)``, ...) on
    placeholders: nothing to compute, the devices checked as a GPU checks them.

    NB: these ops update their lists of tensors in place and return nothing
    (native_functions.yaml: ``-> ()``; torch/optim/adam.py ``_fused_adam``, sgd.py
    ``_fused_sgd``, adagrad.py ``_fused_adagrad``), and several overloads have no meta kernel
    for FakeTensorMode (``_fused_sgd_``, ``_fused_adagrad_``, ``_fused_adam_.tensor_lr`` in
    torch 2.13), which a GPU does not need. A CPU ``lr`` tensor is read on the host by the
    CUDA kernel (FusedAdamKernel.cu): no GPU value, nothing to count."""
    if not any(mode.is_fake(t) for t in _tensors(args, kwargs) if isinstance(t, torch.Tensor)):
        return func(*args, **kwargs)
    wrong = list_mismatch(func, args, kwargs)
    if wrong is not None:
        raise wrong
    note_fake_op(func, args, kwargs, None, mode.t0)  # --gpu NAME: the model's time for it
    return None
