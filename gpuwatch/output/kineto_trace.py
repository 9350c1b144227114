"""A trace's analysis as a Chrome trace-event file for Perfetto (ui.perfetto.dev) or
``chrome://tracing``: per rank, the steps with their verdicts, and per GPU a busy track and one
track per idle cause whose slices name the line (or CPU op) charged.

Timestamps are in the analysed trace's own clock (microseconds), so these tracks line up with
the original trace's kernels when both files are opened in one Perfetto session. The file holds
the analysis only, not the original events, and at most ``MAX_SLICES`` busy runs and idle pieces
(:mod:`profilers.kineto.analyse` keeps them) and :data:`MAX_STEPS` steps per rank (the longest;
what is left out is summed in one event), each name cut at :data:`NAME_CHARS`: under 10 MB per
rank however large the trace.
"""

from __future__ import annotations

import json
from typing import Any

from profilers.kineto.result import CAUSES, RankResult, TraceAnalysis

STEP_TID = 1
MAX_STEPS = 5_000
NAME_CHARS = 160
#: Per device: the busy track, then one per cause.
TRACKS = ("busy", *CAUSES)


def _tid(device: int, track: str) -> int:
    return 10 + 10 * device + TRACKS.index(track)


def _rank_events(r: RankResult, pid: int) -> list[dict[str, Any]]:
    def us(t_ms: float) -> float:
        return round(r.base_us + t_ms * 1000, 3)

    def event(ph: str, tid: int | None, name: str, **rest: Any) -> dict[str, Any]:
        return {"ph": ph, "pid": pid, **({} if tid is None else {"tid": tid}), "name": name, **rest}

    def span(tid: int, start_ms: float, end_ms: float, cat: str, name: str, args: Any) -> None:
        dur = round((end_ms - start_ms) * 1000, 3)
        events.append(event("X", tid, name, ts=us(start_ms), dur=dur, cat=cat, args=args))

    events = [
        event("M", None, "process_name", args={"name": f"gpuwatch: rank {r.rank} ({r.path})"}),
        event("M", STEP_TID, "thread_name", args={"name": "steps"}),
    ]
    for d in r.run:
        for track in TRACKS:
            label = "GPU busy" if track == "busy" else f"GPU idle: {track}"
            named = {"name": f"GPU {d.device} {label}"}
            events.append(event("M", _tid(d.device, track), "thread_name", args=named))
    for s in r.steps[:MAX_STEPS]:
        verdicts = ", ".join(d.verdict for d in s.devices)
        idle = {d.device: d.to_dict()["idle_by_cause_ms"] for d in s.devices}
        span(STEP_TID, s.start_ms, s.start_ms + s.wall_ms, "step", f"{s.name}: {verdicts}", idle)
    (left, left_ms), left_steps = r.timeline_left, len(r.steps) - len(r.steps[:MAX_STEPS])
    if left or left_steps:
        note = f"gpuwatch: {left:,} shorter slices ({left_ms:.3f} ms) and {left_steps:,} steps"
        events.append(event("i", STEP_TID, f"{note} left out (all in the JSON)", s="p", ts=us(0)))
    for sl in sorted(r.timeline, key=lambda sl: sl.start_ms):
        where = sl.where
        name = "busy" if where is None else where.label()[:NAME_CHARS]
        args = {} if where is None else {"op": where.op, "cause": sl.cause}
        span(_tid(sl.device, sl.cause), sl.start_ms, sl.end_ms, f"gpu.{sl.cause}", name, args)
    return events


def render_trace(analysis: TraceAnalysis) -> str:
    events = [e for i, r in enumerate(analysis.ranks) for e in _rank_events(r, 1_000_000 + i)]
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}) + "\n"
