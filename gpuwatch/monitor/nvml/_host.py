"""The host side of a GPU process: psutil lookups, and signals that reach only the process meant."""

from __future__ import annotations

import os

import psutil


class HostProcesses:
    """psutil lookups with the per-process state ``cpu_percent`` needs between ticks."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def lookup(self, pid: int) -> tuple[psutil.Process, bool] | None:
        """The live process and whether its cpu_percent is primed; None if it has gone."""
        proc = self._procs.get(pid)
        primed = True
        try:
            if proc is None or not proc.is_running():
                proc = psutil.Process(pid)
                proc.cpu_percent(None)  # primes the counter; the next call has a real value
                primed = False
                self._procs[pid] = proc
        except psutil.NoSuchProcess:
            self._procs.pop(pid, None)
            return None
        except psutil.AccessDenied:
            return None
        return proc, primed

    @property
    def pids(self) -> set[int]:
        """The processes looked up and still running at the last :meth:`prune`."""
        return set(self._procs)

    def prune(self) -> None:
        """Forget processes that have exited, so the cache does not grow on a long run."""
        for pid, proc in list(self._procs.items()):
            if not proc.is_running():
                del self._procs[pid]


def send_signal_checked(pid: int, signum: int, start_time: float | None) -> None:
    """``os.kill`` once the pid is still the process that started at ``start_time``: a pid is
    reused once its process exits, and a signal must never reach the stranger that got it."""
    if start_time is not None:
        try:
            now = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            raise ProcessLookupError(pid) from None
        except psutil.AccessDenied:
            now = start_time  # cannot read it: os.kill below will say whether we may
        if abs(now - start_time) > 0.01:
            raise ProcessLookupError(pid)
    os.kill(pid, signum)
