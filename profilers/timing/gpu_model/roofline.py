"""An op's predicted time on a named GPU: a roofline over its published peaks.

``time = max(MIN_KERNEL_NS, FLOPs / (peak × waves), bytes / (bandwidth × MEMORY_FRACTION))``

* **FLOPs** come from PyTorch's own formulas: ``torch.utils.flop_counter``'s registry (what
  ``FlopCounterMode`` looks an op's packet up in) for matmuls, convolutions and attention; any
  other op counts one FLOP per output element (elementwise work; a reduction is bound by the
  bytes it reads anyway).
* **bytes** are the op's tensors read and written, each once (inputs + outputs): shapes and
  dtypes only, so fake and meta tensors do. Views and ``empty`` launch no kernel: 0 ns.
  NB: a batch norm in training reads its input twice (:data:`TWO_PASS`): one pass for the
  batch's statistics, one to normalize (its backward likewise: the gradient's sums first);
  the mean and variance must be known before the first output element can be written, and a
  batch's activations do not fit in the caches.
* **peak**: the tensor cores' rate for ops in the formula registry when the GPU has tensor cores
  for the type (float32 matmuls only when TF32 is allowed: ``torch.backends.cuda.matmul``
  for matmuls, ``torch.backends.cudnn`` for convolutions), else the CUDA cores'.
* **layout**: tensor cores read their operands channels-last (NHWC); a convolution over
  channels-first (NCHW, PyTorch's default) activations on tensor cores has cuDNN transpose
  them and its result, kernels of their own: each activation read and written once more,
  added to the convolution's time (:func:`_transposed`). Basis: NVIDIA's tensor-core layout
  rule, as MosaicML's channels-last method card describes it
  (https://docs.mosaicml.com/projects/composer/en/stable/method_cards/channels_last.html).
* **waves**: a GEMM's output is cut into :data:`TILE` × :data:`TILE` tiles, one per SM at a
  time; the last wave of tiles leaves SMs idle. ``waves = tiles / (ceil(tiles / SMs) × SMs)``
  (wave quantization, from the SM count alone).
* :data:`~profilers.timing.gpu_model.rates.MEMORY_FRACTION` and
  :data:`~profilers.timing.gpu_model.rates.MIN_KERNEL_NS`: first principles, in
  :mod:`~profilers.timing.gpu_model.rates` (with the copies over the bus).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from profilers.timing.gpu_model.rates import MEMORY_FRACTION, MIN_KERNEL_NS
from profilers.timing.gpu_model.specs import GpuSpec

TILE = 128
"""The output tile one SM computes at a time in a GEMM (cuBLAS/CUTLASS's common 128 × 128 CTA
tile), for wave quantization."""

_NO_KERNEL = frozenset(("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"))
_MATMULS = frozenset(("mm", "addmm", "bmm", "baddbmm", "_scaled_mm"))

TWO_PASS = {
    "native_batch_norm": (0,),
    "_native_batch_norm_legit": (0,),
    "cudnn_batch_norm": (0,),
    "miopen_batch_norm": (0,),
    "native_batch_norm_backward": (0, 1),
    "cudnn_batch_norm_backward": (0, 1),
    "miopen_batch_norm_backward": (0, 1),
    "batch_norm_backward": (0, 1),
}
"""Batch norm's kernels in training, and which of their arguments they read twice (a
reduction pass, then an elementwise pass); forward ops only when ``training`` (argument 5 of
each forward schema, or 3 of ``_native_batch_norm_legit.no_stats``)."""


@dataclass(slots=True, eq=False)
class OpCost:
    """What an op asks of the GPU: ``flops``, ``nbytes`` read and written, the spec ``dtype``
    it computes in, whether it runs on tensor cores when the GPU has them, its GEMM ``tiles``
    (0: not a GEMM), and ``transpose_bytes``: what a convolution on channels-first tensors
    moves to lay them out for the tensor cores and back (paid only where it runs on them)."""

    flops: int
    nbytes: int
    dtype: str
    tensor_cores: bool
    tiles: int
    transpose_bytes: int = 0


def _flop_registry() -> dict[Any, Any]:
    """``FlopCounterMode``'s formulas, keyed by op packet (empty if a torch lacks it: then every
    op counts as elementwise)."""
    from torch.utils import flop_counter

    found = getattr(flop_counter, "flop_registry", None)
    return found if isinstance(found, dict) else {}


def spec_dtype(dtype: torch.dtype) -> str:
    """The spec's name for the arithmetic a tensor of ``dtype`` gets."""
    if dtype in (torch.float16, torch.bfloat16, torch.float64):
        return str(dtype).removeprefix("torch.")
    if dtype.is_floating_point and dtype.itemsize == 1:
        return "float8"
    return "float32"  # float32, and integers (CUDA-core integer rate ~ float32's)


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _tf32(name: str, allow_tf32: bool | None) -> bool:
    if allow_tf32 is not None:
        return allow_tf32
    if name in _MATMULS:
        return bool(torch.backends.cuda.matmul.allow_tf32)
    # NB: cuDNN convolutions use TF32 by default (torch.backends.cudnn.allow_tf32 = True).
    return bool(torch.backends.cudnn.allow_tf32)


def op_cost(
    func: Any, args: Any, kwargs: Any, out: Any, *, allow_tf32: bool | None = None
) -> OpCost:
    """The FLOPs and bytes of the aten op ``func`` called with ``args``/``kwargs`` giving
    ``out`` (real, fake or meta tensors). ``allow_tf32``: None follows torch's settings."""
    packet = getattr(func, "overloadpacket", func)
    name = getattr(packet, "__name__", str(packet)).removesuffix("_")
    outs = _tensors(out)
    ins = _tensors((args, kwargs))
    schema = getattr(func, "_schema", None)
    returns = schema.returns if schema is not None else []
    is_view = any(r.alias_info is not None and not r.alias_info.is_write for r in returns)
    if is_view or name in _NO_KERNEL:
        return OpCost(0, 0, "float32", False, 0)
    nbytes = sum(t.numel() * t.element_size() for t in (*ins, *outs)) + _second_pass(name, args)
    first = ins[0] if ins else (outs[0] if outs else None)
    dtype = spec_dtype(first.dtype) if first is not None else "float32"
    formula = _flop_registry().get(packet)
    if formula is None:
        return OpCost(sum(t.numel() for t in outs), nbytes, dtype, False, 0)
    flops = int(formula(*args, **(kwargs or {}), out_val=out))
    if dtype == "float32" and _tf32(name, allow_tf32):
        dtype = "tf32"
    return OpCost(flops, nbytes, dtype, True, _tiles(name, outs), _transposed(name, ins, outs))


def _transposed(name: str, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> int:
    """Bytes a convolution over channels-first (NCHW) tensors moves to run on tensor cores:
    each 4-D (or 5-D) tensor read and written once more in channels-last order before the
    kernel, and its results back after. 0 for other ops, and where an input is laid out
    channels-last: then cuDNN runs NHWC throughout (PyTorch asks for channels-last when the
    input or the weight is; the weight decides in practice, a model moved with
    ``memory_format=torch.channels_last`` has every one so)."""
    if "conv" not in name:
        return 0
    shaped = [t for t in ins if t.dim() in (4, 5)]
    if not shaped or any(_channels_last(t) for t in shaped):
        return 0
    return 2 * sum(t.numel() * t.element_size() for t in (*shaped, *outs) if t.dim() in (4, 5))


def _channels_last(t: torch.Tensor) -> bool:
    """Laid out channels-last by its strides: channels adjacent (stride 1) and the last spatial
    dimension a whole pixel of channels apart. NB: by strides, not ``is_contiguous``: a 1x1
    kernel is contiguous both ways, its strides still say which way it was laid out."""
    try:
        return t.shape[1] > 1 and t.stride(1) == 1 and t.stride(-1) == t.shape[1]
    except RuntimeError:  # NB: a tensor subclass without strides: as PyTorch makes it
        return False


def _second_pass(name: str, args: Any) -> int:
    """Bytes a batch norm in training reads a second time (0 for any other op)."""
    again = TWO_PASS.get(name)
    if again is None or not isinstance(args, (tuple, list)):
        return 0
    if "backward" not in name:
        flag = next((a for a in args[3:6] if isinstance(a, bool)), True)
        if not flag:  # eval: the running statistics, one pass
            return 0
    picked = [args[i] for i in again if i < len(args) and isinstance(args[i], torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in picked)


def _tiles(name: str, outs: list[torch.Tensor]) -> int:
    """GEMM output tiles of a matmul (rows × columns, per batch) or an implicit-GEMM
    convolution (N·H·W × output channels); 0 for other ops."""
    if not outs:
        return 0
    shape = list(outs[0].shape)
    if name in _MATMULS and len(shape) >= 2:
        rows, cols, batch = shape[-2], shape[-1], math.prod(shape[:-2])
    elif "conv" in name and "backward" not in name and len(shape) >= 3:
        rows, cols, batch = shape[0] * math.prod(shape[2:]), shape[1], 1
    else:
        return 0
    return batch * math.ceil(rows / TILE) * math.ceil(cols / TILE)


def wave_efficiency(spec: GpuSpec, tiles: int) -> float:
    """Share of the SMs busy over a GEMM's waves of tiles (1 for a non-GEMM)."""
    if tiles <= 0:
        return 1.0
    waves = math.ceil(tiles / spec.sms)
    return tiles / (waves * spec.sms)


def kernel_ns(spec: GpuSpec, cost: OpCost) -> int:
    """The roofline time of ``cost`` on ``spec`` (0 for an op that launches no kernel)."""
    if cost.flops == 0 and cost.nbytes == 0:
        return 0
    peak = spec.peak_flops(cost.dtype, cost.tensor_cores) * wave_efficiency(spec, cost.tiles)
    compute_s = cost.flops / peak
    bandwidth = spec.memory_bytes_per_s * MEMORY_FRACTION
    memory_s = cost.nbytes / bandwidth
    # NB: the layout's transposes are kernels of their own, before and after: they add
    on_tensor_cores = cost.tensor_cores and cost.dtype in spec.tensor_flops
    transpose_s = cost.transpose_bytes / bandwidth if on_tensor_cores else 0.0
    return max(MIN_KERNEL_NS, round((max(compute_s, memory_s) + transpose_s) * 1e9))


def predict_op_ns(
    spec: GpuSpec, func: Any, args: Any, kwargs: Any, out: Any, *, allow_tf32: bool | None = None
) -> int:
    """An aten op's predicted time on ``spec``: :func:`op_cost` then :func:`kernel_ns`."""
    return kernel_ns(spec, op_cost(func, args, kwargs, out, allow_tf32=allow_tf32))
