"""What printing a GPU tensor reads, counted as it happens.

NB: ``torch._tensor_str._str`` (behind ``print``, ``repr``, ``str``, f-strings) runs with every
dispatch mode off, so a mode sees none of a print's reads, which on a GPU are many and differ by
dtype (torch/_tensor_str.py ``_Formatter``): an ``.item()`` per element shown (integers), or a
``masked_select`` then ``.item()`` for the values' integrality, ratio and width (floats), then
a blocking ``tolist()`` per row shown. So a print runs here with gpuwatch's own modes kept on
(the profiler's, the fake GPU's) and every other mode off: the reads reach the same rules as any
op, charged to the line that printed, with their bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

KEPT_ON_PRINT = "gpuwatch_kept_on_print"
"""A class attribute of the dispatch modes that stay on while a tensor prints."""


@contextmanager
def own_modes_only(bottom: object = None) -> Iterator[None]:
    """Every dispatch mode off, as torch's printing has them, except gpuwatch's own; ``bottom``
    (a mode) goes under them when no mode of its type is there."""
    from torch.utils._python_dispatch import _disable_current_modes, _pop_mode, _push_mode

    with _disable_current_modes() as popped:
        kept = [m for m in reversed(popped) if getattr(m, KEPT_ON_PRINT, False)]  # bottom first
        if bottom is not None and not any(type(m) is type(bottom) for m in kept):
            kept.insert(0, bottom)
        for m in kept:
            _push_mode(m)
        try:
            yield
        finally:
            for _ in kept:
                _pop_mode()


def _on_a_device(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type not in ("cpu", "meta")


def _functorch_wrapped(t: object) -> bool:
    functorch = getattr(torch._C, "_functorch", None)
    return functorch is not None and bool(functorch.is_functorch_wrapped_tensor(t))


def counted_str(original: Callable[..., str], active: Callable[[], bool]) -> Callable[..., str]:
    """``torch._tensor_str._str`` whose reads of a GPU tensor are counted while ``active()``."""
    from torch._tensor_str import _str_intern

    def _str(self: torch.Tensor, *, tensor_contents: object = None) -> str:
        if not (active() and _on_a_device(self)) or _functorch_wrapped(self):
            return original(self, tensor_contents=tensor_contents)
        # NB: without torch's _DisableFuncTorch guard: it is there for functorch's wrapped
        # tensors (printed by torch's own _str above), and with a mode on under it a view
        # printed twice failed ("Attempted to make a tensor into a differentiable view").
        with torch.no_grad(), own_modes_only():
            return str(_str_intern(self, tensor_contents=tensor_contents))  # type: ignore[no-untyped-call]

    return _str
