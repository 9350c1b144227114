"""The observer effect (issue 49): each figure gpuwatch states for a step, against the same
script's own clock in a plain run, side by side, alternating.

    python benchmarks/observer_effect.py [--rounds 3] [--steps 300] [KIND ...]

KIND: the workloads of ``tests/programs/self_timed.py`` (``loader``, ``sleepy``, ``python``,
``tiny``, ``large``; default all). Per round each kind runs plainly (``python self_timed.py``,
which times its second epoch with ``time.perf_counter``) and under ``gpuwatch profile`` (the
report's ``after_first`` figures: the stated unprofiled step and input wait per step); the best
round of each (the least preempted) is compared. Goal: the step and the input wait within 20% of
the plain run's, the input share within 5 points.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "programs" / "self_timed.py"
KINDS = ("loader", "sleepy", "python", "tiny", "large")


def _run(cmd: list[str], out: Path) -> None:
    env = {**os.environ, "SELF_TIMED_OUT": str(out)}
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True)


def _round(kind: str, steps: int, tmp: Path) -> tuple[dict[str, float], dict[str, float]]:
    own, report = tmp / "own.json", tmp / "r.json"
    _run([sys.executable, str(SCRIPT), kind, str(steps)], own)
    plain = json.loads(own.read_text())
    gw = [sys.executable, "-m", "gpuwatch", "profile", "-q", "--json", str(report)]
    _run([*gw, str(SCRIPT), kind, str(steps)], own)
    after = json.loads(report.read_text())["time"]["after_first"]
    n = after["steps"]
    stated = {
        "step_ms": after["wall_unprofiled_ms"] / n,
        "input_ms": after["host_ms"]["input"] / n,
        "profiled_step_ms": json.loads(own.read_text())["step_ms"],
    }
    return plain, stated


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("kinds", nargs="*", default=list(KINDS))
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}; best of {args.rounds} rounds, ms per step")
    print(
        f"{'kind':7s} {'plain':>7s} {'stated':>7s} {'ratio':>6s} {'profiled':>8s}  "
        f"{'input plain':>11s} {'stated':>7s} {'ratio':>6s}  {'share plain':>11s} {'stated':>7s}"
    )
    with tempfile.TemporaryDirectory() as d:
        for kind in args.kinds:
            runs = [_round(kind, args.steps, Path(d)) for _ in range(args.rounds)]
            plain = min((p for p, _ in runs), key=lambda p: p["step_ms"])
            gw = min((g for _, g in runs), key=lambda g: g["profiled_step_ms"])
            share_p = 100 * plain["input_ms"] / plain["step_ms"]
            share_g = 100 * gw["input_ms"] / gw["step_ms"]
            in_ratio = gw["input_ms"] / plain["input_ms"] if plain["input_ms"] > 0.01 else 1.0
            print(
                f"{kind:7s} {plain['step_ms']:7.3f} {gw['step_ms']:7.3f} "
                f"{gw['step_ms'] / plain['step_ms']:5.2f}x {gw['profiled_step_ms']:8.3f}  "
                f"{plain['input_ms']:11.3f} {gw['input_ms']:7.3f} {in_ratio:5.2f}x  "
                f"{share_p:10.0f}% {share_g:6.0f}%"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
