"""What ``gpuwatch top`` costs: one sampling tick, and the app's own CPU over a run.

    python benchmarks/top_cost.py [--seconds 30] [--intervals 0.5,1,2] [--real] [--peer CMD]

* tick: mean wall time of ``Sampler.snapshot()`` for the FakeBackend and for the real backend over
  a stubbed pynvml (the cost gpuwatch adds around NVML: dataclasses, psutil lookups); with
  ``--real``, the real backend on this machine's GPUs.
* cpu: ``gpuwatch top`` runs in a real pseudo-terminal (160x48) for ``--seconds``; its CPU time
  (user + system, children included) divided by wall time. The peer (nvitop where it is installed,
  or ``--peer "nvtop -d {interval}"``...) runs the same way right after, at each interval, for a
  ratio in one run. Both read the same stub NVML (``benchmarks/stub_pynvml``: two GPUs, four
  processes, values moving each second) unless ``--real``.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import os
import pty
import shlex
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuwatch.monitor.nvml import FakeBackend, Sampler  # noqa: E402


def tick_cost_ms(sampler: Sampler, n: int = 200) -> float:
    sampler.snapshot()
    start = time.perf_counter()
    for _ in range(n):
        sampler.snapshot()
    return (time.perf_counter() - start) / n * 1000


def stub_backend():
    from gpuwatch.monitor.nvml._real import RealBackend
    from tests.stub_nvml import StubNvml, default_device, proc

    devices = [default_device(i) for i in range(2)]
    for d in devices:
        d["compute"] = [proc(os.getpid(), 1 << 30)]
    return RealBackend(nvml=StubNvml(devices))


def cpu_share(cmd: list[str], seconds: float, extra_env: dict[str, str]) -> float:
    """CPU seconds per wall second of ``cmd`` running in a 160x48 pseudo-terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="160", LINES="48", **extra_env)
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


def stub_env(pids: list[int]) -> dict[str, str]:
    """The environment that makes ``import pynvml`` the stub of ``benchmarks/stub_pynvml``."""
    here = Path(__file__).resolve().parent
    path = os.pathsep.join([str(here / "stub_pynvml"), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path.rstrip(os.pathsep), "GPUWATCH_STUB_PIDS": ",".join(map(str, pids))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--intervals", default="0.5,1,2", help="comma-separated, seconds")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each monitor per interval")
    ap.add_argument("--real", action="store_true", help="use this machine's GPUs, not the stub")
    ap.add_argument(
        "--peer",
        default="nvitop" if importlib.util.find_spec("nvitop") else "",
        help="another monitor's command line ({interval} is replaced), measured the same way; "
        "default nvitop where it is installed",
    )
    args = ap.parse_args()
    if args.peer == "nvitop":
        args.peer = f"{sys.executable} -m nvitop --interval {{interval}}"

    print(
        f"tick, FakeBackend (2 GPUs, 4 processes):  {tick_cost_ms(Sampler(FakeBackend(), background_pcie=False)):.3f} ms"
    )
    stub = Sampler(stub_backend(), background_pcie=True)
    print(f"tick, real backend over stub NVML (2 GPUs): {tick_cost_ms(stub):.3f} ms")
    stub.close()
    if args.real:
        from gpuwatch.monitor.nvml._real import RealBackend

        real = Sampler(RealBackend(), background_pcie=True)
        print(
            f"tick, real NVML ({real.gpu_count} GPUs, PCIe on its thread): {tick_cost_ms(real, 50):.3f} ms"
        )
        real.close()

    # Four idle processes stand for the GPU's processes: both monitors look them up on the host.
    sleepers = [subprocess.Popen(["sleep", "100000"]) for _ in range(4)]
    env = {} if args.real else stub_env([p.pid for p in sleepers])
    where = "real NVML" if args.real else "stub NVML, 2 GPUs, 4 processes"
    print(f"cpu over {args.seconds:g} s in a 160x48 pty ({where}), % of one core:")
    print("| interval | gpuwatch top | peer | gpuwatch / peer |")
    print("| --- | --- | --- | --- |")
    try:
        for interval in [float(i) for i in args.intervals.split(",")]:
            ours: list[float] = []
            theirs: list[float] = []
            for _ in range(args.rounds):
                cmd = [sys.executable, "-m", "gpuwatch", "top", "--interval", f"{interval:g}"]
                ours.append(cpu_share(cmd, args.seconds, env))
                if args.peer:
                    peer = shlex.split(args.peer.format(interval=f"{interval:g}"))
                    theirs.append(cpu_share(peer, args.seconds, env))
            a = statistics.median(ours)
            b = statistics.median(theirs) if theirs else float("nan")
            ratio = f"{a / b:.2f}" if theirs and b else "-"
            print(f"| {interval:g} s | {a * 100:.2f}% | {b * 100:.2f}% | {ratio} |", flush=True)
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
