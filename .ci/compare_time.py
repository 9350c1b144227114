"""The demos' time view on a real GPU (issue 30): ``python .ci/compare_time.py NAIVE.json
FIXED.json``, the reports of ``demos/single_gpu_training.py --variant naive`` and ``fixed``.

Prints each run's verdict and its median step's GPU busy and idle time (measured with CUDA
events) by cause, and the lines charged the most idle time; exit code 1 unless both GPU halves
were measured, the verdicts differ and the fixed run's GPU idles less per step."""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any


def view(path: str) -> dict[str, Any] | None:
    doc = json.load(open(path))
    t = doc.get("time") or {}
    steps = [
        s for s in t.get("steps", [])[1:] if (s.get("gpu") or {}).get("measured") == "measured"
    ]
    if not steps:
        print(f"{path}: the GPU half was not measured ({t.get('gpu')!r})")
        return None
    idle = statistics.median(s["gpu"]["idle_total_ms"] for s in steps)
    busy = statistics.median(s["gpu"]["busy_ms"] for s in steps)
    after = t.get("after_first")
    run = after or t["run"]  # the per-step figures' basis (the summary's)
    over = "over the steps after the first" if after else "over the run"
    causes = ", ".join(f"{k} {v:.2f} ms" for k, v in run["gpu"]["idle_ms"].items() if v > 0)
    print(
        f"{path}: {run['verdict']}; a step: busy {busy:.3f} ms, idle {idle:.3f} ms "
        f"(median of {len(steps)}); idle by cause {over}: {causes}"
    )
    for line in run["gpu"]["idle_lines"][:3]:
        print(f"    {line['ms']:9.2f} ms  {line['cause']:6s} {line['site']}")
    return {"verdict": run["verdict"], "idle": idle}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    naive, fixed = view(argv[0]), view(argv[1])
    if naive is None or fixed is None:
        return 1
    ok = naive["verdict"] != fixed["verdict"] and fixed["idle"] < naive["idle"]
    print(
        "naive and fixed: "
        + (
            "different verdicts, the fixed one idles less"
            if ok
            else "NOT as expected (the same verdict, or the fixed one idles as much)"
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
