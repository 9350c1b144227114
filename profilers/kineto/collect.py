"""One pass over a trace's events, keeping what the analysis needs: the GPU activities, the
runtime calls by correlation id, the CPU ops by external id and by thread, the user's Python
frames, and the spans with a cause (steps, DataLoader waits, collectives, the host's waits)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
import numpy as np

from profilers.kineto.events import (
    ASYNC_COPY_CALLS,
    COMM_PREFIXES,
    COPY_OPS,
    CPU_CATS,
    GPU_CATS,
    KINDS,
    MEMCPY,
    PYTHON_CATS,
    RUNTIME_CATS,
    SYNC_CALLS,
    Calls,
    HostSpan,
    Ints,
    RankTrace,
    Step,
    is_input,
    user_frame,
)
from profilers.kineto.stacks import Frame, Places

#: How the names of the CPU spans the analysis needs begin (steps, DataLoader, collectives).
MARKS = ("ProfilerStep#", "enumerate(DataLoader)", *COMM_PREFIXES)
GPU_KINDS = {cat: KINDS.index(kind) for cat, kind in GPU_CATS.items()}


#: Larger than any time a trace holds (in us: Kineto's epoch clock reads about 1.8e15 in
#: 2026, 3e15 in 2065); a time beyond it is damage, and its nanoseconds from the first event
#: (and an end past them) would not fit the int64 columns they are kept in.
MAX = 3e15
I64 = 1 << 63


def number(value: Any, default: int = -1) -> int:
    """An id or count as the trace writes it (an int, a float, ``"stream 7"``); ``default``
    where it is none, or past int64 (damage)."""
    if type(value) is int:  # NB: the common case first: a million calls on a large trace
        return value if -I64 < value < I64 else default
    if isinstance(value, float) and math.isfinite(value):
        return number(int(value), default)
    if isinstance(value, str):
        digits = value.rsplit(" ", 1)[-1]
        return number(int(digits), default) if digits.lstrip("-").isdigit() else default
    return default


class Args(msgspec.Struct, gc=False):
    """The arguments of an event the analysis reads (a decoder skips the others unread)."""

    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_lower: Any = msgspec.field(default=None, name="external id")
    device: Any = None
    stream: Any = None
    bytes: Any = None
    call_stack: Any = msgspec.field(default="", name="Call stack")
    name: Any = None


class Event(msgspec.Struct, gc=False):
    """One trace event, its fields as the JSON has them (each one checked where it is read)."""

    ph: Any = None
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = 0
    args: Args | None = None


_ARGS = {f: Args.__struct_encode_fields__[i] for i, f in enumerate(Args.__struct_fields__)}


def event_of(e: Any) -> Event | None:
    """An already parsed event (a dict) as the stream decodes it: None for a non-object."""
    if not isinstance(e, dict):
        return None
    raw = e.get("args")
    args = (
        Args(**{f: raw[k] for f, k in _ARGS.items() if k in raw}) if isinstance(raw, dict) else None
    )
    fields = {k: e[k] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur") if k in e}
    return Event(**fields, args=args)


NO_ARGS = Args()


class Collect:
    """One pass over the events, keeping what the analysis needs; times count from the first
    complete event's ``ts`` (``base_us``), set as it arrives."""

    def __init__(self) -> None:
        self.base_us: int | None = None
        self.gpu, self.gpu_names = array("q"), dict[str, int]()  # Activities' columns
        names = {"": 0}
        self.launches = Calls(names, first=False)
        self.ops = Calls(names, first=True)
        self.launching: dict[str, int] = {}
        self.marks = array("q")  # steps, input, comm spans (any CPU op or annotation), as ops
        self.python = array("q")  # rows of 4: thread, start, end, frame (an id in frames)
        self.frames: dict[Frame, int] = {}
        self.cats: set[str] = set()
        self.runtime_names: set[str] = set()
        self.cpu_ops = 0
        self.first = math.inf
        self.last = -math.inf
        self.own = False
        self.legacy_kernels = 0
        """Kernels in the pre-Kineto autograd profiler's spelling (no category, pid "CUDA
        functions"): torch.autograd.profiler with use_cuda=True before Kineto."""

    def add(self, events: Iterable[Event]) -> None:  # noqa: C901 - the hot loop in one frame
        # NB: a million events in a large trace: locals, and a host call's fields go straight
        # into its table's row (a call per event would cost a third more)
        ids, ops, launches, cats = self.ops.ids, self.ops.data, self.launches.data, self.cats
        names, marks, launching = self.runtime_names, self.marks, self.launching
        gpu, gpu_names, lowered = self.gpu, self.gpu_names, dict[str, str]()
        base, first, last = self.base_us, self.first, self.last
        for e in events:
            if e.ph != "X":
                if e.ph == "M" and e.name == "process_name" and isinstance(e.args, Args):
                    self.own = self.own or str(e.args.name).startswith("gpuwatch:")
                continue
            ts, dur = e.ts, e.dur  # NB: inf (1e999), nan, or a time past any clock's: damage
            if not (type(ts) is float or isinstance(ts, int | float)) or not -MAX < ts < MAX:
                continue
            if base is None:
                base = self.base_us = math.floor(ts)
            if not (type(dur) is float or isinstance(dur, int | float)) or not -MAX < dur < MAX:
                continue
            if type(cat := e.cat) is not str:
                cat = str(cat)
            elif (low := lowered.get(cat)) is None:
                cat = lowered[cat] = cat.lower()
            else:
                cat = low
            if cat == "trace":
                continue
            if not cat and e.pid == "CUDA functions":
                self.legacy_kernels += 1
            cats.add(cat)
            name = e.name if type(e.name) is str else str(e.name)
            args = e.args or NO_ARGS
            start = round((ts - base) * 1000)
            end = start + max(0, round(dur * 1000))
            if start < first:
                first = start
            if end > last:
                last = end
            kind = GPU_KINDS.get(cat)
            if kind is not None:
                if (n := gpu_names.get(name)) is None:
                    n = gpu_names[name] = len(gpu_names)
                corr = max(-1, number(args.correlation))  # -1: none (no launch has it)
                device = number(args.device, number(e.pid, 0))
                stream = number(args.stream, number(e.tid, 0))
                gpu.extend(
                    (kind, n, device, stream, start, end, corr, max(0, number(args.bytes, 0)))
                )
                continue
            is_cpu = cat in CPU_CATS
            if not is_cpu and cat not in RUNTIME_CATS:
                frame = user_frame(name) if cat in PYTHON_CATS else None
                if frame is not None:
                    th, f = ids.setdefault(str(e.tid), len(ids)), len(self.frames)
                    self.python.extend((th, start, end, self.frames.setdefault(frame, f)))
                continue
            tid = e.tid if type(e.tid) is str else str(e.tid)
            if (t := ids.get(tid)) is None:
                t = ids[tid] = len(ids)
            if (n := ids.get(name)) is None:
                n = ids[name] = len(ids)
            ext = args.external_id
            if is_cpu:
                ext = number(ext, 0)
                stack = args.call_stack
                stack = stack if isinstance(stack, str) else ""
                if cat != "user_annotation":
                    self.cpu_ops += 1
                    ops.extend((ext, n, t, start, end, ext, ids.setdefault(stack, len(ids))))
                if name.startswith(MARKS) and (
                    name[0] == "P" or is_input(name) or name.startswith(COMM_PREFIXES)
                ):
                    marks.extend((0, n, t, start, end, ext, ids.setdefault(stack, len(ids))))
                continue
            names.add(name)
            corr = args.correlation
            if (corr := number(corr)) < 0:
                corr = -2 - len(launches)  # NB: kept (a sync may block the host), a key apart
            ext = number(args.external_id_lower if ext is None else ext, 0)
            launches.extend((corr, n, t, start, end, ext, 0))
            launching[tid] = launching.get(tid, 0) + 1
        self.first, self.last = first, last


def steps_of(marks: Ints, names: Sequence[str]) -> list[Step]:
    seen: dict[str, Step] = {}
    main = None
    for _, n, tid, start, end, _, _ in marks.tolist():
        name = names[n]
        if not name.startswith("ProfilerStep#") or name in seen or main not in (None, tid):
            continue
        main = tid
        number = name[len("ProfilerStep#") :]
        seen[name] = Step(name, int(number) if number.isdigit() else None, start, end)
    return sorted(seen.values(), key=lambda s: s.start_ns)


def blocked_spans(trace: RankTrace, places: Places) -> list[HostSpan]:
    """The host's waits: a synchronising runtime call, or a copy from or to pageable memory
    (the host stages it), each with the CPU op and line that made it."""
    acts, launches = trace.activities, trace.launches
    memory = np.array([m == "pageable" for _, m in acts.copy_kinds], bool)[acts.name]
    pageable = acts.correlation[memory & (acts.kind == KINDS.index(MEMCPY))]
    syncs, copies = (
        [launches.ids[n] for n in c if n in launches.ids] for c in (SYNC_CALLS, ASYNC_COPY_CALLS)
    )
    calls = launches.table[np.sort(launches.rows)]
    calls = calls[
        np.isin(calls[:, 1], syncs) | np.isin(calls[:, 1], copies) & np.isin(calls[:, 0], pageable)
    ]
    ops = places.op(calls)
    spans: list[HostSpan] = []
    for call, op, where in zip(
        calls.tolist(), ops[:, 1].tolist(), places.where(ops).tolist(), strict=True
    ):
        name, op_name = launches.names[call[1]], launches.names[op]
        if op_name in ("aten::_local_scalar_dense", "aten::item"):
            cause, detail = "sync", "item"
        elif op_name in COPY_OPS or "Memcpy" in name or "memcpy" in name.lower():
            cause, detail = "copy", name
        else:
            cause, detail = "sync", name
        spans.append(HostSpan(cause, call[3], call[4], places.wheres[where], detail))
    return spans


def marked_spans(trace: RankTrace, marks: Ints, places: Places) -> list[HostSpan]:
    names = trace.ops.names
    marks = marks[
        [is_input(names[n]) or names[n].startswith(COMM_PREFIXES) for n in marks[:, 1].tolist()]
    ]
    return [
        HostSpan("input" if is_input(names[n]) else "comm", start, end, places.wheres[w], names[n])
        for (_, n, _, start, end, _, _), w in zip(
            marks.tolist(), places.where(marks).tolist(), strict=True
        )
    ]
