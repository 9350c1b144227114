"""Reading torch.profiler traces: a ``.json`` or ``.json.gz`` file (``prof.export_chrome_trace()``,
``tensorboard_trace_handler``), or a folder of them (one file per rank), into :class:`RankTrace`.
Every way a file can be wrong ends in one :class:`TraceError` with a one-line message. Both
torch 1.8/1.9's spellings (``Kernel``, ``Runtime``, ``Operator``, ``Call stack``) and today's
are read.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterator, Sequence
from io import BufferedIOBase
from itertools import chain
from typing import Any, TypeVar

import msgspec
import numpy as np

from profilers.kineto.collect import (
    Collect,
    Event,
    blocked_spans,
    event_of,
    marked_spans,
    number,
    steps_of,
)
from profilers.kineto.events import NO_CALL, Activities, Calls, Ints, RankTrace
from profilers.kineto.result import RankResult
from profilers.kineto.stacks import Places, Segments, callers, flatten

TRACE_ENDINGS = (".json", ".json.gz")


class TraceError(Exception):
    """A file that is not a torch.profiler trace this reader can analyse (one line)."""


class NotATrace(TraceError):
    """JSON that is no Chrome trace: refused when named, passed over inside a folder."""


class NoGpuActivity(TraceError):
    """A trace with no GPU activity (CPU-only, or CUPTI recorded nothing): refused when named;
    inside a folder of ranks, passed over when another rank has some (a rank that only loads
    data or a CPU-only helper process leaves such a file beside the GPU ranks')."""


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
    """The file's bytes, gunzipped when they are gzip (by content, whatever the name). NB: read
    whole (``f.read(4 GiB)`` fails under a memory limit), but never a device (``/dev/zero``)."""
    try:
        if not stat.S_ISREG(mode := os.stat(path).st_mode) and not stat.S_ISFIFO(mode):
            raise TraceError(f"{path} is not a regular file (a device or socket), not a trace")
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise TraceError(f"no such file: {path}") from None
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(f"{path} is a damaged or truncated gzip file ({exc})") from None
    return data


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(path: str) -> Any:
    try:
        return json.loads(read_bytes(path), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise TraceError(f"{path} is not text (neither JSON nor gzip)") from None
    except json.JSONDecodeError as exc:
        raise TraceError(
            f"{path} is not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno}): "
            "truncated?"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise TraceError(f"{path}: {exc}") from None


def _gpus(meta: dict[str, Any]) -> dict[int, str]:
    props = meta.get("deviceProperties")
    if not isinstance(props, list):
        return {}
    return {
        number(p.get("id"), i): str(p.get("name", ""))
        for i, p in enumerate(props)
        if isinstance(p, dict)
    }


def _refuse(path: str, got: Collect, gpus: dict[int, str]) -> None:
    """:class:`TraceError` for another vendor's trace or a legacy one, :class:`NoGpuActivity`
    (saying why) for one with no GPU activity."""
    names = " ".join(gpus.values())
    if any(w in names for w in ("AMD", "Radeon", "Instinct")) or any(
        n.startswith("hip") for n in got.runtime_names
    ):
        raise TraceError(
            f"{path} is an AMD (ROCm/HIP) trace; gpuwatch reads NVIDIA CUDA traces only "
            "(HTA reads ROCm traces)"
        )
    other = sorted(c for c in got.cats if c.startswith(("mtia", "xpu", "hpu", "privateuse")))
    if other:
        raise TraceError(
            f"{path} is a trace of another accelerator ({other[0]} events); gpuwatch reads "
            "NVIDIA CUDA traces only"
        )
    if got.gpu:
        return
    if got.legacy_kernels:
        raise TraceError(
            f"{path} is a legacy autograd-profiler trace (torch.autograd.profiler with "
            "use_cuda=True, before Kineto: no CUPTI activity, streams or launches); gpuwatch "
            "reads torch.profiler traces (activities=[ProfilerActivity.CPU, "
            "ProfilerActivity.CUDA])"
        )
    if "cuda_profiler_range" in got.cats:
        raise NoGpuActivity(
            f"{path} was recorded with CUPTI's range profiler (cuda_profiler_range events: "
            "hardware counters per range), which records no kernel timeline; profile with "
            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and no profiler metrics"
        )
    if got.own:
        raise NoGpuActivity(
            f"{path} is a Chrome trace gpuwatch wrote (its own trace output), not a "
            "torch.profiler trace; report the run's JSON instead"
        )
    if len(got.launches.data[0]):
        raise NoGpuActivity(
            f"{path} has CUDA runtime calls but no GPU activity: CUPTI recorded no kernel or copy "
            "(another profiler such as nsys or ncu holding CUPTI?)"
        )
    if got.cpu_ops:
        raise NoGpuActivity(
            f"{path} is a CPU-only trace: no GPU activity was recorded (profile with "
            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU)"
        )
    raise NoGpuActivity(
        f"{path} is a Chrome trace with no torch.profiler events (no CPU op, no GPU activity)"
    )


CHUNK_BYTES = 1 << 19
"""Read (after gunzip) and decoded at a time: a trace's events never sit in memory whole."""
_EVENTS = msgspec.json.Decoder(list[Event])
TRIES = 8
"""Cuts tried a chunk before reading on (each costs a decode of the chunk)."""
_START = re.compile(rb'\s*(?:\[|\{.*?"traceEvents"\s*:\s*\[)', re.S)


def _decoded(text: bytes) -> list[Event] | None:
    try:
        return _EVENTS.decode(b"[" + text + b"]")
    except msgspec.DecodeError:
        return None


def _batches(f: BufferedIOBase, meta: dict[str, Any]) -> Iterator[list[Event]]:
    """The events of a trace file, a chunk's worth at a time, and its other keys into ``meta``;
    ValueError where the file is not a plain trace (the whole reading then says what it is).
    NB: a cut is only where ``[`` + the events before it + ``]`` decodes, and a cut inside a
    string or a nested value never does, so whatever its names and arguments hold, the events
    are the JSON's own."""
    buf = b""
    while (m := _START.match(buf)) is None:
        more = f.read(CHUNK_BYTES)
        if not more or len(buf) > 1 << 24:  # 16 MiB of keys before the events: none such
            raise ValueError("no traceEvents array at the start")
        buf += more
    head, buf = buf[: m.end() - 1], buf[m.end() :]
    while more := f.read(CHUNK_BYTES):
        buf += more
        i, tries = len(buf), TRIES  # NB: tries bounded: a damaged event fails every cut
        while tries and (i := buf.rfind(b"}", 0, i)) >= 0:
            if buf[i + 1 : i + 64].lstrip()[:1] == b",":
                tries -= 1
                if (events := _decoded(buf[: i + 1])) is not None:
                    yield events
                    del events  # NB: one batch alive at a time (the caller drops its own)
                    buf = buf[i + 1 :].lstrip()[1:]
                    break
        if len(buf) > 1 << 24:
            raise ValueError("no event ends in 16 MiB: damaged?")
    # the last event ends at the first "}" before "]" where the events before it decode
    j, tries, events = -1, TRIES, [] if buf.lstrip()[:1] == b"]" else None
    while events is None and tries and (j := buf.find(b"}", j + 1)) >= 0:
        if buf[j + 1 : j + 64].lstrip()[:1] == b"]":
            tries -= 1
            events = _decoded(buf[: j + 1])
    if events is None:
        raise ValueError("the traceEvents array never ends")
    doc = msgspec.json.decode(head + b"[]" + buf[buf.index(b"]", j + 1) + 1 :])
    meta.update(doc if isinstance(doc, dict) else {})  # a damaged tail raised above
    yield events


def _streamed(path: str) -> tuple[Collect, dict[str, Any]] | None:
    """The events of ``path`` collected as they are decoded, and its other keys; None where it
    is not a plain regular file holding a whole trace (the whole reading says why)."""
    got, meta = Collect(), dict[str, Any]()
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as raw:
            magic = raw.read(2)
            raw.seek(0)
            f: BufferedIOBase = gzip.GzipFile(fileobj=raw) if magic == b"\x1f\x8b" else raw
            for events in _batches(f, meta):
                got.add(events)
                del events
    except (OSError, EOFError, zlib.error, ValueError, msgspec.DecodeError, RecursionError):
        return None
    return got, meta


def read_trace(path: str, whole: bool = False) -> RankTrace | TraceError:
    """One file's :class:`RankTrace` (rank 0 where it names none), or its :class:`TraceError`
    returned, not raised: decoded as a stream, or, with ``whole`` or where the stream cannot (a
    damaged file, a pipe), parsed whole (the reference reading)."""
    try:
        found = None if whole else _streamed(path)
        if found is None:
            return trace_from_doc(parse_json(path), path, 0)
        return _trace(*found, path, 0)
    except TraceError as exc:
        return exc


def trace_from_doc(doc: Any, path: str, rank: int) -> RankTrace:
    """One rank's :class:`RankTrace` from a parsed trace document; :class:`NotATrace` when it
    is no Chrome trace."""
    doc = {"traceEvents": doc} if isinstance(doc, list) else doc
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        if isinstance(doc, dict) and str(doc.get("schema", "")).startswith("gpuwatch."):
            raise NotATrace(f"{path} is a gpuwatch report, compressed: gunzip it first")
        raise NotATrace(f"{path} is JSON but not a Chrome trace (no traceEvents)")
    got = Collect()
    for at in range(0, len(raws := doc["traceEvents"]), 1 << 13):  # as the stream's chunks
        got.add([e for raw in raws[at : at + (1 << 13)] if (e := event_of(raw)) is not None])
    return _trace(got, doc, path, rank)


def _trace(got: Collect, meta: dict[str, Any], path: str, rank: int) -> RankTrace:
    got.ops.seal()
    got.launches.seal()
    marks, names = np.frombuffer(got.marks, np.int64).reshape(-1, 7), got.ops.names
    _refuse(path, got, gpus := _gpus(meta))
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and type(info.get("rank")) is int:
        rank = info["rank"]
    python = _segments(list(np.frombuffer(got.python, np.int64).reshape(-1, 4).T), names)
    segs = _segments(got.ops.cols[2:5], names)
    acts = Activities(got.gpu, got.gpu_names)
    launch = got.launches.rows_of(acts.correlation)
    acts.launched = np.r_[NO_CALL, got.launches.cols[3]][launch + 1]
    acts.places, acts.wheres = np.full(len(launch), -1), []
    main = next(
        (names[t] for _, n, t, *_ in marks.tolist() if names[n][:13] == "ProfilerStep#"), None
    )
    if main is None:
        main = max(got.launching, key=lambda t: got.launching[t], default="")
    trace = RankTrace(
        path=path, rank=rank, gpus=gpus, base_us=got.base_us or 0, activities=acts, names=names,
        steps=[], spans=[], span_ns=(int(got.first), int(got.last)), python=python,
        frames=list(got.frames), main_tid=main,
        has_stacks=bool(python) or bool(got.ops.cols[6].any()),
    )  # fmt: skip
    places = Places(trace)
    for at in range(0, len(launch), 1 << 14):  # NB: a chunk at a time: four copies of its rows
        ok = np.flatnonzero(launch[at : at + (1 << 14)] >= 0) + at
        acts.places[ok] = places.where(callers(got.launches.at(launch[ok]), got.ops, segs))
    acts.wheres = places.wheres
    blocked = blocked_spans(got, acts, segs, places)
    got.ops = got.launches = Calls({}, True)  # NB: the host calls are not needed past here
    del segs
    spans = marked_spans(trace, marks, places) + blocked
    return dataclasses.replace(trace, steps=steps_of(marks, names), spans=spans)


def _segments(cols: list[Ints], names: Sequence[str]) -> dict[str, Segments]:
    """Per thread, the innermost of nested labelled intervals (``cols``: thread, start, end,
    and label, else the row's index) over time: segment starts and labels (-1 for none)."""
    tids, starts, ends = cols[:3]
    labels = cols[3] if len(cols) > 3 else None
    out: dict[str, Segments] = {}
    for tid in np.unique(tids).tolist():
        rows = np.flatnonzero(tids == tid)
        rows = rows[np.lexsort((-ends[rows], starts[rows]))]
        out[names[tid]] = flatten(
            chain.from_iterable(  # NB: lists of ints a chunk at a time (all: 3x the memory)
                zip(
                    *((c[at] if c is not None else at).tolist() for c in (starts, ends, labels)),
                    strict=True,
                )
                for at in (rows[i : i + (1 << 14)] for i in range(0, len(rows), 1 << 14))
            )
        )
    return out


def read_traces(paths: Sequence[str], whole: bool = False) -> list[RankTrace]:
    """The ranks of ``paths`` (files, or folders of one file per rank), as :func:`in_rank_order`
    puts them. ``whole``: each file parsed whole (the reference reading the stream's figures are
    tested against)."""
    return in_rank_order(paths, [trace_files(p) for p in paths], lambda p: read_trace(p, whole))


R = TypeVar("R", RankTrace, RankResult)


def in_rank_order(
    paths: Sequence[str], listed: Sequence[list[str]], outcome: Callable[[str], R | TraceError]
) -> list[R]:
    """The ranks of ``paths`` (``listed``: each one's :func:`trace_files`) from each file's
    ``outcome``, in rank order. Inside a folder, a JSON file that is no Chrome trace (a report
    written there, a config) or one with no GPU activity is passed over and named in the first
    rank's notes. NB: a file that names no rank (no distributedInfo) is rank 0 read alone: two
    such files, or two that say the same rank, are ranked in the files' order."""
    ranks: list[R] = []
    passed: dict[type[TraceError], list[str]] = {NotATrace: [], NoGpuActivity: []}
    for given, files in zip(paths, listed, strict=True):
        before, idle = len(ranks), None
        for path in files:
            got = outcome(path)
            if not isinstance(got, TraceError):
                ranks.append(got)
            elif os.path.isdir(given) and type(got) in passed:
                passed[type(got)].append(os.path.basename(path))
                idle = idle or (got if isinstance(got, NoGpuActivity) else None)
            else:
                raise got
        if len(ranks) == before:
            raise idle or TraceError(
                f"{given} holds no torch.profiler trace (only {', '.join(passed[NotATrace])})"
            )
    if len({r.rank for r in ranks}) != len(ranks):
        ranks = [dataclasses.replace(r, rank=i) for i, r in enumerate(ranks)]
    ranks.sort(key=lambda r: r.rank)
    why = {NotATrace: "JSON, not a Chrome trace", NoGpuActivity: "no GPU activity in the trace"}
    said: list[str] = [
        f"passed over ({why[k]}): {', '.join(names)}" for k, names in passed.items() if names
    ]
    if said:
        ranks[0] = dataclasses.replace(ranks[0], notes=(*said, *ranks[0].notes))
    return ranks
