"""What the energy counter's reads cost a profiled process: ``python benchmarks/energy_reads.py``
(``--real`` on a GPU machine: NVML itself; otherwise the real backend over the stub pynvml of
``benchmarks/stub_pynvml``, two GPUs, and the fake backend with 8).

``gpuwatch profile`` samples the GPUs on a thread of the profiled process: a snapshot every
0.5 s, and the energy counter alone every 20 ms (gpuwatch/monitor/gpu_timeline.py). Measured
here: the process's CPU time while its main thread sleeps, with the timeline's energy reads at
20 ms and with none (the snapshots alone), so the difference is the reads' own CPU, per second
of run, as a share of one core. It is CPU the thread takes, and the GIL it takes with it: a
bound on what the script can lose to it, not a timing of the script.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SECONDS = 3.0


def cpu_share(make: Callable[[], object], energy_interval_s: float) -> float:
    """The process's CPU per second of wall time while a timeline samples ``make()``."""
    from gpuwatch.monitor.gpu_timeline import GpuTimeline
    from gpuwatch.monitor.nvml import Sampler

    timeline = GpuTimeline(
        Sampler(make(), background_pcie=False),  # type: ignore[arg-type]
        0.5,
        energy_interval_s=energy_interval_s,
    )
    timeline.start()
    cpu, wall = time.process_time(), time.perf_counter()
    time.sleep(SECONDS)  # NB: the measuring window: the main thread does nothing meanwhile
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    timeline.stop()
    return cpu / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", action="store_true", help="NVML itself (a GPU machine)")
    args = parser.parse_args()
    from gpuwatch.monitor.nvml import FakeBackend

    if not args.real:  # NB: before gpuwatch's backend imports pynvml: the stub's is the one
        sys.path.insert(0, str(Path(__file__).resolve().parent / "stub_pynvml"))
    from gpuwatch.monitor.nvml._real import RealBackend

    name = "NVML" if args.real else "real backend, stub pynvml, 2 GPUs"
    backends: list[tuple[str, Callable[[], object]]] = [(name, RealBackend)]
    if not args.real:
        backends.append(("fake backend, 8 GPUs", lambda: FakeBackend(gpu_count=8)))
    for name, make in backends:
        without = cpu_share(make, energy_interval_s=3600.0)
        with_reads = cpu_share(make, energy_interval_s=0.02)
        print(
            f"{name}: CPU {100 * without:.2f}% of a core with the snapshots alone, "
            f"{100 * with_reads:.2f}% with the energy read every 20 ms "
            f"(+{100 * (with_reads - without):.2f} points)"
        )
    print(f"({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
