"""How a profiled run ends on a signal: the report is written, then gpuwatch exits as the shell
expects (128 + the signal's number).

While the script runs, SIGTERM (schedulers: SLURM, Kubernetes, ``timeout``) and SIGHUP (the
terminal or ssh session closed) raise :class:`Terminated` in the main thread, the way Python
turns SIGINT into ``KeyboardInterrupt``: the script's ``finally`` blocks run, then gpuwatch writes
the report. Once the script has stopped, further SIGINT/SIGTERM/SIGHUP are only noted
(:meth:`Signals.deferring`): a second Ctrl-C may cut a wait short, never the report.

A signal that was ignored when gpuwatch started stays ignored, for gpuwatch and the script alike
(``nohup`` ignores SIGHUP; a background job of a non-interactive shell ignores SIGINT), exactly as
``python script.py`` would leave it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

#: Signals that end a run with a report (SIGINT is Python's own KeyboardInterrupt).
ENDING = (signal.SIGTERM, signal.SIGHUP)

#: How long after a dropped :class:`Terminated` its signal is sent again: long enough for the
#: main thread to have left the hook that saw it drop.
RESEND_AFTER_S = 0.01


class Terminated(BaseException):  # noqa: N818 - named like KeyboardInterrupt, its sibling
    """SIGTERM or SIGHUP arrived while the script ran (a BaseException, like KeyboardInterrupt,
    so the script's ``except Exception`` does not swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Signals:
    """The signal handlers of one run, installed and restored on the main thread only."""

    def __init__(self) -> None:
        self.received: list[int] = []
        """Signals that arrived after the script stopped, in order."""
        self.hurry = threading.Event()
        """Set by a signal that arrives while the report is being written: cut waits short."""
        self._main = threading.current_thread() is threading.main_thread()
        self._at_start: dict[int, Any] = {}
        """Each handled signal's disposition when the run began (restored at the end)."""
        if self._main:
            for signum in (signal.SIGINT, *ENDING):
                self._at_start[signum] = signal.getsignal(signum)
        self._hook_before: Callable[[Any], Any] | None = None
        self._in_hook = False
        self._again: int | None = None

    def _install(
        self, signums: tuple[int, ...], handler: Callable[[int, FrameType | None], Any]
    ) -> None:
        if not self._main:
            return  # handlers can only be set on the main thread (a notebook, a test)
        for signum in signums:
            if self._at_start[signum] is signal.SIG_IGN:
                continue  # ignored when we started (nohup, a background job): stays ignored
            signal.signal(signum, handler)

    def raising(self) -> Signals:
        """While the script runs: SIGTERM and SIGHUP raise :class:`Terminated` (SIGINT keeps
        Python's KeyboardInterrupt)."""
        self._install(ENDING, self._raise_terminated)
        if self._main and self._hook_before is None:
            self._hook_before = sys.unraisablehook
            sys.unraisablehook = self._unraisable
        return self

    def _raise_terminated(self, signum: int, frame: FrameType | None) -> None:
        if self._in_hook:
            self._again = signum  # raised here it would be dropped: sent again on the way out
            return
        raise Terminated(signum)

    def _unraisable(self, unraisable: Any) -> None:
        """A Python signal handler runs wherever the main thread is, a weakref callback or a
        ``__del__`` included (torch and the fake GPU's memory free tensors there), and the
        interpreter drops what those raise. A :class:`Terminated` dropped so would leave the
        script running where, without gpuwatch, the signal had ended it: its signal is sent
        again a moment later, to be raised in ordinary code."""
        self._in_hook = True
        try:
            if isinstance(unraisable.exc_value, Terminated):
                self._again = unraisable.exc_value.signum
            else:
                (self._hook_before or sys.__unraisablehook__)(unraisable)
        finally:
            self._in_hook = False
            signum, self._again = self._again, None
            if signum is not None:
                again = threading.Timer(RESEND_AFTER_S, os.kill, (os.getpid(), signum))
                again.daemon = True
                again.name = "gpuwatch-signal-again"
                again.start()

    def deferring(self) -> Signals:
        """Once the script stopped: SIGINT, SIGTERM and SIGHUP are noted, never raised (the
        script's own handlers, if it set any, are done with)."""
        self._install((signal.SIGINT, *ENDING), self._note)
        return self

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        self.hurry.set()

    def restore(self) -> None:
        """Puts back the dispositions of the start, and the unraisable hook unless the script
        set its own."""
        if self._hook_before is not None:
            if sys.unraisablehook == self._unraisable:
                sys.unraisablehook = self._hook_before
            self._hook_before = None
        for signum, handler in self._at_start.items():
            if handler is None:
                continue  # set from C, where Python cannot put it back: leave ours
            signal.signal(signum, handler)

    def __enter__(self) -> Signals:
        return self.raising()

    def __exit__(self, *exc: object) -> None:
        self.restore()
