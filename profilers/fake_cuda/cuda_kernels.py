"""What only CUDA's kernels do, on the fake GPU: the ops a GPU runs that the CPU's kernels
refuse (softmax from half to float) or that have no meta kernel for FakeTensorMode (an
optimizer's fused step). Registered with the two modes' handlers on import (the harness
imports this module)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._pytree import tree_map_only

from profilers.fake_cuda import mode as placeholder_mode
from profilers.fake_cuda import real
from profilers.fake_cuda.mode import Args, FakeCudaMode, Kwargs, Op, _named, _tensor, _tensors
from profilers.fake_cuda.real import HostBacked, RealCudaMode
from profilers.memory.gpu_errors import list_mismatch
from profilers.timing.fake_time import note_fake_op

_aten = torch.ops.aten

# -- real values: what the CPU's kernels refuse ------------------------------------------------


@real._handles(_aten._softmax.default, _aten._log_softmax.default)
def _softmax(mode: RealCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
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
def _softmax_backward(mode: RealCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    """The gradient of a ``half_to_float`` softmax: float in, the input's Half out, one kernel
    on a GPU (aten/src/ATen/native/cuda/SoftMax.cu, ``host_softmax_backward``: the grad input
    is made in ``input_dtype``), refused by the CPU's kernel: computed in float, then cast."""
    grad, out, dim, dtype = args[0], args[1], args[2], args[3]
    if type(grad) is not HostBacked or not isinstance(dtype, torch.dtype) or grad.dtype == dtype:
        return mode.on_fake(func, args, kwargs)
    host_out = out.host if type(out) is HostBacked else out
    result = _tensor(func(grad.host, host_out, dim, grad.dtype)).to(dtype)
    return _on_host(mode, func, args, kwargs, result, grad.device)


# NB: without cuDNN (a CPU build of torch has none, so the fake GPU has none), nn.LSTM, nn.GRU
# and their cells on a CUDA tensor run one fused kernel per step and layer
# (aten/src/ATen/native/RNN.cpp, ``LSTMCell``/``GRUCell``: ``_thnn_fused_lstm_cell`` when the
# input is CUDA), which only CUDA has (aten/src/ATen/native/cuda/RNN.cu). Computed on the host
# from their definition; each kernel's workspace is laid out as here, forward and back alike:
# the LSTM's activated gates (i, f, g, o), the GRU's (r, z, n), its hx and its hidden n gate.


def _lstm_cell(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    cx: torch.Tensor,
    input_bias: torch.Tensor | None = None,
    hidden_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gates = input_gates + hidden_gates
    if input_bias is not None and hidden_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def _lstm_cell_backward(
    grad_hy: torch.Tensor | None,
    grad_cy: torch.Tensor | None,
    cx: torch.Tensor,
    cy: torch.Tensor,
    workspace: torch.Tensor,
    has_bias: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    ghy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    gc = ghy * o * (1 - tanh_cy * tanh_cy)
    if grad_cy is not None:
        gc = gc + grad_cy
    grad_gates = torch.cat(
        [
            gc * g * i * (1 - i),
            gc * cx * f * (1 - f),
            gc * i * (1 - g * g),
            ghy * tanh_cy * o * (1 - o),
        ],
        1,
    )
    return grad_gates, gc * f, grad_gates.sum(0) if has_bias else None


def _gru_cell(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    hx: torch.Tensor,
    input_bias: torch.Tensor | None = None,
    hidden_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    if input_bias is not None and hidden_bias is not None:
        input_gates, hidden_gates = input_gates + input_bias, hidden_gates + hidden_bias
    ir, iz, in_ = input_gates.chunk(3, 1)
    hr, hz, hn = hidden_gates.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], 1)


def _gru_cell_backward(
    grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool
) -> tuple[torch.Tensor | None, ...]:
    r, z, n, hx, hn = workspace.chunk(5, 1)
    gz = grad_hy * (hx - n) * z * (1 - z)
    gn = grad_hy * (1 - z) * (1 - n * n)
    gr = gn * hn * r * (1 - r)
    grad_input = torch.cat([gr, gz, gn], 1)
    grad_hidden = torch.cat([gr, gz, gn * r], 1)
    if not has_bias:
        return grad_input, grad_hidden, grad_hy * z, None, None
    return grad_input, grad_hidden, grad_hy * z, grad_input.sum(0), grad_hidden.sum(0)


_RNN_KERNELS: dict[Op, Callable[..., tuple[torch.Tensor | None, ...]]] = {
    _aten._thnn_fused_lstm_cell.default: _lstm_cell,
    _aten._thnn_fused_lstm_cell_backward_impl.default: _lstm_cell_backward,
    _aten._thnn_fused_gru_cell.default: _gru_cell,
    _aten._thnn_fused_gru_cell_backward.default: _gru_cell_backward,
}


@real._handles(*_RNN_KERNELS)
def _rnn_cell(mode: RealCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    """An LSTM's or GRU's fused step on the fake GPU, forward or back (see above): the CUDA
    kernel's arithmetic in CPU ops on the host tensors; with no GPU tensor, the CPU's refusal."""
    device = next((a.device for a in args if type(a) is HostBacked), None)
    if device is None:
        return func(*args, **kwargs)
    named = _named(func, args, kwargs)
    hosts = {k: a.host if type(a) is HostBacked else a for k, a in named.items()}
    return _on_host(mode, func, args, kwargs, _RNN_KERNELS[func](**hosts), device)


@placeholder_mode._handles(*_RNN_KERNELS)
def _rnn_cell_placeholders(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    """The same step on placeholders: the kernel's ops run on fake tensors for their shapes.

    NB: FakeTensorMode has no meta kernel for ``_thnn_fused_gru_cell`` (nor its backward),
    and the LSTM cell's (torch/_meta_registrations.py) fails on a layer without bias."""
    if not any(mode.is_fake(t) for t in _tensors(args, kwargs) if isinstance(t, torch.Tensor)):
        return func(*args, **kwargs)
    named = tree_map_only(torch.Tensor, mode.to_fake, _named(func, args, kwargs))
    with mode.lock, mode.fake:
        out = _RNN_KERNELS[func](**named)
    mode.harness.memory.note(out, mode.harness.fake_type)
    note_fake_op(func, args, kwargs, out, mode.t0)  # --gpu NAME: the model's time for it
    return out


def _on_host(
    mode: RealCudaMode, func: Op, args: Args, kwargs: Kwargs, result: object, device: torch.device
) -> object:
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
def _fused_step(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
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
