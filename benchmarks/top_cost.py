"""What ``gpuwatch top`` costs: one sampling tick, and the app's own CPU over a run.

    python benchmarks/top_cost.py [--seconds 30] [--interval 1] [--real] [--peer "nvitop"]

* tick: mean wall time of ``Sampler.snapshot()`` for the FakeBackend and for the real backend over
  a stubbed pynvml (the cost gpuwatch adds around NVML: dataclasses, psutil lookups); with
  ``--real``, the real backend on this machine's GPUs.
* cpu: the app runs in a real pseudo-terminal (160x48) for ``--seconds``; its CPU time (user +
  system, children included) divided by wall time. ``--peer CMD`` runs another monitor (e.g.
  ``nvitop --interval 1``, ``nvtop -d 10``) the same way right after, for a ratio in one run.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import shlex
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuwatch.nvml import FakeBackend, Sampler  # noqa: E402


def tick_cost_ms(sampler: Sampler, n: int = 200) -> float:
    sampler.snapshot()
    start = time.perf_counter()
    for _ in range(n):
        sampler.snapshot()
    return (time.perf_counter() - start) / n * 1000


def stub_backend():
    from gpuwatch.nvml._real import RealBackend
    from tests.stub_nvml import StubNvml, default_device, proc

    devices = [default_device(i) for i in range(2)]
    for d in devices:
        d["compute"] = [proc(os.getpid(), 1 << 30)]
    return RealBackend(nvml=StubNvml(devices))


def cpu_share(cmd: list[str], seconds: float) -> float:
    """CPU seconds per wall second of ``cmd`` running in a 160x48 pseudo-terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="160", LINES="48")
    child = subprocess.Popen(
        cmd, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
    )
    os.close(slave)
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            try:
                if not os.read(master, 65536):
                    break
            except OSError:
                break

    threading.Thread(target=drain, daemon=True).start()
    proc = psutil.Process(child.pid)
    time.sleep(3.0)  # start-up (imports, first paint) is not the steady state
    before = _cpu(proc)
    t0 = time.monotonic()
    time.sleep(seconds)
    used = _cpu(proc) - before
    wall = time.monotonic() - t0
    child.terminate()
    try:
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        child.kill()
    stop.set()
    os.close(master)
    return used / wall


def _cpu(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass  # a child that exited between listing and reading: its time is gone with it
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--real", action="store_true", help="use this machine's GPUs")
    ap.add_argument("--peer", help="another monitor's command line, measured the same way")
    args = ap.parse_args()

    print(
        f"tick, FakeBackend (2 GPUs, 4 processes):  {tick_cost_ms(Sampler(FakeBackend(), background_pcie=False)):.3f} ms"
    )
    stub = Sampler(stub_backend(), background_pcie=True)
    print(f"tick, real backend over stub NVML (2 GPUs): {tick_cost_ms(stub):.3f} ms")
    stub.close()
    if args.real:
        from gpuwatch.nvml._real import RealBackend

        real = Sampler(RealBackend(), background_pcie=True)
        print(
            f"tick, real NVML ({real.gpu_count} GPUs, PCIe on its thread): {tick_cost_ms(real, 50):.3f} ms"
        )
        real.close()

    mode = [] if args.real else ["--demo"]
    ours = cpu_share(
        [sys.executable, "-m", "gpuwatch", "top", *mode, "--interval", str(args.interval)],
        args.seconds,
    )
    print(
        f"cpu, gpuwatch top {' '.join(mode)} at {args.interval:g} s over {args.seconds:g} s: "
        f"{ours * 100:.2f}% of a core"
    )
    if args.peer:
        theirs = cpu_share(shlex.split(args.peer), args.seconds)
        print(f"cpu, {args.peer} over {args.seconds:g} s: {theirs * 100:.2f}% of a core")
        print(f"ratio gpuwatch / peer: {ours / theirs:.2f}" if theirs else "peer used no CPU")


if __name__ == "__main__":
    main()
