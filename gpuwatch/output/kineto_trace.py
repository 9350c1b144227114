"""A trace's analysis as a Chrome trace-event file for Perfetto (ui.perfetto.dev) or
``chrome://tracing``: per rank, the steps with their verdicts, and per GPU a busy track and one
track per idle cause whose slices name the line (or CPU op) charged.

Timestamps are in the analysed trace's own clock (microseconds), so these tracks line up with
the original trace's kernels when both files are opened in one Perfetto session. The file holds
the analysis only, not the original events, and at most :data:`MAX_SLICES` busy runs and idle
pieces and :data:`MAX_STEPS` steps per rank (the longest; what is left out is summed in one
event), each name cut at :data:`NAME_CHARS`: under 10 MB per rank however large the trace.
"""

from __future__ import annotations

import json
from typing import Any

from profilers.kineto.result import CAUSES, RankResult, TraceAnalysis

STEP_TID = 1
MAX_SLICES = 20_000
MAX_STEPS = 5_000
NAME_CHARS = 160
#: Per device: the busy track, then one per cause.
TRACKS = ("busy", *CAUSES)


def _tid(device: int, track: str) -> int:
    return 10 + 10 * device + TRACKS.index(track)


def _rank_events(r: RankResult, pid: int) -> list[dict[str, Any]]:
    def us(t_ms: float) -> float:
        return round(r.base_us + t_ms * 1000, 3)

    events: list[dict[str, Any]] = [
        {
            "ph": "M",
            "pid": pid,
            "name": "process_name",
            "args": {"name": f"gpuwatch: rank {r.rank} ({r.path})"},
        },
        {"ph": "M", "pid": pid, "tid": STEP_TID, "name": "thread_name", "args": {"name": "steps"}},
    ]
    for d in r.run:
        for track in TRACKS:
            label = "GPU busy" if track == "busy" else f"GPU idle: {track}"
            events.append(
                {
                    "ph": "M",
                    "pid": pid,
                    "tid": _tid(d.device, track),
                    "name": "thread_name",
                    "args": {"name": f"GPU {d.device} {label}"},
                }
            )
    for s in r.steps[:MAX_STEPS]:
        verdicts = ", ".join(d.verdict for d in s.devices)
        events.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": STEP_TID,
                "ts": us(s.start_ms),
                "dur": round(s.wall_ms * 1000, 3),
                "cat": "step",
                "name": f"{s.name}: {verdicts}",
                "args": {d.device: d.to_dict()["idle_by_cause_ms"] for d in s.devices},
            }
        )
    kept = sorted(r.timeline, key=lambda sl: sl.start_ms - sl.end_ms)[:MAX_SLICES]
    left = {"steps": len(r.steps) - len(r.steps[:MAX_STEPS]), "slices": len(r.timeline) - len(kept)}
    if any(left.values()):
        left_ms = sum(sl.end_ms - sl.start_ms for sl in r.timeline) - sum(
            sl.end_ms - sl.start_ms for sl in kept
        )
        events.append(
            {
                "ph": "i",
                "s": "p",
                "pid": pid,
                "tid": STEP_TID,
                "ts": us(0),
                "name": f"gpuwatch: {left['slices']:,} shorter slices ({left_ms:.3f} ms) and "
                f"{left['steps']:,} steps left out (all figures are in the JSON)",
            }
        )
    for sl in sorted(kept, key=lambda sl: sl.start_ms):
        events.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": _tid(sl.device, sl.cause),
                "ts": us(sl.start_ms),
                "dur": round((sl.end_ms - sl.start_ms) * 1000, 3),
                "cat": f"gpu.{sl.cause}",
                "name": "busy" if sl.where is None else sl.where.label()[:NAME_CHARS],
                "args": {} if sl.where is None else {"op": sl.where.op, "cause": sl.cause},
            }
        )
    return events


def render_trace(analysis: TraceAnalysis) -> str:
    events: list[dict[str, Any]] = []
    for i, r in enumerate(analysis.ranks):
        events += _rank_events(r, 1_000_000 + i)
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}) + "\n"
