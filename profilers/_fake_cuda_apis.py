"""The everyday CUDA API of a training script, on the fake GPU: printing and formatting its
tensors, ``torch.save``, the memory statistics, the RNG state, CUDA graphs, NVTX ranges; and
one line naming the API for what cannot be simulated."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from profilers._fake_cuda_print import fake_format, fake_repr


def set_attr(stack: ExitStack, owner: Any, name: str, value: Any) -> None:
    """``owner.name = value`` until ``stack`` closes (deleted again where it was absent)."""
    sentinel = object()
    original = getattr(owner, name, sentinel) if name in vars(owner) else sentinel
    setattr(owner, name, value)
    if original is sentinel:
        stack.callback(delattr, owner, name)
    else:
        stack.callback(setattr, owner, name, original)


def patch_printing(stack: ExitStack, harness: Any) -> None:
    """``print(t)``, ``repr``, ``str`` and ``f"{t:.4f}"`` of the fake GPU's tensors."""
    from profilers._fake_cuda_mode import FakeCudaMode

    fake = harness.fake_type

    def ours(t: Any) -> bool:
        return getattr(t, "fake_mode", None) is harness.fake_mode

    set_attr(stack, fake, "__repr__", fake_repr(fake.__repr__, ours, lambda: FakeCudaMode(harness)))
    set_attr(stack, fake, "__format__", fake_format(fake.__format__, ours))
