"""SIGTERM and SIGHUP close an app the way ``q`` does: its ``on_unmount`` runs (the live app stops
its script and writes the report), and Textual restores the terminal. Without this, either signal
kills the process where it stands and leaves the terminal in the alternate screen, raw mode."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any

from textual.app import App

from gpuwatch.interrupts import ENDING


def close_on_signals(on_signal: Callable[[int], None]) -> None:
    """From a running app's ``on_mount``: call ``on_signal(signum)`` on the event loop for
    SIGTERM and SIGHUP (a signal ignored at start, as under ``nohup``, stays ignored)."""
    loop = asyncio.get_running_loop()
    for signum in ENDING:
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError, ValueError):
            return  # not the main thread, or no signals here: nothing to catch


def run_restoring_signals(app: App[Any]) -> None:
    """``app.run()``, then SIGTERM and SIGHUP back as they were (asyncio leaves its own wake-up
    handler behind when its loop closes)."""
    saved = {signum: signal.getsignal(signum) for signum in ENDING}
    try:
        app.run()
    finally:
        for signum, handler in saved.items():
            if handler is not None:
                signal.signal(signum, handler)
