"""What a torch.profiler trace says about GPU idle time: typed, frozen, torch-free, and written as
the ``gpuwatch.kineto/1`` document (``gpuwatch/schemas/kineto-1.schema.json``).

Figures are measured (read from the trace), in milliseconds; nothing here is predicted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

from profilers.finite import iterable, mapping, number
from profilers.kineto.events import Where

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SCHEMA = "gpuwatch.kineto/1"
R = TypeVar("R", bound="DataclassInstance")

CAUSES = ("input", "sync", "copy", "comm", "launch", "dependency", "warmup")
"""Every idle ms is charged to exactly one of these (see DEFINITIONS)."""

DEFINITIONS = {
    "window": "each ProfilerStep#N's host interval [ts, ts+dur] on the thread that records the "
    "steps (the whole trace, first to last event, when it has no ProfilerStep); GPU work is "
    "clipped to it, so a step's GPU work that runs on after its host interval counts in the next",
    "busy": "the union, per device, of every kernel, memcpy and memset interval on all streams "
    "(CUPTI's sync records are the host's wait, not GPU work: not busy)",
    "idle": "the window's wall time less busy; each gap ends when the device's next GPU work K "
    "starts, and is the host's (input, sync, copy, comm, launch) only when K was queued (its "
    "launch call began) after the gap began",
    "input": "idle while the host was inside a DataLoader's __next__ "
    "(enumerate(DataLoader)#...__next__), K not yet queued",
    "sync": "idle while the host was blocked in cudaDeviceSynchronize, cudaStreamSynchronize, "
    "cudaEventSynchronize, a blocking cudaMemcpy or aten::item/_local_scalar_dense, and the idle "
    "that follows, when the GPU ran dry during that wait, up to the GPU work the wait waited for "
    "(the rest of the host's time before the next GPU work is launch), K not yet queued",
    "copy": "as sync, for a wait inside a copy op (aten::copy_, _to_copy, to) or a copy from or "
    "to pageable memory, which the host stages",
    "comm": "idle while the host was inside a collective call (nccl:*, c10d::*) with K not yet "
    "queued, or with K an NCCL kernel queued and waiting (the other ranks)",
    "launch": "the rest of the host's part: the host running Python and queuing work slower than "
    "the GPU ran it (K not yet launched, or launched and not yet started), at K's op and line",
    "dependency": "K was already queued when the gap began (or before the trace began), so the "
    "GPU waited on something other than the host: another stream's work, an event (HTA's "
    "kernel_wait and other)",
    "warmup": "before the device's first GPU work in the trace, at the op and line that queued "
    "it; left out of the verdict",
    "verdict": "GPU-bound when the GPU was busy with anything but NCCL kernels alone for at "
    "least 80% of the window after warm-up, else <cause>-bound for the largest idle cause "
    "(input-bound, sync-bound, copy-bound, comm-bound, launch-bound, dependency-bound), comm "
    "counting the time NCCL kernels ran alone (exposed communication) too; no GPU work when the "
    "window has none",
    "active_window": "HTA's temporal breakdown window: from the device's first GPU activity to "
    "its last, over the whole trace; compute = non-NCCL kernels, non_compute = the rest of busy; "
    "in a trace of two or more steps, as HTA does, only the activities whose launch call is in "
    "the trace (work queued before the trace began is busy in the steps, not here); at the "
    "trace's own resolution (HTA by default rounds each start up and each end down to a whole "
    "microsecond: HTA_DISABLE_NS_ROUNDING=1 turns that off)",
    "stream_idle": "HTA's idle time breakdown, per stream: the gap before each activity on the "
    "stream is host_wait when its launch call began after the previous activity ended, "
    "kernel_wait when shorter than 30 us, else other",
}


def ms(ns: float) -> float:
    return round(ns / 1e6, 6)


@dataclass(frozen=True)
class Charge:
    """Idle time charged to one cause at one place (the user's line, or the CPU op)."""

    cause: str
    where: Where
    idle_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, **asdict(self.where), "idle_ms": self.idle_ms}


@dataclass(frozen=True)
class DeviceTime:
    """One device over one window (a step, or the run: the sum of its steps)."""

    device: int
    wall_ms: float
    busy_ms: float
    compute_ms: float
    """Busy with a non-NCCL kernel."""
    comm_ms: float
    """Busy with NCCL kernels only."""
    copy_ms: float
    """Busy with memcpy/memset only."""
    idle_ms: float
    idle_by_cause_ms: Mapping[str, float]
    verdict: str
    shares_pct: Mapping[str, float]
    top: tuple[Charge, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "wall_ms": self.wall_ms,
            "busy_ms": self.busy_ms,
            "busy_pct": round(100 * self.busy_ms / self.wall_ms, 2) if self.wall_ms else 0.0,
            "busy_split_ms": {
                "compute": self.compute_ms,
                "comm": self.comm_ms,
                "copy": self.copy_ms,
            },
            "idle_ms": self.idle_ms,
            "idle_by_cause_ms": dict(self.idle_by_cause_ms),
            "verdict": self.verdict,
            "shares_pct": dict(self.shares_pct),
            "top": [c.to_dict() for c in self.top],
        }


@dataclass(frozen=True)
class StepTime:
    name: str
    number: int | None
    start_ms: float
    """From the trace's first event."""
    wall_ms: float
    input_ms: float
    """Host time inside the DataLoader's __next__ in this window (overlapped or not)."""
    devices: tuple[DeviceTime, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "number": self.number,
            "start_ms": self.start_ms,
            "wall_ms": self.wall_ms,
            "input_ms": self.input_ms,
            "input_pct": round(100 * self.input_ms / self.wall_ms, 2) if self.wall_ms else 0.0,
            "devices": [d.to_dict() for d in self.devices],
        }


@dataclass(frozen=True)
class KernelStat:
    name: str
    device: int
    count: int
    total_ms: float
    max_ms: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CopyStat:
    """Copies of one direction and host memory kind, from one place (or all: where None)."""

    direction: str
    memory: str
    """``pageable``, ``pinned``, or ``""`` where the trace does not say."""
    count: int
    bytes: int
    gpu_ms: float
    where: Where | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "direction": self.direction,
            "memory": self.memory or None,
            "count": self.count,
            "bytes": self.bytes,
            "gpu_ms": self.gpu_ms,
        }
        if self.where is not None:
            d.update(asdict(self.where))
        return d


@dataclass(frozen=True)
class ActiveWindow:
    """A device's figures over HTA's temporal-breakdown window (see DEFINITIONS)."""

    device: int
    start_ms: float
    end_ms: float
    busy_ms: float
    compute_ms: float
    idle_ms: float

    def to_dict(self) -> dict[str, Any]:
        span = self.end_ms - self.start_ms

        def pct(v: float) -> float:
            return round(100 * v / span, 2) if span > 0 else 0.0

        return {
            "device": self.device,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "busy_ms": self.busy_ms,
            "idle_ms": self.idle_ms,
            "compute_ms": self.compute_ms,
            "non_compute_ms": round(self.busy_ms - self.compute_ms, 6),
            "busy_pct": pct(self.busy_ms),
            "idle_pct": pct(self.idle_ms),
            "compute_pct": pct(self.compute_ms),
        }


@dataclass(frozen=True)
class StreamIdle:
    device: int
    stream: int
    host_wait_ms: float
    kernel_wait_ms: float
    other_ms: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Slice:
    """A stretch of one device's timeline: ``busy``, or idle charged to a cause and place
    (times in ms from the trace's first event; not in the JSON, which stays small)."""

    device: int
    start_ms: float
    end_ms: float
    cause: str
    where: Where | None = None


@dataclass(frozen=True)
class RankResult:
    rank: int
    path: str
    gpus: Mapping[int, str]
    steps: tuple[StepTime, ...]
    run: tuple[DeviceTime, ...]
    """Per device, over all the steps together."""
    lines: tuple[Charge, ...]
    """The run's idle by cause and place, costliest first."""
    kernels: tuple[KernelStat, ...]
    copies: tuple[CopyStat, ...]
    copy_lines: tuple[CopyStat, ...]
    active: tuple[ActiveWindow, ...]
    streams: tuple[StreamIdle, ...]
    has_stacks: bool
    has_steps: bool
    notes: tuple[str, ...] = ()
    timeline: tuple[Slice, ...] = ()
    """Busy runs and charged idle, per device, inside the windows (for the Perfetto trace):
    the longest (``analyse_rank(slices=)``), longest first."""
    timeline_left: tuple[int, float] = (0, 0.0)
    """How many shorter slices were left out of ``timeline``, and their ms."""
    base_us: float = 0.0
    """The trace's own clock (us) at 0 ms here."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "path": self.path,
            "gpus": {str(k): v for k, v in sorted(self.gpus.items())},
            "has_stacks": self.has_stacks,
            "has_steps": self.has_steps,
            "run": [d.to_dict() for d in self.run],
            "steps": [s.to_dict() for s in self.steps],
            "idle_by_line": [c.to_dict() for c in self.lines],
            "kernels": [k.to_dict() for k in self.kernels],
            "copies": [c.to_dict() for c in self.copies],
            "copy_lines": [c.to_dict() for c in self.copy_lines],
            "hta": {
                "active_window": [a.to_dict() for a in self.active],
                "stream_idle": [s.to_dict() for s in self.streams],
            },
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class TraceAnalysis:
    """The analysis of one trace, or of a run's ranks (one file each)."""

    paths: tuple[str, ...]
    ranks: tuple[RankResult, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "measured": "measured",
            "source": "torch.profiler trace (Kineto)",
            "paths": list(self.paths),
            "definitions": dict(DEFINITIONS),
            "ranks": [r.to_dict() for r in self.ranks],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1) + "\n"


# -- a saved analysis read back (``gpuwatch report analysis.json``): the same records, so each
# output the trace gave is given again; the Perfetto timeline is not in the JSON (no slices).


def _f(v: object) -> float:
    return float(number(v))


def _i(v: object) -> int:
    return int(number(v))


def _opt(v: object) -> str | None:
    return None if v is None else str(v)


def _flat(cls: type[R], d: Mapping[str, object]) -> R:
    """A record of numbers and a name whose JSON object has its fields' names."""
    read: dict[str, Callable[[object], object]] = {"int": _i, "float": _f, "str": str}
    return cls(**{f.name: read[str(f.type)](d[f.name]) for f in fields(cls)})


def _where(d: Mapping[str, object]) -> Where:
    line = None if d.get("line") is None else _i(d["line"])
    return Where(str(d["op"]), _opt(d.get("file")), line, _opt(d.get("function")))


def _charge(d: Mapping[str, object]) -> Charge:
    return Charge(str(d["cause"]), _where(d), _f(d["idle_ms"]))


def _device(d: Mapping[str, object]) -> DeviceTime:
    split = mapping(d["busy_split_ms"])
    return DeviceTime(
        device=_i(d["device"]),
        wall_ms=_f(d["wall_ms"]),
        busy_ms=_f(d["busy_ms"]),
        compute_ms=_f(split["compute"]),
        comm_ms=_f(split["comm"]),
        copy_ms=_f(split["copy"]),
        idle_ms=_f(d["idle_ms"]),
        idle_by_cause_ms={str(k): _f(v) for k, v in mapping(d["idle_by_cause_ms"]).items()},
        verdict=str(d["verdict"]),
        shares_pct={str(k): _f(v) for k, v in mapping(d["shares_pct"]).items()},
        top=tuple(_charge(mapping(c)) for c in iterable(d["top"])),
    )


def _copy(d: Mapping[str, object]) -> CopyStat:
    where = _where(d) if "op" in d else None
    counts = (_i(d["count"]), _i(d["bytes"]), _f(d["gpu_ms"]))
    return CopyStat(str(d["direction"]), str(d.get("memory") or ""), *counts, where)


def _rank(d: Mapping[str, object]) -> RankResult:
    def each(key: str, source: Mapping[str, object] = d) -> list[Mapping[str, object]]:
        return [mapping(v) for v in iterable(source[key])]

    hta = mapping(d["hta"])
    return RankResult(
        rank=_i(d["rank"]),
        path=str(d["path"]),
        gpus={int(k): str(v) for k, v in mapping(d["gpus"]).items()},
        steps=tuple(
            StepTime(
                name=str(s["name"]),
                number=None if s.get("number") is None else _i(s["number"]),
                start_ms=_f(s["start_ms"]),
                wall_ms=_f(s["wall_ms"]),
                input_ms=_f(s["input_ms"]),
                devices=tuple(_device(mapping(v)) for v in iterable(s["devices"])),
            )
            for s in each("steps")
        ),
        run=tuple(_device(v) for v in each("run")),
        lines=tuple(_charge(v) for v in each("idle_by_line")),
        kernels=tuple(_flat(KernelStat, k) for k in each("kernels")),
        copies=tuple(_copy(v) for v in each("copies")),
        copy_lines=tuple(_copy(v) for v in each("copy_lines")),
        active=tuple(_flat(ActiveWindow, a) for a in each("active_window", hta)),
        streams=tuple(_flat(StreamIdle, v) for v in each("stream_idle", hta)),
        has_stacks=d["has_stacks"] is True,
        has_steps=d["has_steps"] is True,
        notes=tuple(str(n) for n in iterable(d["notes"])),
    )


def analysis_from_dict(doc: Mapping[str, object]) -> TraceAnalysis:
    """The analysis a ``gpuwatch.kineto/1`` document holds (checked against its schema first:
    a damaged one raises KeyError, TypeError or ValueError)."""
    paths = tuple(str(p) for p in iterable(doc["paths"]))
    return TraceAnalysis(paths, tuple(_rank(mapping(r)) for r in iterable(doc["ranks"])))
