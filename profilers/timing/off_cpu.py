"""The script's time off the CPU between two ops, under ``--fake-cuda --gpu NAME``.

There the host half is the script thread's CPU time (:meth:`profilers.timing.oplog.OpLog.
_simulated`): its wall clock holds the simulation's pauses, which a real run does not have. CPU
time alone misses what the script spends off the CPU of its own accord: ``time.sleep``, a file
read, a lock or the GIL another thread of the script holds, a queue. A real run waits for those.

So each interval between two ops is also read on the wall clock, and its time off the CPU is
counted when the thread blocked by itself (a voluntary context switch, ``getrusage``'s
``ru_nvcsw``), less the CPU time that threads which are not the script's used meanwhile:
autograd's device threads (they run the backward's simulated ops while the script's thread
waits in ``.backward()``) and the profiler's own (the live view's sender holding the GIL). Not
the process's whole CPU time: torch's intra-op workers spin on a CPU after the fake GPU's real
values are computed, which a GPU run does not do and the script does not wait for. An interval
in which the thread was only preempted (a loaded machine) counts nothing: a busy neighbour is
not the script's cost. Where ``RUSAGE_THREAD`` is missing (not Linux) nothing is counted.
"""

from __future__ import annotations

import resource
import threading
from time import clock_gettime_ns, perf_counter_ns, pthread_getcpuclockid, thread_time_ns

from profilers.registry import own_threads_alive

_THREAD = getattr(resource, "RUSAGE_THREAD", None)


class OffCpu:
    """Reads one thread's time off the CPU from one :meth:`since` to the next (call it on
    that thread only)."""

    __slots__ = ("cpu", "others", "switches", "threads", "wall")

    def __init__(self) -> None:
        self.wall = -1
        self.cpu = self.switches = self.threads = 0
        self.others: dict[int, int] = {}
        """The CPU clock of each thread that is not the script's -> its last reading."""

    def since(self) -> int:
        """ns this thread spent off the CPU, blocked by itself, since the last call (0 at the
        first call, without ``RUSAGE_THREAD``, or when it was only preempted)."""
        if _THREAD is None:
            return 0
        wall, cpu = perf_counter_ns(), thread_time_ns()
        switches = resource.getrusage(_THREAD).ru_nvcsw
        if threading.active_count() != self.threads:
            self._watch()
        others = self._others()
        off = 0
        if self.wall >= 0 and switches != self.switches:
            off = max(0, wall - self.wall - (cpu - self.cpu) - others)
        self.wall, self.cpu, self.switches = wall, cpu, switches
        return off

    def _others(self) -> int:
        """The CPU time the watched threads used since the last reading."""
        used = 0
        for clock, last in list(self.others.items()):
            try:
                now = clock_gettime_ns(clock)
            except OSError:  # NB: the thread ended; its time since the last reading is lost
                del self.others[clock]
                continue
            used += now - last
            self.others[clock] = now
        return used

    def _watch(self) -> None:
        """The threads that are not the script's, again (a thread started or ended)."""
        me = threading.get_ident()
        found = set(own_threads_alive())
        found.update(t for t in threading.enumerate() if isinstance(t, threading._DummyThread))
        for t in found:
            if t.ident is None or t.ident == me:
                continue
            try:
                # NB: from 0, all its time: autograd makes its device threads in the first
                # backward, inside the interval the next reading closes
                self.others.setdefault(pthread_getcpuclockid(t.ident), 0)
            except OSError:
                continue
        self.threads = threading.active_count()
