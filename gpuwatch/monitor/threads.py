"""The monitor's own threads, marked as gpuwatch's without importing the profiler.

``gpuwatch top`` and ``gpuwatch export`` run where torch and the profiler are absent or unwanted,
yet their threads (NVML sampling, the exporter's server) also run inside ``gpuwatch profile``
(the GPU timeline) and in the test suite's leak check. The profiler knows a thread as ours by the
class attribute ``gpuwatch_own_thread`` (``profilers.registry.OWN_THREAD_FLAG``), so the monitor
declares it here instead of importing ``profilers.registry``.
"""

from __future__ import annotations

import threading


class OwnThread(threading.Thread):
    """A thread of gpuwatch's own: a profile does not count its ops, and a run does not wait for
    it as it waits for the script's threads (the same contract as ``profilers.registry.OwnThread``)."""

    gpuwatch_own_thread = True
