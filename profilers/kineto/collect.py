"""One pass over a trace's events, keeping what the analysis needs: the GPU activities, the
runtime calls by correlation id, the CPU ops by external id and by thread, the user's Python
frames, and the spans with a cause (steps, DataLoader waits, collectives, the host's waits)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from typing import Any

import msgspec

from profilers.kineto.events import (
    ASYNC_COPY_CALLS,
    COMM_PREFIXES,
    COPY_OPS,
    CPU_CATS,
    GPU_CATS,
    MEMCPY,
    PYTHON_CATS,
    RUNTIME_CATS,
    SYNC_CALLS,
    Activity,
    Call,
    Calls,
    HostSpan,
    RankTrace,
    Step,
    is_comm,
    is_input,
    is_nccl,
    memcpy_kind,
    user_frame,
)
from profilers.kineto.stacks import Frame, op_of, where_of

#: How the names of the CPU spans the analysis needs begin (steps, DataLoader, collectives).
MARKS = ("ProfilerStep#", "enumerate(DataLoader)", *COMM_PREFIXES)


#: Larger than any time a trace holds (in us: Kineto's epoch clock reads about 1.8e15 in
#: 2026, 1e17 is the year 5138); a time beyond it is damage, and would overflow on the way
#: to nanoseconds.
MAX_TS_US = 1e17


def number(value: Any, default: int = -1) -> int:
    if type(value) is int:  # NB: the common case first: a million calls on a large trace
        return value
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    if isinstance(value, str):
        digits = value.rsplit(" ", 1)[-1]
        return int(digits) if digits.lstrip("-").isdigit() else default
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
        self.activities: list[Activity] = []
        names = {"": 0}
        self.launches = Calls(names, first=False)
        self.ops = Calls(names, first=True)
        self.launching: dict[str, int] = {}
        self.marks: list[Call] = []  # steps, input, comm spans (any CPU op or annotation)
        self.python: dict[str, list[tuple[int, int, Frame]]] = {}
        self.cats: set[str] = set()
        self.runtime_names: set[str] = set()
        self.cpu_ops = 0
        self.first = math.inf
        self.last = -math.inf
        self.own = False
        self.legacy_kernels = 0
        """Kernels in the pre-Kineto autograd profiler's spelling (no category, pid "CUDA
        functions"): torch.autograd.profiler with use_cuda=True before Kineto."""

    def add(self, e: Event) -> None:
        # NB: the hot loop of a large trace (a million events): one attribute per field
        if e.ph != "X":
            if e.ph == "M" and e.name == "process_name" and isinstance(e.args, Args):
                self.own = self.own or str(e.args.name).startswith("gpuwatch:")
            return
        ts, dur = e.ts, e.dur
        if not isinstance(ts, int | float) or not -MAX_TS_US < ts < MAX_TS_US:
            return  # inf (1e999 parses as inf), nan, or a damaged time past any clock's
        if self.base_us is None:
            self.base_us = math.floor(ts)
        if not isinstance(dur, int | float) or not -MAX_TS_US < dur < MAX_TS_US:
            return
        cat = e.cat
        cat = cat.lower() if isinstance(cat, str) else str(cat)
        if cat == "trace":
            return
        if not cat and e.pid == "CUDA functions":
            self.legacy_kernels += 1
        self.cats.add(cat)
        name = sys.intern(str(e.name))  # NB: a name recurs thousands of times: kept once
        args = e.args or NO_ARGS
        start = round((ts - self.base_us) * 1000)
        end = start + max(0, round(dur * 1000))
        if start < self.first:
            self.first = start
        if end > self.last:
            self.last = end
        kind = GPU_CATS.get(cat)
        if kind is not None:
            self._activity(kind, name, e, args, start, end)
        elif cat in RUNTIME_CATS:
            self._runtime(name, e, args, start, end)
        elif cat in CPU_CATS:
            self._cpu(cat, name, e, args, start, end)
        elif cat in PYTHON_CATS:
            frame = user_frame(name)
            if frame is not None:
                self.python.setdefault(str(e.tid), []).append((start, end, frame))

    def _runtime(self, name: str, e: Event, args: Args, start: int, end: int) -> None:
        self.runtime_names.add(name)
        corr = number(args.correlation)
        if corr < 0:  # NB: kept (a sync may block the host) under a key no activity has
            corr = -2 - len(self.launches.data)
        ext = args.external_id
        ext = number(args.external_id_lower if ext is None else ext, 0)
        tid = str(e.tid)
        self.launches.add(corr, name, tid, start, end, ext, "")
        self.launching[tid] = self.launching.get(tid, 0) + 1

    def _activity(self, kind: str, name: str, e: Event, args: Args, start: int, end: int) -> None:
        direction, memory = memcpy_kind(name) if kind == MEMCPY else ("", "")
        self.activities.append(
            Activity(
                kind,
                name,
                number(args.device, number(e.pid, 0)),
                number(args.stream, number(e.tid, 0)),
                start,
                end,
                max(-1, number(args.correlation)),  # -1: none (no launch has it)
                max(0, number(args.bytes, 0)),
                direction,
                memory,
                kind == "kernel" and is_nccl(name),
            )
        )

    def _cpu(self, cat: str, name: str, e: Event, args: Args, start: int, end: int) -> None:
        stack, tid, ext = args.call_stack, str(e.tid), number(args.external_id, 0)
        stack = stack if isinstance(stack, str) else ""
        if cat != "user_annotation":
            self.cpu_ops += 1
            self.ops.add(ext, name, tid, start, end, ext, stack)
        if name.startswith(MARKS) and (name[0] == "P" or is_input(name) or is_comm(name)):
            self.marks.append(Call(name, sys.intern(tid), start, end, ext, stack))


def steps_of(marks: Iterable[Call]) -> list[Step]:
    seen: dict[str, Step] = {}
    main = None
    for c in marks:
        if not c.name.startswith("ProfilerStep#") or c.name in seen:
            continue
        if main is not None and c.tid != main:
            continue
        main = c.tid
        number = c.name[len("ProfilerStep#") :]
        seen[c.name] = Step(c.name, int(number) if number.isdigit() else None, c.start_ns, c.end_ns)
    return sorted(seen.values(), key=lambda s: s.start_ns)


def blocked_spans(trace: RankTrace) -> list[HostSpan]:
    """The host's waits: a synchronising runtime call, or a copy from or to pageable memory
    (the host stages it), each with the CPU op and line that made it."""
    pageable = {
        a.correlation for a in trace.activities if a.kind == MEMCPY and a.memory == "pageable"
    }
    spans: list[HostSpan] = []
    for corr, call in trace.launches.named(SYNC_CALLS | ASYNC_COPY_CALLS):
        if call.name not in SYNC_CALLS and corr not in pageable:
            continue
        op = op_of(trace, call)
        op_name = op.name if op is not None else call.name
        if op_name in ("aten::_local_scalar_dense", "aten::item"):
            cause, detail = "sync", "item"
        elif op_name in COPY_OPS or "Memcpy" in call.name or "memcpy" in call.name.lower():
            cause, detail = "copy", call.name
        else:
            cause, detail = "sync", call.name
        where = where_of(trace, op if op is not None else call, op_name)
        spans.append(HostSpan(cause, call.start_ns, call.end_ns, where, detail))
    return spans


def marked_spans(trace: RankTrace, marks: Iterable[Call]) -> list[HostSpan]:
    spans = []
    for c in marks:
        if is_input(c.name):
            spans.append(HostSpan("input", c.start_ns, c.end_ns, where_of(trace, c), c.name))
        elif is_comm(c.name):
            spans.append(HostSpan("comm", c.start_ns, c.end_ns, where_of(trace, c), c.name))
    return spans
