"""How a profiled run ends on a signal: the report is written, then gpuwatch exits with 128 + the
signal's number, as the shell expects.

While the script runs, SIGTERM (a scheduler, ``timeout``) and SIGHUP (the terminal closed) raise
:class:`Terminated` as SIGINT raises ``KeyboardInterrupt``, so the script's ``finally`` blocks
run first. Once it has stopped, further signals are only noted: a second Ctrl-C may cut a wait
short, never the report. A signal ignored at the start (``nohup``, a background job) stays
ignored, as ``python script.py`` would leave it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from profilers.registry import OwnThread

#: Signals that end a run with a report (SIGINT is Python's own KeyboardInterrupt).
ENDING = (signal.SIGTERM, signal.SIGHUP)

#: How long after a dropped :class:`Terminated` its signal is sent again (the main thread has
#: left the hook that saw it drop by then).
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
        self._at_start: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}
        """Each handled signal's disposition when the run began (restored at the end)."""
        if self._main:
            for signum in (signal.SIGINT, *ENDING):
                self._at_start[signum] = signal.getsignal(signum)
        self._hook_before: Callable[[sys.UnraisableHookArgs], object] | None = None
        self._in_hook = 0
        """How deep the main thread is in :meth:`_unraisable` (it may meet one of its own)."""
        self._again: int | None = None
        self._sender: _SendAgain | None = None

    def _install(
        self, signums: tuple[int, ...], handler: Callable[[int, FrameType | None], object]
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

    def _unraisable(self, unraisable: sys.UnraisableHookArgs) -> None:
        """A signal handler may run in a weakref callback or ``__del__`` (where torch and the fake
        GPU free tensors), whose exceptions are dropped: a :class:`Terminated` dropped so would
        leave running a script the signal alone had ended, so the signal is sent again."""
        if threading.current_thread() is not threading.main_thread():
            # NB: signal handlers run on the main thread only: a hook running elsewhere must
            # not make one defer (it could read _again before the handler wrote it)
            (self._hook_before or sys.__unraisablehook__)(unraisable)
            return
        self._in_hook += 1
        try:
            if isinstance(unraisable.exc_value, Terminated):
                self._again = unraisable.exc_value.signum
            else:
                (self._hook_before or sys.__unraisablehook__)(unraisable)
        finally:
            self._in_hook -= 1
            if not self._in_hook:
                signum, self._again = self._again, None
                if signum is not None:
                    self._sender = _SendAgain(signum)
                    self._sender.start()

    def deferring(self) -> Signals:
        """Once the script stopped: SIGINT, SIGTERM and SIGHUP are noted, never raised (the
        script's own handlers are done with)."""
        self._install((signal.SIGINT, *ENDING), self._note)
        sender, self._sender = self._sender, None
        if sender is not None and sender.call_off():
            # NB: the script ended before its signal was sent again: noted here, not lost when
            # the process exits first (a daemon thread) nor sent once SIG_DFL is back
            self._note(sender.signum, None)
        return self

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        self.hurry.set()

    def restore(self) -> None:
        """Puts back the start's dispositions, and the unraisable hook unless the script set one."""
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


class _SendAgain(OwnThread):
    """Sends a dropped :class:`Terminated`'s signal again unless called off first (gpuwatch's
    own thread: the profile neither counts it nor waits for it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(name="gpuwatch-signal-again", daemon=True)
        self.signum = signum
        self._lock = threading.Lock()
        self._off = threading.Event()
        self._sent = False

    def run(self) -> None:
        if self._off.wait(RESEND_AFTER_S):
            return
        with self._lock:
            if not self._off.is_set():
                os.kill(os.getpid(), self.signum)
                self._sent = True

    def call_off(self) -> bool:
        """Whether the signal was still unsent (it never will be now)."""
        with self._lock:
            self._off.set()
            return not self._sent
