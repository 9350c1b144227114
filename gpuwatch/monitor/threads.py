"""The monitor's own threads, marked as gpuwatch's (``profilers.registry.OWN_THREAD_FLAG``)
without importing the profiler: ``top`` and ``export`` run where torch is absent or unwanted."""

from __future__ import annotations

import threading


class OwnThread(threading.Thread):
    """A thread of gpuwatch's own: a profile does not count its ops, and a run does not wait for
    it as it waits for the script's threads (the same contract as ``profilers.registry.OwnThread``)."""

    gpuwatch_own_thread = True
