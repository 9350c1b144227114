"""How a run was profiled: :class:`Options` (what :func:`profilers.profile` was asked) and
:class:`RunOptions`, the report's typed ``options`` (its JSON shape unchanged). Needs no torch."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from profilers.finite import number


@dataclass(frozen=True)
class Options:
    kernel_timing: bool = True
    """Time every op: CUDA events on GPUs (resolved lazily), host time on the CPU."""
    user_code: tuple[str, ...] | None = None
    """Directories whose files count as user code; None: anything outside the libraries."""
    timeline_capacity: int = 10_000
    """How many of the newest copy/sync events the timeline keeps."""
    threads: bool = True
    """Profile threads started while profiling (DataParallel replicas)."""
    comm: bool = True
    """Count torch.nn.parallel.comm copies (DataParallel broadcast/scatter/gather/reduce)."""
    steps: tuple[int, int | None] | None = None
    """Profile only steps ``[A, B)`` (B None: to the end; a step ends at optimizer.step() or
    profilers.step()); outside them the mode is off the stack."""
    count_ops: bool | None = None
    """Count every op per line. None: when timing ops (which needs every op) or where the fast
    path (only copies, syncs and collectives reach Python) cannot serve: ``trace_syncs``, a torch
    without its hooks."""
    trace_syncs: bool = False
    """Syncs from PyTorch's GPU trace callbacks (adds those no rule explains, at a cost per CUDA
    event for the rest of the process); off: caught at their Python entry points."""
    time_steps: int = 64
    """Where each step's time goes: the newest steps kept in full (the sums cover all); 0: not
    measured. Not with ``steps``."""
    gpu: str | None = None
    """Under ``--fake-cuda``: the GPU whose times the model predicts, by name."""
    memory: bool | None = None
    """Which line made each tensor and holds which GPU bytes; None: on with fake GPUs, where
    every op is counted anyway."""
    inputs: tuple[str, ...] = ()
    """Input iterators besides the DataLoader, by dotted name (a class: its ``__next__`` or its
    ``__iter__``'s iterators; a function: its results): each item's wait is an input wait."""
    lib_lines: bool = False
    """A library's copies and syncs are charged to the library's line, not the user's that
    called it."""
    what_if: bool = False
    """On a GPU, record every op to replay the steps for each fix's saving; off, the hot path
    keeps no record (``gpu`` replays in any case)."""


_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "kernel_timing": (bool,),
    "user_code": (list, type(None)),
    "timeline_capacity": (int,),
    "threads": (bool,),
    "comm": (bool,),
    "steps": (list, type(None)),
    "count_ops": (bool, type(None)),
    "trace_syncs": (bool,),
    "time_steps": (int,),
}

_LATER_OPTIONS: dict[str, type] = {
    "memory": bool,
    "gpu": str,
    "inputs": list,
    "lib_lines": bool,
    "what_if": bool,
}
"""Options that came after the first reports: in the JSON only when not at their default."""

_LATER_DEFAULTS: dict[str, object] = {
    f.name: f.default for f in dataclasses.fields(Options) if f.name in _LATER_OPTIONS
}


@dataclass(frozen=True)
class FakeCudaRun:
    """A run on simulated GPUs: how many, the placeholders the script read back, its CUDA graphs."""

    devices: int
    placeholders: dict[str, int] = field(default_factory=dict)
    graphs: dict[str, object] | None = None
    memory_bytes: int | None = None
    """Each simulated GPU's memory size (``--fake-memory``; None in reports from before it)."""
    values: str | None = None
    """``real`` or ``placeholder`` values (None: reports from before real values: placeholders)."""

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"devices": self.devices, "placeholders": dict(self.placeholders)}
        if self.memory_bytes is not None:
            out["memory_bytes"] = self.memory_bytes
        if self.values is not None:
            out["values"] = self.values
        if self.graphs is not None:
            out["graphs"] = self.graphs
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> FakeCudaRun:
        ph = d.get("placeholders")
        graphs = d.get("graphs")
        return cls(
            devices=int(number(d["devices"])),
            placeholders={str(k): int(number(v)) for k, v in ph.items()}
            if isinstance(ph, dict)
            else {},
            graphs=dict(graphs) if isinstance(graphs, dict) else None,
            memory_bytes=mb if isinstance(mb := d.get("memory_bytes"), int) else None,
            values=v if isinstance(v := d.get("values"), str) else None,
        )


_TEXT = ("source", "kernel_timing_source", "counting", "gpu_stats", "gpu_samples_scope")


@dataclass(frozen=True)
class RunOptions:
    """A report's ``options``: how its run was profiled. None: not recorded; unknown keys are
    kept in ``extra`` and written back as they were."""

    profile: Options | None = None
    """What :func:`profilers.profile` was asked (JSON: its fields, at the top of ``options``)."""
    kernel_timing_source: str | None = None
    """``cuda_events``, ``host`` or ``off``."""
    counting: str | None = None
    """``every_op`` (the dispatch mode saw every op) or ``copies`` (the fast path)."""
    gpu_stats: str | None = None
    """Where the GPU samples came from: ``NVML``, ``demo``, or why there are none."""
    gpu_samples_scope: str | None = None
    """Said when the samples are of every GPU (which ones the script used is unknown)."""
    fake_cuda: FakeCudaRun | None = None
    """Present on a run on simulated GPUs."""
    merged_ranks: int | None = None
    """In a report merged from ranks' reports: how many."""
    source: str | None = None
    """Where a report that is no run's own came from (the live view's last snapshot)."""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def counts_ops(self) -> bool:
        """Whether every op was counted (reports written before ``counting`` did)."""
        return (self.counting or "every_op") == "every_op"

    @property
    def timing_source(self) -> str:
        """How kernel time was measured (reports written before it say nothing: host)."""
        return self.kernel_timing_source or "host"

    def replace(self, **changes: Any) -> RunOptions:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.profile is not None:
            asked = dataclasses.asdict(self.profile)
            for name in _LATER_OPTIONS:
                if asked[name] == _LATER_DEFAULTS[name]:
                    del asked[name]  # not asked: the JSON as before the option came
            out.update({k: _jsonable(v) for k, v in asked.items()})
        for name in (*_TEXT, "merged_ranks"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.fake_cuda is not None:
            out["fake_cuda"] = self.fake_cuda.to_dict()
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, d: object) -> RunOptions:
        """A saved report's options; a value of the wrong type stays in ``extra``, untrusted."""
        if not isinstance(d, dict):
            return cls()
        extra = dict(d)
        profile = None
        if all(isinstance(d.get(k, ...), t) for k, t in _OPTION_TYPES.items()):
            values = {k: extra.pop(k) for k in _OPTION_TYPES}
            for name, kind in _LATER_OPTIONS.items():  # asked in reports since they came
                if isinstance(extra.get(name), kind):
                    values[name] = extra.pop(name)
            profile = Options(**{k: _frozen(v) for k, v in values.items()})
        taken: dict[str, Any] = {n: extra.pop(n) for n in _TEXT if isinstance(extra.get(n), str)}
        merged = extra.get("merged_ranks")
        if isinstance(merged, int) and not isinstance(merged, bool):
            taken["merged_ranks"] = extra.pop("merged_ranks")
        fake = extra.get("fake_cuda")
        if isinstance(fake, dict) and isinstance(fake.get("devices"), int):
            try:
                taken["fake_cuda"] = FakeCudaRun.from_dict(fake)
                del extra["fake_cuda"]
            except (TypeError, ValueError):
                pass  # kept in extra, as read
        return cls(profile=profile, extra=extra, **taken)


def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def _frozen(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value
