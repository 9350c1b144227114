"""Replayed as recorded, a step must give back the measured one (issue 26: on a GPU within 10%):
``python .ci/check_replay.py RUN.json [RUN2.json ...]`` on reports of ``gpuwatch profile
--what-if`` on a GPU.

For each report: the what-if's step replayed as recorded (``what_if.as_recorded_ms``: the
typical step's ops, their CUDA-event times and each op's host time the median over
``steps_median`` steps) against the same steps' wall time measured on the host (the time
view's ``wall_ms``, their median); both with the profiler in them. Prints both, and the
unprofiled figures beside them; exit code 1 when one is off by more than 10% or a report has
nothing to compare."""

from __future__ import annotations

import json
import sys
from statistics import median
from typing import Any

TOLERANCE = 0.10


def compare(doc: dict[str, Any]) -> tuple[list[str], bool]:
    """The lines to print for one report, and whether its replay is within :data:`TOLERANCE`."""
    what = doc.get("what_if")
    time = doc.get("time")
    if not what or not time:
        return [
            "  no what_if or no time section: nothing to compare (run on a GPU with --what-if)"
        ], False
    if what.get("measured") != "replayed":
        return [f"  what_if is {what.get('measured')!r}, not replayed from CUDA events"], False
    last, over = what["step"], what["steps_median"]
    steps = [s for s in time["steps"] if last - over < s["step"] <= last]
    if not steps:
        return [f"  the time view kept none of steps {last - over + 1}..{last}"], False
    measured = median(s["wall_ms"] for s in steps)
    unprofiled = median(s["wall_unprofiled_ms"] for s in steps)
    replayed = what["as_recorded_ms"]
    error = replayed / measured - 1 if measured > 0 else float("inf")
    ok = abs(error) <= TOLERANCE
    return [
        f"  steps {steps[0]['step']}..{steps[-1]['step']} ({len(steps)}; {what['ops']} ops a step, "
        f"{what['ops_dropped']} dropped)",
        f"  measured step (host wall, median):      {measured:10.3f} ms",
        f"  replayed as recorded (CUDA-event times): {replayed:10.3f} ms   {100 * error:+.1f}%"
        + ("" if ok else f"   <-- off by more than {100 * TOLERANCE:.0f}%"),
        f"  unprofiled: measured (wall less the profiler's own) {unprofiled:.3f} ms, "
        f"replayed {what['unprofiled_ms']:.3f} ms",
    ], ok


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    all_ok = True
    for path in argv:
        with open(path) as f:
            doc = json.load(f)
        lines, ok = compare(doc)
        print(path)
        print("\n".join(lines))
        all_ok &= ok
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
