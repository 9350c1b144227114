"""The report's ``memory`` section: GPU bytes per line (now, at the run's peak, each line's most),
each GPU's peak and the lines holding it, and the failure explained (``explain.py``)."""

from __future__ import annotations

import heapq
import sys
from typing import TYPE_CHECKING

from profilers.memory.explain import line_dict
from profilers.memory.tracker import LineKey, MemoryTracker, by_line

if TYPE_CHECKING:
    from profilers.counting.recorder import Recorder

MAX_LINES = 50
"""Lines kept in the report (the largest at the peak, then by their own most)."""


def capacities() -> dict[int, int]:
    """Each GPU's memory size, as ``torch.cuda`` reports it (the simulated size under
    ``--fake-cuda``); empty without a GPU."""
    import torch

    try:
        if not torch.cuda.is_available():
            return {}
        return {
            i: int(torch.cuda.get_device_properties(i).total_memory)
            for i in range(torch.cuda.device_count())
        }
    except (RuntimeError, AssertionError, AttributeError):
        return {}


def memory_section(recorder: Recorder) -> dict[str, object] | None:
    """The section of ``recorder``'s run, or None when memory was not tracked and no op failed
    with a device mismatch or out of memory."""
    tracker, failure = recorder.memory, recorder.failure
    if tracker is None and failure is None:
        return None
    out: dict[str, object] = {
        "tracked": tracker is not None,
        "source": "simulated" if (tracker.simulated if tracker else simulated()) else "measured",
        "devices": [],
        "peak": None,
        "lines": [],
        "failure": failure,
    }
    if tracker is None:
        return out
    capacity = tracker.capacity
    live, most, total, _ = tracker.glance()
    at_peak: dict[LineKey, int] = {}
    devices: list[dict[str, object]] = []
    top: tuple[int, int, int, dict[LineKey, int]] | None = None
    for index, peak, step, held in tracker.peaks():
        devices.append(
            {
                "device": f"cuda:{index}",
                "capacity_bytes": capacity.get(index),
                "peak_bytes": peak,
                "peak_step": step,
                "live_bytes": total.get(index, 0),
            }
        )
        at_peak.update(held)
        if top is None or peak > top[1]:
            top = (index, peak, step, held)
    out["devices"] = devices
    if top is not None:
        index, peak, step, held = top
        out["peak"] = {
            "device": f"cuda:{index}",
            "bytes": peak,
            "step": step,
            "capacity_bytes": capacity.get(index),
            "lines": [
                {**line_dict(line), "bytes": n}
                for line, n in sorted(by_line(held).values(), key=lambda v: -v[1])[:MAX_LINES]
            ],
        }
    peak_by, live_by = by_line(at_peak), by_line(live)
    rows = [
        (line, peak_by.get(k, (None, 0))[1], live_by.get(k, (None, 0))[1], n)
        for k, (line, n) in by_line(most).items()
    ]
    rows.sort(key=lambda r: (-r[1], -r[3], r[0].file, r[0].line))
    out["lines"] = [
        {**line_dict(line), "peak_bytes": p, "live_bytes": n, "max_bytes": m}
        for line, p, n, m in rows[:MAX_LINES]
    ]
    return out


LIVE_LINES = 10
"""Lines a live snapshot carries: those holding the most GPU memory now."""


def live_memory(recorder: Recorder, top: int = LIVE_LINES) -> dict[str, object]:
    """The live view's memory: each GPU's bytes now and peak so far, the ``top`` lines holding
    the most now (and each one's most), how many lines hold any, and the failure explained;
    empty when memory is not tracked and no op failed. Cheap: copies of a few small dicts."""
    tracker, failure = recorder.memory, recorder.failure
    if tracker is None:
        return {} if failure is None else {"tracked": False, "failure": failure}
    live, most, total, peak = tracker.glance()
    devices = [
        {
            "device": f"cuda:{index}",
            "live_bytes": total.get(index, 0),
            "peak_bytes": peak[index],
            "capacity_bytes": tracker.capacity.get(index),
        }
        for index in sorted(peak)
    ]
    held = by_line(live)
    max_by = by_line(most)
    rows = [
        {**line_dict(line), "live_bytes": n, "max_bytes": max_by.get(k, (None, n))[1]}
        for k, (line, n) in heapq.nlargest(top, held.items(), key=lambda kv: kv[1][1])
    ]
    return {
        "tracked": True,
        "source": "simulated" if tracker.simulated else "measured",
        "devices": devices,
        "lines": rows,
        "line_count": len(held),
        "failure": failure,
    }


def simulated() -> bool:
    """Whether ``--fake-cuda``'s harness is on (without importing it when it is not)."""
    fake = sys.modules.get("profilers.fake_cuda.harness")
    return fake is not None and getattr(fake, "HARNESS", None) is not None


def start_memory(recorder: Recorder, wanted: bool | None, counting: str) -> None:
    """Gives ``recorder`` a tracker when ``wanted`` (``memory=True`` also counts every op);
    None: when the GPUs are simulated and every op is counted (``--fake-cuda``), where each op
    already runs through Python and tracking costs little beside the simulation."""
    if wanted or (wanted is None and counting == "every_op" and simulated()):
        recorder.memory = MemoryTracker(lambda: recorder.step_number)
        recorder.memory.capacity = capacities()
        recorder.memory.simulated = simulated()
