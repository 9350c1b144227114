"""Where the time went, as a diff compares it (each report's ``time``): the
verdict and the unprofiled step, and each line's time, per step over the same basis on both
sides (:attr:`gpuwatch.analysis.diff.RunDiff.after_first`)."""

from __future__ import annotations

from collections.abc import Mapping

from profilers.records import Line
from profilers.report import Report
from profilers.timing.verdict import per_step


def run_time(report: Report, after_first: bool = True) -> dict[str, object] | None:
    """Where the run's time went, as its report measured it (its ``time``): the verdict
    and the step an unprofiled run would take (per step where steps ended, over the steps
    after the first where ``after_first`` and the report has them, else the whole run); None
    where it was not measured. Under ``--fake-cuda --gpu`` the GPU's predicted step, with its
    range (``low_ms``-``high_ms``) and its two parts (``host_part``: measured on the CPU
    that ran it; ``gpu_part``: the GPU model's) where the report has them: two GPUs compare
    by their GPU parts, the host's being the same script's on whatever CPU ran it."""
    t = report.time
    if not t:
        return None
    run, steps = per_step(t, after_first)
    gpu = run.get("gpu") or {}
    if gpu.get("per_step"):  # a typical step, predicted for a named GPU
        out: dict[str, object] = {
            "verdict": str(run["verdict"]),
            "per_step": True,
            "ms": round(float(gpu["wall_ms"]), 6),
            "measured_on": "predicted",
            "predicted_for": str(gpu.get("gpu")),
        }
        predicted: Mapping[str, object] = report.predicted or {}
        step = predicted.get("step")
        if isinstance(step, Mapping) and step.get("low_ms") is not None:
            # the prediction's range (profilers/timing/uncertainty.py): two runs whose ranges
            # overlap cannot be ranked
            out["low_ms"] = round(float(step["low_ms"]), 6)
            out["high_ms"] = round(float(step["high_ms"]), 6)
        for key, part in (("host_part", "host"), ("gpu_part", "gpu_model")):
            found = predicted.get(part)
            if isinstance(found, Mapping) and found.get("low_ms") is not None:
                out[key] = {k: round(float(found[k]), 6) for k in ("ms", "low_ms", "high_ms")}
        return out
    wall = float(run["wall_unprofiled_ms"])
    return {
        "verdict": str(run["verdict"]),
        "per_step": steps > 0,
        "over": "steps after the first" if run is not t["run"] else "the run",
        "ms": round(wall / steps if steps else wall, 6),
        "measured_on": "gpu" if gpu else "host",
    }


def line_time_ms(report: Report, line: Line | None, after_first: bool = True) -> float | None:
    """The time charged to ``line`` in ``report`` (idle GPU time on a GPU, host time otherwise),
    per step where steps ended (see :func:`run_time`); None where time was not measured."""
    t = report.time
    if not t or line is None:
        return None
    run, steps = per_step(t, after_first)
    key = f"{line.file}:{line.line}"
    gpu = run.get("gpu")
    if gpu:
        ms = sum(float(d["ms"]) for d in gpu.get("idle_lines", []) if d["site"] == key)
        if gpu.get("per_step"):  # a typical step's already
            return round(ms, 6)
    else:
        ms = sum(float(d["total_ms"]) for d in run.get("lines", []) if d["site"] == key)
    return round(ms / steps if steps else ms, 6)
