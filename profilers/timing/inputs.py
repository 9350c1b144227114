"""Input waits: the host's time inside a DataLoader iterator's ``__next__``, charged to the line
that pulls the batch (the ``for x, y in loader:`` line).

Patched on ``torch.utils.data.dataloader._BaseDataLoaderIter``, the base of both of PyTorch's
loader iterators (single-process and multi-process), so every ``DataLoader`` is seen whatever its
``num_workers``; undone by the profile's ExitStack like every other patch (profilers/patches.py).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from profilers.timing.timeline import INPUT


def patch_input(stack: ExitStack, recorder: Any, set_attr: Callable[..., None]) -> None:
    """Times ``__next__`` of every DataLoader iterator on the profile's own thread."""
    try:
        from torch.utils.data.dataloader import _BaseDataLoaderIter
    except ImportError:  # a torch without it: no input waits (the report says 0)
        return
    original = _BaseDataLoaderIter.__next__

    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        enter = time.perf_counter_ns()
        st: Any = getattr(recorder.local, "s", None)
        clock = None if st is None or not recorder.active else st.clock
        if clock is None:
            return original(self)
        # NB: the clock is off while the loader works: ops it runs here (collate's stack, on
        # the profile's thread when num_workers=0) are part of the wait, not host work at some
        # library line; the mode's own cost on them (a few ops per batch) stays in the wait.
        st.clock = None
        start = time.perf_counter_ns()
        try:
            return original(self)
        finally:
            end = time.perf_counter_ns()
            st.clock = clock
            try:
                site = recorder.site_for(sys._getframe(1))
                clock.wait(site, INPUT, None, enter, start, end, time.perf_counter_ns())
            except Exception as exc:  # never into user code: the batch is returned untimed
                recorder.internal_error("DataLoader.__next__", exc)

    set_attr(stack, _BaseDataLoaderIter, "__next__", __next__)
