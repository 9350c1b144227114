"""The report as a Chrome trace-event file, which Perfetto (ui.perfetto.dev) and
``chrome://tracing`` open: every copy and sync of the timeline as an instant event on the track of
its kind, the steps as slices, and the GPU samples as counter tracks.

The events come from the report's capped timeline (``--timeline-capacity``, the newest 10,000 by
default) and its GPU samples, so the file stays bounded however long the run: about 160 bytes a
trace event, 2.4 MB at the default capacity (half of the events syncs), plus the GPU samples.
"""

from __future__ import annotations

import json
from typing import Any

from gpuwatch.output.timeview import gpu_idle_slices, track_name, wait_slices
from profilers import Report
from profilers.finite import finite_or_null

#: The process and track ids the events are drawn on.
PID = 1
TRACKS = {"copy": 1, "sync": 2, "step": 3, "gpu_idle": 4}
WAIT_TRACKS = 10
"""The first track of the waits, one per cause and line (gpuwatch/output/timeview.py)."""
COUNTERS = ("gpu_util_pct", "sm_active_pct", "memory_used_bytes", "pcie_rx_bytes_per_s",
            "pcie_tx_bytes_per_s")  # fmt: skip


def _us(t_s: float) -> float:
    return round(t_s * 1e6, 3)


def _event(ph: str, tid: int | None, ts: float, cat: str, name: str, args: Any, **more: Any) -> Any:
    """One trace event, its keys in the order the format's examples give them."""
    e = {"ph": ph, "s": more.get("s"), "pid": PID, "tid": tid, "ts": ts, "dur": more.get("dur")}
    return {k: v for k, v in e.items() if v is not None} | {"cat": cat, "name": name, "args": args}


def trace_events(report: Report) -> list[dict[str, Any]]:
    """The trace events of ``report``: metadata, copies, syncs, then GPU counters."""
    name = " ".join(report.command) or "profiled run"
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": PID, "name": "process_name", "args": {"name": f"gpuwatch: {name}"}},
        track_name(PID, TRACKS["copy"], "copies"),
        track_name(PID, TRACKS["sync"], "syncs"),
    ]
    for e in report.timeline.get("events", []):
        ts = _us(float(e["t"]))
        if e.get("direction"):
            copied = {
                "direction": e["direction"],
                "bytes": e["bytes"],
                "pinned": not e.get("pageable", False),
                "non_blocking": bool(e.get("non_blocking", False)),
                "line": e["site"],
            }
            name = f"{e['direction']} {e['bytes']} B"
            events.append(_event("i", TRACKS["copy"], ts, "copy", name, copied, s="t"))
        if sync := e.get("sync"):
            synced = {"cause": sync, "line": e["site"]}
            events.append(_event("i", TRACKS["sync"], ts, "sync", f"sync: {sync}", synced, s="t"))
    # Steps as slices on their own track: each from the end of the one before (or the start).
    ends = report.timeline.get("step_ends") or []
    if ends:
        events.append(track_name(PID, TRACKS["step"], "steps"))
    previous = 0.0
    for end in ends:
        t, step, tid = float(end["t"]), end["step"], TRACKS["step"]
        dur = _us(max(0.0, t - previous))
        events.append(
            _event("X", tid, _us(previous), "step", f"step {step}", {"step": step}, dur=dur)
        )
        previous = t
    events.extend(wait_slices(report, PID, WAIT_TRACKS))  # where each step's time went
    events.extend(gpu_idle_slices(report, PID, TRACKS["gpu_idle"]))  # and the GPU's, measured
    for s in report.gpu_samples:
        if values := {k: s[k] for k in COUNTERS if s.get(k) is not None}:
            events.append(_event("C", None, _us(float(s["t"])), "gpu", f"GPU {s['gpu']}", values))
    return events


def render_trace(report: Report) -> str:
    """The whole file: ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``."""
    doc = {
        "traceEvents": trace_events(report),
        "displayTimeUnit": "ms",
        "otherData": {
            "schema": "gpuwatch.trace/1",
            "started_at": report.started_at,
            "events_recorded": report.timeline.get("recorded", 0),
            "events_dropped": report.timeline.get("dropped", 0),
        },
    }
    # NB: JSON has no NaN or Infinity (chrome://tracing and Perfetto refuse them): null.
    return json.dumps(finite_or_null(doc, []), separators=(",", ":"), allow_nan=False) + "\n"
