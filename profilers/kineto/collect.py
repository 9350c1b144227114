"""One pass over a trace's events, keeping what the analysis needs: the GPU activities, the
runtime calls by correlation id, the CPU ops by external id and by thread, the user's Python
frames, and the spans with a cause (steps, DataLoader waits, collectives, the host's waits)."""

from __future__ import annotations

import math
import operator
from array import array
from collections import Counter
from collections.abc import Sequence
from contextlib import suppress
from itertools import compress, repeat
from typing import Any

import msgspec
import numpy as np

from profilers.kineto.events import (
    ASYNC_COPY_CALLS,
    COMM_PREFIXES,
    COPY_OPS,
    GPU_CATS,
    KINDS,
    MEMCPY,
    PYTHON_CATS,
    RUNTIME_CATS,
    SYNC_CALLS,
    Activities,
    Calls,
    HostSpan,
    Ints,
    RankTrace,
    Step,
    is_input,
    user_frame,
)
from profilers.kineto.stacks import Frame, Places, Segments, callers

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
#: Each lowered category's class in :meth:`Collect.add`: 0-2 a GPU activity (as GPU_KINDS), 3 a
#: CPU op, 4 an annotation, 5 a runtime call, 6 "trace", 7 a Python frame, 8 anything else
CLASSES = GPU_KINDS | {"cpu_op": 3, "operator": 3, "user_annotation": 4, "trace": 6}
CLASSES |= dict.fromkeys(RUNTIME_CATS, 5) | dict.fromkeys(PYTHON_CATS, 7)


def numbers(values: list[Any], default: int | Ints) -> Ints:
    """:func:`number` of each value as a column (``default``: one, or one per row)."""
    if (kinds := {*map(type, values)}) <= {int, type(None)}:  # NB: the common case at numpy's
        none = type(None) in kinds and [v is None for v in values]  # speed, the others one by one
        with suppress(OverflowError):
            col = np.array([0 if v is None else v for v in values] if none else values, np.int64)
            if not (col == -I64).any():
                return np.where(none, default, col)
    rows = np.broadcast_to(default, len(values)).tolist()
    return np.array([number(v, d) for v, d in zip(values, rows, strict=True)], np.int64)


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
        self.cats, self.runtime_names = set[str](), set[str]()
        self.cpu_ops, self.first, self.last = 0, math.inf, -math.inf
        self.own = False
        self.legacy_kernels = 0  # the pre-Kineto autograd profiler's: no cat, pid "CUDA functions"

    def add(self, events: list[Event]) -> None:  # noqa: C901 - one pass, column by column
        """Keep what the analysis needs of ``events`` (a chunk's, or all) a field at a time, new
        names given ids in the order one by one gives them. NB: an event whose ``ts`` or ``dur``
        is no number in range is left out (a good ``ts`` sets ``base_us`` all the same)."""
        phs = _field("ph", events)
        xs = list(compress(events, map(operator.eq, phs, repeat("X"))))
        if (keep := _good(ts := _field("ts", xs))) is not None:
            xs, ts = list(compress(xs, keep)), list(compress(ts, keep))
        if self.base_us is None and xs:
            self.base_us = math.floor(ts[0])
        if (keep := _good(durs := _field("dur", xs))) is not None:
            xs, ts, durs = (list(compress(c, keep)) for c in (xs, ts, durs))
        cats, names = _field("cat", xs), _field("name", xs)
        cats, names = ([v if type(v) is str else str(v) for v in c] if {*map(type, c)} - {str} else c
                       for c in (cats, names))  # fmt: skip
        start = _ns(ts, self.base_us or 0)
        end = start + np.maximum(0, _ns(durs, 0))
        self.own = self.own or "M" in phs and any(
            e.ph == "M" and e.name == "process_name" and isinstance(e.args, Args)
            and str(e.args.name).startswith("gpuwatch:") for e in events
        )  # fmt: skip
        lowered = {c: c.lower() for c in set(cats)}
        classes = {c: CLASSES.get(low, 8) for c, low in lowered.items()}
        kind = np.fromiter(map(classes.__getitem__, cats), np.int8, len(cats))
        if not len(kept := np.flatnonzero(kind != 6)):
            return None
        self.first, self.last = min(self.first, start[kept].min()), max(self.last, end[kept].max())
        self.cats |= set(lowered.values()) - {"trace"}
        if "" in lowered:
            self.legacy_kernels += sum(e.pid == "CUDA functions" for e in xs if e.cat == "")
        events_o, names_o = (np.fromiter(c, object, len(xs)) for c in (xs, names))

        def rows(at: Ints, *fields: str) -> list[list[Any]]:  # name, thread, args' fields
            args = _field("args", some := events_o[at].tolist())
            args = [a or NO_ARGS for a in args] if None in args else args
            return [names_o[at].tolist(), _field("tid", some), *(_field(f, args) for f in fields)]

        gpu = np.flatnonzero(kind < 3)
        name, tid, corr, dev, stream, size = rows(gpu, "correlation", "device", "stream", "bytes")
        pid = _field("pid", events_o[gpu].tolist())
        for n in dict.fromkeys(name):
            self.gpu_names.setdefault(n, len(self.gpu_names))
        _append(self.gpu, [
            kind[gpu], list(map(self.gpu_names.__getitem__, name)),
            numbers(dev, numbers(pid, 0)), numbers(stream, numbers(tid, 0)),
            start[gpu], end[gpu], np.maximum(-1, numbers(corr, -1)),
            np.maximum(0, numbers(size, 0))
        ])  # fmt: skip
        host, python = np.flatnonzero((kind >= 3) & (kind <= 5)), np.flatnonzero(kind == 7)
        py_names = names_o[python].tolist()
        frames = list(map(user_frame, py_names))
        python = python[np.array([f is not None for f in frames], bool)]
        fields = ("correlation", "external_id", "external_id_lower", "call_stack")
        hnames, tids, corr, ext, ext_lower, stack = rows(host, *fields)
        tids = list(map(str, tids))  # NB: str: a thread's name in the trace's names
        py_tids = list(map(str, _field("tid", events_o[python].tolist())))
        kinds = kind[host]
        marked = {n for n in set(hnames) if n.startswith(MARKS) and (
            n[0] == "P" or is_input(n) or n.startswith(COMM_PREFIXES))}  # fmt: skip
        mark = (kinds != 5) & np.array([n in marked for n in hnames] if marked else 0, bool)
        plain = stack.count("") == len(stack)  # NB: no Call stack (the common case): no ids
        stacks = [] if plain else [(s if isinstance(s, str) else "") if m else None
                  for s, m in zip(stack, ((kinds == 3) | mark).tolist(), strict=True)]  # fmt: skip
        ids, host_at = self.ops.ids, host.tolist()
        firsts: dict[str, tuple[int, int]] = {}  # a new key's first (event, place in it)
        for at, where, keys in ((0, host_at, tids), (0, python.tolist(), py_tids),
                                (1, host_at, hnames), (2, host_at, stacks)):  # fmt: skip
            if new := {*keys} - ids.keys() - {None}:
                earliest = dict(zip(reversed(keys), reversed(where), strict=True))
                for k in new:
                    firsts[k] = min(firsts.get(k, (len(xs), 0)), (earliest[k], at))
        ids.update({k: len(ids) + i for i, k in enumerate(sorted(firsts, key=firsts.__getitem__))})
        t = np.fromiter(map(ids.__getitem__, tids), np.int64, len(tids))
        n = np.fromiter(map(ids.__getitem__, hnames), np.int64, len(tids))
        stack_id = np.array([0 if k is None else ids[k] for k in stacks] or 0 * t, np.int64)
        run, runs = kinds == 5, (kinds == 5).tolist()
        ext = [lo if e is None and r else e for e, lo, r in zip(ext, ext_lower, runs, strict=True)]
        ext_id, hs, he = numbers(ext, 0), start[host], end[host]
        self.ops.append([c[kinds == 3] for c in (ext_id, n, t, hs, he, stack_id)])
        _append(self.marks, [c[mark] for c in (0 * t, n, t, hs, he, ext_id, stack_id)])
        self.cpu_ops += int((kinds == 3).sum())
        key = numbers(list(compress(corr, runs)), -1)  # NB: none: kept (a sync may block the host)
        none = key < 0
        key[none] = -2 - 7 * (len(self.launches.data[0]) + np.flatnonzero(none))
        self.launches.append([key, n[run], t[run], hs[run], he[run], ext_id[run], 0 * key])
        self.runtime_names.update(compress(hnames, runs))
        for tid, count in Counter(compress(tids, runs)).items():
            self.launching[tid] = self.launching.get(tid, 0) + count
        fid = [self.frames.setdefault(f, len(self.frames)) for f in frames if f is not None]
        py_t = list(map(ids.__getitem__, py_tids))
        _append(self.python, [py_t, start[python], end[python], fid])


def _field(name: str, objs: list[Any]) -> list[Any]:
    return list(map(operator.attrgetter(name), objs))  # NB: no tuple per event (the GC's work)


def _good(times: list[Any]) -> list[bool] | None:
    """Which times a trace can hold (not inf, nan or past :data:`MAX`); None: all of them."""
    with suppress(OverflowError):
        if {*map(type, times)} <= {int, float} and (abs(np.array(times, float)) < MAX).all():
            return None
    return [isinstance(v, int | float) and -MAX < v < MAX for v in times]


def _ns(us: list[Any], base: int) -> Ints:
    """``round((t - base) * 1000)`` of each ``t``, as Python gives it: in float64 for a float,
    in int64 for an int (exact where a float64 is not)."""
    kinds = {*map(type, us)}
    exact: Ints = (np.array(us, np.int64) - base) * 1000 if kinds - {float} else np.zeros(0, int)
    if float not in kinds:
        return exact
    ns = np.rint((np.array(us, float) - base) * 1000).astype(np.int64)
    return np.where([type(t) is float for t in us], ns, exact) if len(exact) else ns


def _append(arr: array[int], cols: Sequence[Any]) -> None:
    arr.frombytes(np.column_stack(cols).astype(np.int64).tobytes())


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


def blocked_spans(
    got: Collect, acts: Activities, segments: dict[str, Segments], places: Places
) -> list[HostSpan]:
    """The host's waits: a synchronising runtime call, or a copy from or to pageable memory
    (the host stages it), each with the CPU op (on ``segments``) and line that made it."""
    launches = got.launches
    memory = np.array([m == "pageable" for _, m in acts.copy_kinds], bool)[acts.name]
    pageable = acts.correlation[memory & (acts.kind == KINDS.index(MEMCPY))]
    syncs, copies = (
        [launches.ids[n] for n in c if n in launches.ids] for c in (SYNC_CALLS, ASYNC_COPY_CALLS)
    )
    rows = np.sort(launches.rows)
    name, key = launches.cols[1][rows], launches.cols[0][rows]
    calls = launches.at(rows[np.isin(name, syncs) | np.isin(name, copies) & np.isin(key, pageable)])
    ops = callers(calls, got.ops, segments)
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
    names = trace.names
    marks = marks[
        [is_input(names[n]) or names[n].startswith(COMM_PREFIXES) for n in marks[:, 1].tolist()]
    ]
    return [
        HostSpan("input" if is_input(names[n]) else "comm", start, end, places.wheres[w], names[n])
        for (_, n, _, start, end, _, _), w in zip(
            marks.tolist(), places.where(marks).tolist(), strict=True
        )
    ]
