"""How a tensor on the fake GPU prints and formats: as on a GPU, with placeholder values.

FakeTensor's own ``__repr__`` says ``FakeTensor(..., device='cuda:0', size=(4,))`` and its
``__format__`` refuses a format spec; on a GPU, ``print(t)`` shows ``tensor([0., 0.],
device='cuda:0')`` and ``f"{loss:.4f}"`` formats ``loss.item()`` (one sync). Here the values
are read through the fake GPU's mode (placeholders, counted by the profiler above it as on a
GPU: see profilers/counting/printing.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from profilers.counting.printing import own_modes_only
from profilers.fake_cuda.mode import GpuTensor


def _dtype_suffixes(t: torch.Tensor, empty: bool) -> list[str]:
    default = torch.get_default_dtype()
    complex_default = torch.cdouble if default == torch.double else torch.cfloat
    plain = (default,) if empty else (default, complex_default, torch.int64, torch.bool)
    return [] if t.dtype in plain else [f"dtype={t.dtype}"]


def placeholder_str(t: torch.Tensor) -> str:
    """What ``torch._tensor_str._str_intern`` prints for a strided GPU tensor holding ``t``'s
    placeholders (device, dtype, size, grad_fn and requires_grad suffixes as it gives them);
    the values are read from ``t`` through the modes on the stack."""
    from torch._tensor_str import PRINT_OPTS, _add_suffixes, _tensor_str

    prefix = "tensor("
    indent = len(prefix)
    device = getattr(t, "fake_device", t.device)
    suffixes: list[str] = []
    # NB: Note [Print tensor device] in torch/_tensor_str.py: a CUDA tensor shows its device
    # unless CUDA is the default device type and it is on the current GPU.
    if device.type != torch._C._get_default_device() or (
        device.type == "cuda" and torch.cuda.current_device() != device.index
    ):
        suffixes.append(f"device='{device}'")
    if t.numel() == 0:
        if t.dim() != 1:
            suffixes.append(f"size={tuple(t.shape)}")
        suffixes += _dtype_suffixes(t, empty=True)
        contents = "[]"
    else:
        if not PRINT_OPTS.edgeitems:
            suffixes.append(f"size={tuple(t.shape)}")
        suffixes += _dtype_suffixes(t, empty=False)
        contents = _tensor_str(t, indent)  # type: ignore[no-untyped-call]
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{type(t.grad_fn).__name__}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    out = str(_add_suffixes(prefix + contents, suffixes, indent, force_newline=False))  # type: ignore[no-untyped-call]
    if getattr(t, "_is_param", False):  # nn.Parameter.__repr__ on a GPU
        out = "Parameter containing:\n" + out
    return out


def fake_repr(
    original: Callable[[GpuTensor], str], ours: Callable[[object], bool], mode: Callable[[], object]
) -> Callable[[GpuTensor], str]:
    """``FakeTensor.__repr__`` that prints the fake GPU's tensors as a GPU prints them; a
    FakeTensor of another mode (the script's own) keeps its own repr. ``mode()`` makes the
    fake GPU's mode, put under gpuwatch's own when the print happens where it is off."""

    def __repr__(self: GpuTensor, *, tensor_contents: object = None) -> str:
        if not ours(self) or self.fake_device.type == "meta":
            return original(self)
        with torch.no_grad(), own_modes_only(bottom=mode()):
            return placeholder_str(self)

    return __repr__


def fake_format(
    original: Callable[[torch.Tensor, str], str], ours: Callable[[object], bool]
) -> Callable[[torch.Tensor, str], str]:
    """``FakeTensor.__format__`` as ``Tensor.__format__`` is for a plain tensor: a 0-dim
    tensor formats its ``.item()`` (one sync on a GPU), any other its ``str``."""

    def __format__(self: torch.Tensor, spec: str) -> str:
        if not ours(self):
            return original(self, spec)
        if self.dim() == 0:
            return format(self.detach().item(), spec)
        return object.__format__(self, spec)

    return __format__
