"""Reading torch.profiler traces: a ``.json`` or ``.json.gz`` file (``prof.export_chrome_trace()``,
``tensorboard_trace_handler``), or a folder of them (one file per rank), into :class:`RankTrace`.

Every way a file can be wrong ends in one :class:`TraceError` with a one-line message: not JSON,
a truncated gzip, no events, no GPU activity (a CPU-only trace, or CUPTI recorded nothing), an AMD
(ROCm) or other vendor's trace. Both the torch 1.8/1.9 spellings (``Kernel``, ``Runtime``,
``Operator``, ``Call stack``) and today's (``kernel``, ``cuda_runtime``, ``cpu_op``,
``python_function``) are read.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import zlib
from collections.abc import Iterable, Sequence
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
from profilers.kineto.stacks import Frame, flatten, op_of, where_of

#: Larger than any trace worth reading in one process (json holds ~10x the bytes in memory).
MAX_TRACE_BYTES = 4 * 1024**3
TRACE_ENDINGS = (".json", ".json.gz")
#: How the names of the CPU spans the analysis needs begin (steps, DataLoader, collectives).
MARKS = ("ProfilerStep#", "enumerate(DataLoader)", *COMM_PREFIXES)


class TraceError(Exception):
    """A file that is not a torch.profiler trace this reader can analyse (one line)."""


class NotATrace(TraceError):
    """JSON that is no Chrome trace: refused when named, passed over inside a folder."""


def trace_files(path: str) -> list[str]:
    """The traces in a folder (``*.json``, ``*.json.gz``, sorted), or ``[path]`` for a file."""
    if not os.path.isdir(path):
        return [path]
    found = sorted(
        os.path.join(path, n)
        for n in os.listdir(path)
        if n.endswith(TRACE_ENDINGS) and os.path.isfile(os.path.join(path, n))
    )
    if not found:
        raise TraceError(f"{path} is a folder with no .json or .json.gz trace in it")
    return found


def read_bytes(path: str) -> bytes:
    """The file's bytes, gunzipped when they are gzip (by content, whatever the name)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_TRACE_BYTES + 1)
    except FileNotFoundError:
        raise TraceError(f"no such file: {path}") from None
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gunzip(data)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(f"{path} is a damaged or truncated gzip file ({exc})") from None
    if len(data) > MAX_TRACE_BYTES:
        raise TraceError(f"{path} is over 4 GiB: too large to analyse in one process")
    return data


def gunzip(data: bytes) -> bytes:
    """``data`` decompressed, at most MAX_TRACE_BYTES + 1 of it (a gzip bomb stops there);
    EOFError when the compressed stream ends early (a truncated download or copy)."""
    stream = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = stream.decompress(data, MAX_TRACE_BYTES + 1)
    if len(out) <= MAX_TRACE_BYTES and not stream.eof:
        raise EOFError("it ends before the end of its compressed stream")
    return out


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(data: bytes, path: str) -> Any:
    try:
        return json.loads(data, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise TraceError(f"{path} is not text (neither JSON nor gzip)") from None
    except json.JSONDecodeError as exc:
        raise TraceError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}): truncated?"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise TraceError(f"{path}: {exc}") from None


def events_of(doc: Any, path: str) -> tuple[list[Any], dict[str, Any]]:
    """The trace's events and its other keys; :class:`TraceError` when it is no Chrome trace."""
    if isinstance(doc, list):
        return doc, {}
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return doc["traceEvents"], doc
    if isinstance(doc, dict) and str(doc.get("schema", "")).startswith("gpuwatch."):
        raise NotATrace(f"{path} is a gpuwatch report, compressed: gunzip it first")
    raise NotATrace(f"{path} is JSON but not a Chrome trace (no traceEvents)")


def _num(value: Any, default: int = -1) -> int:
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


def _gpus(meta: dict[str, Any]) -> dict[int, str]:
    props = meta.get("deviceProperties")
    if not isinstance(props, list):
        return {}
    return {
        _num(p.get("id"), i): str(p.get("name", ""))
        for i, p in enumerate(props)
        if isinstance(p, dict)
    }


def _vendor_problem(
    path: str, gpus: dict[int, str], cats: set[str], runtime: set[str]
) -> str | None:
    names = " ".join(gpus.values())
    if any(w in names for w in ("AMD", "Radeon", "Instinct")) or any(
        n.startswith("hip") for n in runtime
    ):
        return (
            f"{path} is an AMD (ROCm/HIP) trace; gpuwatch reads NVIDIA CUDA traces only "
            "(HTA reads ROCm traces)"
        )
    other = sorted(c for c in cats if c.startswith(("mtia", "xpu", "hpu", "privateuse")))
    if other:
        return f"{path} is a trace of another accelerator ({other[0]} events); gpuwatch reads NVIDIA CUDA traces only"
    return None


def _gpu_problem(path: str, own: bool, cpu_ops: int, runtime_calls: int) -> str:
    if own:
        return (
            f"{path} is a Chrome trace gpuwatch wrote (--trace), not a torch.profiler trace; "
            "report the run's JSON instead"
        )
    if runtime_calls:
        return (
            f"{path} has CUDA runtime calls but no GPU activity: CUPTI recorded no kernel or copy "
            "(another profiler such as nsys or ncu holding CUPTI?)"
        )
    if cpu_ops:
        return (
            f"{path} is a CPU-only trace: no GPU activity was recorded (profile with "
            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU)"
        )
    return f"{path} is a Chrome trace with no torch.profiler events (no CPU op, no GPU activity)"


class _Collect:
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
        if not (math.isfinite(ts) and math.isfinite(dur)):  # 1e999 parses as inf
            return
        cat = e.get("cat", "")
        cat = cat.lower() if isinstance(cat, str) else str(cat)
        if cat == "trace":
            return
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
            corr = _num(args.get("correlation"))
            ext = _num(args.get("External id", args.get("external id")), 0)
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
        device = _num(args.get("device"), _num(e.get("pid"), 0))
        stream = _num(args.get("stream"), _num(e.get("tid"), 0))
        self.activities.append(
            Activity(
                kind,
                name,
                device,
                stream,
                start,
                end,
                _num(args.get("correlation")),
                max(0, _num(args.get("bytes"), 0)),
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
            _num(args.get("External id"), 0),
            stack if isinstance(stack, str) else "",
        )
        if cat != "user_annotation":
            self.cpu_ops += 1
            self.ops.setdefault(call.ext_id, call)
            self.by_tid.setdefault(call.tid, []).append((start, end, call))
        if name.startswith(MARKS) and (name[0] == "P" or is_input(name) or is_comm(name)):
            self.marks.append(call)


def _steps(marks: Iterable[Call]) -> list[Step]:
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


def _blocked(trace: RankTrace) -> list[HostSpan]:
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


def _marked(trace: RankTrace, marks: Iterable[Call]) -> list[HostSpan]:
    spans = []
    for c in marks:
        if is_input(c.name):
            spans.append(HostSpan("input", c.start_ns, c.end_ns, where_of(trace, c), c.name))
        elif is_comm(c.name):
            spans.append(HostSpan("comm", c.start_ns, c.end_ns, where_of(trace, c), c.name))
    return spans


def trace_from_doc(doc: Any, path: str, rank: int) -> RankTrace:
    """One rank's :class:`RankTrace` from a parsed trace document."""
    events, meta = events_of(doc, path)
    base = next(
        (
            float(e["ts"])
            for e in events
            if isinstance(e, dict)
            and e.get("ph") == "X"
            and isinstance(e.get("ts"), int | float)
            and math.isfinite(e["ts"])
        ),
        0.0,
    )
    got = _Collect(math.floor(base))
    for e in events:
        got.add(e)
    gpus = _gpus(meta)
    problem = _vendor_problem(path, gpus, got.cats, got.runtime_names)
    if problem is None and not got.activities:
        problem = _gpu_problem(path, got.own, got.cpu_ops, len(got.launches))
    if problem is not None:
        raise TraceError(problem)
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and type(info.get("rank")) is int:
        rank = info["rank"]
    python = {tid: flatten(ivs) for tid, ivs in got.python.items()}
    steps = _steps(got.marks)
    main = next((c.tid for c in got.marks if c.name.startswith("ProfilerStep#")), None)
    if main is None:
        main = max(got.launching, key=lambda t: got.launching[t], default="")
    trace = RankTrace(
        path=path,
        rank=rank,
        gpus=gpus,
        base_us=got.base_us,
        activities=got.activities,
        launches=got.launches,
        ops=got.ops,
        steps=steps,
        spans=[],
        span_ns=(int(got.first), int(got.last)),
        python=python,
        op_segments={tid: flatten(ivs) for tid, ivs in got.by_tid.items()},
        main_tid=main,
        has_stacks=bool(python) or any(c.stack for c in got.ops.values()),
    )
    return dataclasses.replace(trace, spans=_marked(trace, got.marks) + _blocked(trace))


def read_traces(paths: Sequence[str]) -> list[RankTrace]:
    """The ranks of ``paths`` (files, or folders of one file per rank), in rank order. Inside a
    folder, a JSON file that is no Chrome trace (a report written there, a config) is passed
    over and named in the first rank's notes."""
    traces: list[RankTrace] = []
    skipped: list[str] = []
    for given in paths:
        in_folder = os.path.isdir(given)
        before = len(traces)
        for path in trace_files(given):
            try:
                doc = parse_json(read_bytes(path), path)
                traces.append(trace_from_doc(doc, path, len(traces)))
            except NotATrace:
                if not in_folder:
                    raise
                skipped.append(os.path.basename(path))
        if in_folder and len(traces) == before:
            raise TraceError(f"{given} holds no torch.profiler trace (only {', '.join(skipped)})")
    ranks = [t.rank for t in traces]
    if len(set(ranks)) != len(ranks):  # two files say the same rank: keep the files' order
        traces = [dataclasses.replace(t, rank=i) for i, t in enumerate(traces)]
    traces.sort(key=lambda t: t.rank)
    if skipped:
        note = f"passed over (JSON, not a Chrome trace): {', '.join(skipped)}"
        traces[0] = dataclasses.replace(traces[0], notes=(*traces[0].notes, note))
    return traces
