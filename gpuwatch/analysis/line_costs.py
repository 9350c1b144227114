"""What each line cost: the time charged to it per step, the costliest first (it ranks
the hints), and the words that say what that figure is and where it comes from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuwatch import _format as fmt
from profilers import Report
from profilers.sections import Breakdown, TimeView
from profilers.timing.verdict import per_step


def measured_gpu(d: Mapping[str, Any]) -> bool:
    """Whether a breakdown's GPU figures were measured on a GPU (CUDA events)."""
    gpu = d.get("gpu")
    return isinstance(gpu, dict) and gpu.get("measured") == "measured"


def predicted_gpu(d: Mapping[str, Any]) -> str | None:
    """The GPU a breakdown's GPU figures were predicted for (``--fake-cuda --gpu``), else None."""
    gpu = d.get("gpu")
    if gpu and gpu.get("measured") == "predicted":
        return str(gpu.get("gpu"))
    return None


def cost_words(r: Report) -> tuple[str, str]:
    """``("per step", "of the step")``, or ``("in all", "of the run")`` when no step ended."""
    if r.time and int(r.time.get("steps_closed", 0)) > 0:
        return "per step", "of the step"
    return "in all", "of the run"


def cost_text(r: Report, ms: float, share: float) -> str:
    """What a line's figure of :func:`line_costs` is, with its source: ``6.0 ms of GPU idle per
    step (60% of the step, PREDICTED for H100-SXM)``, ``454 µs of host time per step (12% of the
    step, measured)``. NB: a line's cost is not what fixing it saves (the what-if says that)."""
    unit, of = cost_words(r)
    run = per_step(r.time)[0] if r.time else {}
    name = predicted_gpu(run)
    if name is not None:
        what, how = "GPU idle", f"PREDICTED for {name}"
    elif measured_gpu(run):
        what, how = "GPU idle", "measured with CUDA events"
    elif r.time and r.time.get("lines_measured") is False:
        # NB: the fast path: the waits are measured at their lines, the host work between
        # counted ops is charged to the lines a sampler of the stack read (profilers/timing/gaps.py)
        what, how = "host time", "measured, host work by line sampled"
    else:
        what, how = "host time", "measured"
    return f"{fmt.duration_ms(ms)} of {what} {unit} ({share:.0f}% {of}, {how})"


def _basis(t: TimeView) -> tuple[Breakdown, Any, int, float]:
    """The breakdown, its GPU half, the steps it holds and their wall time (a typical step
    replayed: its figures are per step)."""
    run, steps = per_step(t)
    gpu = run.get("gpu")
    if gpu and gpu.get("per_step"):
        return run, gpu, 1, float(gpu["wall_ms"])
    return run, gpu, max(1, steps), float(run["wall_unprofiled_ms"])


def line_costs(r: Report) -> dict[str, tuple[float, float]]:
    """``file:line`` -> (ms per step, % of the step) of the time charged to it (idle time on a
    GPU, host time otherwise), costliest first, over the steps after the first where two or
    more ended (:func:`~profilers.timing.verdict.per_step`)."""
    if not r.time:
        return {}
    run, gpu, steps, total = _basis(r.time)
    if gpu:
        charged: dict[str, float] = {}
        for d in gpu.get("idle_lines", []):
            charged[d["site"]] = charged.get(d["site"], 0.0) + float(d["ms"])
    else:
        charged = {d["site"]: float(d["total_ms"]) for d in run.get("lines", [])}
    ranked = sorted(charged.items(), key=lambda kv: kv[1], reverse=True)
    return {
        line: (ms / steps, 100.0 * ms / total if total > 0 else 0.0)
        for line, ms in ranked
        if ms > 0
    }


def cause_costs(r: Report) -> dict[str, dict[str, tuple[float, float]]]:
    """``file:line`` -> cause (``input``, ``sync``, ``copy``, ``comm``, ``launch``) -> (ms per
    step, % of the step): :func:`line_costs` split by what the time went to, so that a hint is
    charged the time of its own cause only (a line's launches are not its sync's cost)."""
    if not r.time:
        return {}
    run, gpu, steps, total = _basis(r.time)
    charged: dict[str, dict[str, float]] = {}
    if gpu:
        for d in gpu.get("idle_lines", []):
            causes = charged.setdefault(str(d["site"]), {})
            cause = str(d.get("cause") or "launch")
            causes[cause] = causes.get(cause, 0.0) + float(d["ms"])
    else:
        for d in run.get("lines", []):
            charged[str(d["site"])] = {
                k.removesuffix("_ms"): float(v)
                for k, v in d.items()
                if k.endswith("_ms") and k != "total_ms" and isinstance(v, (int, float))
            }
    return {
        line: {
            cause: (ms / steps, 100.0 * ms / total if total > 0 else 0.0)
            for cause, ms in causes.items()
            if ms > 0
        }
        for line, causes in charged.items()
    }
