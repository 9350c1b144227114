"""One pass over a trace's events, keeping what the analysis needs: the GPU activities, the
runtime calls by correlation id, the CPU ops by external id and by thread, the user's Python
frames, and the spans with a cause (steps, DataLoader waits, collectives, the host's waits)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

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


class Collect:
    """One pass over the events, keeping what the analysis needs."""

    def __init__(self, base_us: float) -> None:
        self.base_us = base_us
        self.activities: list[Activity] = []
        self.launches: dict[int, Call] = {}
        self.ops: dict[int, Call] = {}
        self.by_tid: dict[str, list[tuple[int, int, Call]]] = {}
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

    def add(self, e: Any) -> None:
        # NB: the hot loop of a large trace (a million events): one dict lookup per field
        ph = e.get("ph") if isinstance(e, dict) else None
        if ph != "X":
            if ph == "M" and e.get("name") == "process_name":
                name = (e.get("args") or {}).get("name")
                self.own = self.own or (isinstance(name, str) and name.startswith("gpuwatch:"))
            return
        ts, dur = e.get("ts"), e.get("dur", 0)
        if not isinstance(ts, int | float) or not isinstance(dur, int | float):
            return
        if not (-MAX_TS_US < ts < MAX_TS_US and -MAX_TS_US < dur < MAX_TS_US):
            return  # inf (1e999 parses as inf), nan, or a damaged time past any clock's
        cat = e.get("cat", "")
        cat = cat.lower() if isinstance(cat, str) else str(cat)
        if cat == "trace":
            return
        if not cat and e.get("pid") == "CUDA functions":
            self.legacy_kernels += 1
        self.cats.add(cat)
        name = str(e.get("name", ""))
        raw = e.get("args")
        args: dict[str, Any] = raw if isinstance(raw, dict) else {}
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
            self.runtime_names.add(name)
            corr = number(args.get("correlation"))
            if corr < 0:  # NB: kept (a sync may block the host) under a key no activity has
                corr = -2 - len(self.launches)
            ext = number(args.get("External id", args.get("external id")), 0)
            tid = str(e.get("tid"))
            self.launches[corr] = Call(name, tid, start, end, ext)
            self.launching[tid] = self.launching.get(tid, 0) + 1
        elif cat in CPU_CATS:
            self._cpu(cat, name, e, args, start, end)
        elif cat in PYTHON_CATS:
            frame = user_frame(name)
            if frame is not None:
                self.python.setdefault(str(e.get("tid")), []).append((start, end, frame))

    def _activity(
        self, kind: str, name: str, e: dict[str, Any], args: dict[str, Any], start: int, end: int
    ) -> None:
        direction, memory = memcpy_kind(name) if kind == MEMCPY else ("", "")
        device = number(args.get("device"), number(e.get("pid"), 0))
        stream = number(args.get("stream"), number(e.get("tid"), 0))
        self.activities.append(
            Activity(
                kind,
                name,
                device,
                stream,
                start,
                end,
                max(-1, number(args.get("correlation"))),  # -1: none (no launch has it)
                max(0, number(args.get("bytes"), 0)),
                direction,
                memory,
                kind == "kernel" and is_nccl(name),
            )
        )

    def _cpu(
        self, cat: str, name: str, e: dict[str, Any], args: dict[str, Any], start: int, end: int
    ) -> None:
        stack = args.get("Call stack", "")
        call = Call(
            name,
            str(e.get("tid")),
            start,
            end,
            number(args.get("External id"), 0),
            stack if isinstance(stack, str) else "",
        )
        if cat != "user_annotation":
            self.cpu_ops += 1
            self.ops.setdefault(call.ext_id, call)
            self.by_tid.setdefault(call.tid, []).append((start, end, call))
        if name.startswith(MARKS) and (name[0] == "P" or is_input(name) or is_comm(name)):
            self.marks.append(call)


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
    for corr, call in trace.launches.items():
        sync = call.name in SYNC_CALLS
        if not sync and not (call.name in ASYNC_COPY_CALLS and corr in pageable):
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
