"""``--steps A:B``: profile steps A to B-1 only. Outside the window the dispatch mode is not on
the stack at all, nor the fast path's key on (the script runs at full speed), and the profiler's
patches count nothing.

The window opens and closes at step ends (an optimizer's step, ``profilers.step()``), on the
thread that ends the steps, which must be the profile's own (the mode stack is per thread).
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager

from profilers.counting.recorder import Recorder


class StepWindow:
    """Enters ``mode`` (the dispatch mode, or the fast path's key: a context entered once) when
    step ``start`` begins and leaves it when step ``stop`` begins (``stop`` None: at the
    profile's end); steps are numbered from 0."""

    def __init__(
        self, recorder: Recorder, mode: AbstractContextManager[object], start: int, stop: int | None
    ) -> None:
        self.recorder = recorder
        self.mode = mode
        self.start = start
        self.stop = stop
        self.steps = 0
        """Steps ended so far (inside the window or not)."""
        self.thread = threading.get_ident()
        self.entered = False
        self.done = False
        if start == 0:
            self._enter()
        else:
            recorder.active = False

    def _enter(self) -> None:
        self.mode.__enter__()
        self.entered = True
        self.recorder.active = True

    def leave(self) -> None:
        """Off the stack (the window closed, or the profile ends)."""
        if self.entered:
            self.entered = False
            self.recorder.active = False
            self.mode.__exit__(None, None, None)

    def on_step(self) -> None:
        """A step ended: step ``self.steps`` begins now."""
        self.steps += 1
        if self.done or threading.get_ident() != self.thread:
            return  # NB: another thread's step cannot move this thread's mode stack
        if not self.entered and self.steps == self.start:
            self._enter()
        elif self.entered and self.stop is not None and self.steps >= self.stop:
            self.leave()
            self.done = True

    @property
    def covered(self) -> list[int]:
        """``[first, end)`` of the steps profiled (end exclusive; what ran of them)."""
        if self.steps < self.start:
            return [self.start, self.start]
        end = self.steps if self.stop is None else min(self.stop, self.steps)
        return [self.start, max(self.start, end)]


def window_steps(window: StepWindow, seen: dict[str, object] | None) -> dict[str, object]:
    """The report's ``steps`` of a windowed profile: the steps the window covered of those seen."""
    first, end = window.covered
    return {
        "count": end - first,
        "source": seen["source"] if seen else "none",
        "window": [first, end],
        "seen": window.steps,
    }
