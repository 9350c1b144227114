"""SIGTERM and SIGHUP close an app the way ``q`` does: its ``on_unmount`` runs (the live app stops
its script and writes the report), and Textual restores the terminal. Without this, either signal
kills the process where it stands and leaves the terminal in the alternate screen, raw mode."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable

from textual.app import App, ReturnType

from gpuwatch.monitor.threads import OwnThread

#: The signals that end an app as they end a profiled run (SIGINT is the app's own key):
#: the same pair as gpuwatch/profile/interrupts.py's, named here so ``gpuwatch top`` loads
#: nothing of the profile half.
ENDING = (signal.SIGTERM, signal.SIGHUP)

#: Signals whose handlers Textual's driver sets (and never puts back).
_TEXTUAL_SIGNALS = (signal.SIGCONT, signal.SIGTSTP)


def close_on_signals(on_signal: Callable[[int], None]) -> None:
    """From a running app's ``on_mount``: call ``on_signal(signum)`` on the event loop for
    SIGTERM and SIGHUP (a signal ignored at start, as under ``nohup``, stays ignored)."""
    loop = asyncio.get_running_loop()
    # NB: Textual's driver runs its SIGCONT/SIGTSTP handlers inside the signal handler, and they
    # write to the terminal's queue; one that lands while the main thread is inside that queue's
    # put (a closed terminal sends SIGHUP and SIGCONT) deadlocks it. On the loop they are safe.
    for signum in _TEXTUAL_SIGNALS:
        handler = signal.getsignal(signum)
        if callable(handler):
            try:
                loop.add_signal_handler(signum, handler, signum, None)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread: Textual's own stays
    for signum in ENDING:
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError, ValueError):
            return  # not the main thread, or no signals here: nothing to catch


#: Seconds an app may take to close once its own work is done (the report written) before the
#: process exits anyway.
SHUTDOWN_S = 5.0


class ShutdownGuard:
    """Bounds an app's last steps: once :meth:`arm` is called (the app's own work is done), the
    process exits with ``exit_code()`` if ``app.run()`` has not returned within ``bound_s``, the
    terminal's settings put back and one line saying why. NB: the hang seen in the field was
    Textual's writer queue deadlocked by its SIGCONT handler (see :func:`close_on_signals`)."""

    def __init__(self, exit_code: Callable[[], int], bound_s: float = SHUTDOWN_S) -> None:
        self._exit_code = exit_code
        self.bound_s = bound_s
        self._returned = threading.Event()
        self._armed = False
        self._enabled = False
        """Only a real run (``run_restoring_signals``) may end the process: an app driven by
        ``App.run_test()`` in a test runner's process must never ``os._exit`` it."""
        self._tty: tuple[int, list[int | list[bytes | int]]] | None = None
        try:
            import termios

            fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
            if os.isatty(fd):
                self._tty = (fd, termios.tcgetattr(fd))
        except (OSError, ValueError, ImportError):
            pass  # not a terminal: nothing to put back

    def arm(self) -> None:
        """From the app's ``on_unmount``, once the report is out (main thread)."""
        if self._armed or not self._enabled:
            return
        self._armed = True
        if threading.current_thread() is threading.main_thread():
            for signum in _TEXTUAL_SIGNALS:  # nothing left for them to redraw: see above
                signal.signal(signum, signal.SIG_DFL)
        OwnThread(target=self._watch, name="gpuwatch-shutdown", daemon=True).start()

    def enable(self) -> None:
        """The app is about to ``run()`` for real (not under a test's ``run_test()``)."""
        self._enabled = True

    def returned(self) -> None:
        self._returned.set()

    def _watch(self) -> None:
        if self._returned.wait(self.bound_s):
            return
        code = self._exit_code()
        # NB: the terminal may be gone or stalled: a write that blocks must not hold the exit.
        writer = OwnThread(target=self._restore_terminal, daemon=True)
        writer.start()
        writer.join(0.5)
        os._exit(code)

    def _restore_terminal(self) -> None:
        try:
            if self._tty is not None:
                import termios

                fd, attrs = self._tty
                termios.tcsetattr(fd, termios.TCSANOW, attrs)
                os.write(fd, b"\x1b[?1049l\x1b[?25h")
            os.write(
                2,
                f"gpuwatch: the terminal did not close within {self.bound_s:g} s; exiting "
                "(the reports are written)\n".encode(),
            )
        except (OSError, ValueError):
            pass  # the terminal is gone: the exit is what counts


def run_restoring_signals(app: App[ReturnType], guard: ShutdownGuard | None = None) -> None:
    """``app.run()``, then SIGTERM, SIGHUP (asyncio leaves its own wake-up handler behind when
    its loop closes), SIGCONT and SIGTSTP (Textual's) back as they were; ``guard`` learns that
    the app returned."""
    saved = {signum: signal.getsignal(signum) for signum in (*ENDING, *_TEXTUAL_SIGNALS)}
    if guard is not None:
        guard.enable()
    try:
        app.run()
    finally:
        if guard is not None:
            guard.returned()
        for signum, handler in saved.items():
            if handler is not None:
                signal.signal(signum, handler)
