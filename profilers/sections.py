"""The report's sections as frozen, typed records: :class:`TimeView` (where each step's time
went), :class:`MemoryView` (GPU bytes per line), :class:`Timeline` (copy and sync events),
:class:`Predicted` (``--gpu NAME``), :class:`WhatIf` (each fix's saving) and :class:`Compiled`
(what torch.compile did). No torch here.

Each holds its JSON object's keys as fields (``to_dict``/``from_dict`` give the same
``gpuwatch.profile/1`` object back, keys it does not know kept as they were), and reads as that
object too (``view["run"]``, ``view.get("after_first")``): a section is a read-only mapping of
its keys, an optional key that is absent (None) not among them. Nested parts with fixed keys (a
step's breakdown, a line's figures, a fix's saving) are sections too; open maps (by cause, by
GPU) stay JSON objects."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

__all__ = [
    "Breakdown",
    "Compiled",
    "Estimate",
    "GraphBlocker",
    "LineCost",
    "MemoryFit",
    "MemoryView",
    "Predicted",
    "Saving",
    "Section",
    "TimeView",
    "Timeline",
    "Wait",
    "WhatIf",
    "typed",
]

S = TypeVar("S", bound="Section")
T = TypeVar("T")


def _optional(default: T | None = None) -> T | None:
    """A key the JSON object leaves out while it is None."""
    return field(default=default, metadata={"optional": True})


def _plain(value: object) -> object:
    """``value`` as JSON: a nested section (or a list of them) as its object."""
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True, eq=False)
class Section(Mapping[str, Any]):
    """A report section: typed fields that read as the JSON object they are written as."""

    extra: Mapping[str, object] = field(default_factory=dict, kw_only=True, repr=False)
    """Keys this version does not know (a newer report's): kept, written back as they were."""

    required: ClassVar[tuple[str, ...]] = ()
    """Keys a section read from JSON must have (its schema's ``required``)."""

    parts: ClassVar[Mapping[str, type[Section] | tuple[type[Section]]]] = {}
    """Keys whose objects are sections too: ``(Kind,)`` for a list of them."""

    # -- as the JSON object -------------------------------------------------------------------

    def _keys(self) -> list[str]:
        out = [
            f.name
            for f in dataclasses.fields(self)
            if f.name != "extra"
            and not (f.metadata.get("optional") and getattr(self, f.name) is None)
        ]
        fields = self._names() - {"extra"}
        return out + [k for k in self.extra if k not in fields]

    def __getitem__(self, key: str) -> Any:
        if key != "extra" and key in self._names():  # NB: a JSON key "extra" is in extra
            value = getattr(self, key)
            if value is None and self._is_optional(key):
                raise KeyError(key)
            return value
        return self.extra[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # NB: mutable JSON inside: never a dict key

    @classmethod
    def _names(cls) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(cls))

    @classmethod
    def _is_optional(cls, name: str) -> bool:
        return any(f.name == name and f.metadata.get("optional") for f in dataclasses.fields(cls))

    def to_dict(self) -> dict[str, object]:
        """The JSON object (``gpuwatch.profile/1``), nested sections as theirs."""
        return {k: _plain(self[k]) for k in self}

    @classmethod
    def from_dict(cls: type[S], d: object) -> S:
        """The section of the JSON object ``d``; ValueError where a required key is missing."""
        if isinstance(d, cls):
            return d
        if not isinstance(d, Mapping):
            raise ValueError(f"{cls.__name__} must be an object, not {type(d).__name__}")
        missing = [k for k in cls.required if k not in d]
        if missing:
            raise ValueError(f"{cls.__name__} needs {', '.join(missing)}")
        names = cls._names() - {"extra"}
        known: dict[str, Any] = {k: v for k, v in d.items() if k in names}  # NB: JSON, as written
        extra = {k: v for k, v in d.items() if k not in names}
        for name, kind in cls.parts.items():
            value = known.get(name)
            if value is None:
                continue
            if isinstance(kind, tuple):
                if not isinstance(value, list):
                    raise ValueError(f"{cls.__name__}.{name} must be a list")
                known[name] = [kind[0].from_dict(v) for v in value]
            else:
                known[name] = kind.from_dict(value)
        return cls(**known, extra=extra)

    def replace(self: S, **changes: Any) -> S:
        """A copy with ``changes`` (fields by name)."""
        return dataclasses.replace(self, **changes)


def typed(kind: type[S], d: Mapping[str, object] | None) -> S | None:
    """The section ``kind`` of the JSON object ``d`` a builder made; None stays None."""
    return None if d is None else kind.from_dict(d)


@dataclass(frozen=True, eq=False)
class LineCost(Section):
    """One line's host time by cause (ms), with its sync causes and graph-capture counts."""

    site: str = ""
    total_ms: float = 0.0
    input_ms: float = 0.0
    sync_ms: float = 0.0
    copy_ms: float = 0.0
    comm_ms: float = 0.0
    launch_ms: float = 0.0
    sync_causes_ms: dict[str, float] | None = _optional()
    syncs: int | None = _optional()
    host_reads: int | None = _optional()
    pageable: int | None = _optional()


@dataclass(frozen=True, eq=False)
class GraphBlocker(Section):
    """A line that stops the step being captured as a CUDA graph, and why."""

    site: str = ""
    syncs: int = 0
    host_reads: int = 0
    pageable: int = 0


@dataclass(frozen=True, eq=False)
class Wait(Section):
    """An interval a step's host waited (ms since the profile began)."""

    kind: str = ""
    cause: str | None = None
    site: str = ""
    start_ms: float = 0.0
    ms: float = 0.0


@dataclass(frozen=True, eq=False)
class Breakdown(Section):
    """A step's (``step``), the steps after the first's (``steps``) or the run's figures:
    wall time, the profiler's own, host time by cause and line, the GPU half, the verdict."""

    step: int | None = _optional()
    start_ms: float | None = _optional()
    end_ms: float | None = _optional()
    steps: int | None = _optional()
    measured: str = "measured"
    wall_ms: float = 0.0
    own_ms: float = 0.0
    wall_unprofiled_ms: float = 0.0
    ops: int | None = _optional()
    host_ms: dict[str, float] = field(default_factory=dict)
    gpu: dict[str, object] | None = None
    """Busy and idle by cause (profilers/timing/idle.py); None where not measured."""
    verdict: str = "none"
    shares_pct: dict[str, float] = field(default_factory=dict)
    lines: list[LineCost] = field(default_factory=list)
    gpu_profiler_ms: float | None = _optional()
    graph_blockers: list[GraphBlocker] | None = _optional()
    waits: list[Wait] | None = _optional()
    waits_dropped: int | None = _optional()
    gpu_pending: bool | None = _optional()
    energy: dict[str, object] | None = _optional()

    parts = {"lines": (LineCost,), "graph_blockers": (GraphBlocker,), "waits": (Wait,)}


@dataclass(frozen=True, eq=False)
class TimeView(Section):
    """Where each step's time went (profilers/timing/verdict.py ``time_section``): the run's
    and the kept steps' wall time, host time by cause and line, the profiler's own time taken
    out, the GPU half where measured or predicted, and the verdict."""

    clock: str = "host"
    gpu: str = ""
    """How the GPU half was got, or why it was not."""
    lines_measured: bool | None = _optional()
    """False on the fast path: the host work between counted ops was sampled by line."""
    outside_ns_per_op: float | None = _optional()
    steps_closed: int = 0
    steps_kept: int = 0
    run: Breakdown = field(default_factory=Breakdown)
    """The whole run's breakdown (wall, unprofiled, own, by cause, lines, GPU half)."""
    after_first: Breakdown | None = _optional()
    """The steps after the first, where two or more ended (step 0 holds the setup)."""
    first_step: Breakdown | None = _optional()
    steps: list[Breakdown] = field(default_factory=list)
    """The newest steps kept, each with its breakdown."""
    energy: dict[str, object] | None = _optional()
    """The GPUs' energy over the run and per step (gpuwatch/analysis/energy.py)."""

    required = ("clock", "gpu", "run", "steps", "steps_closed", "steps_kept")
    parts = {
        "run": Breakdown,
        "after_first": Breakdown,
        "first_step": Breakdown,
        "steps": (Breakdown,),
    }


@dataclass(frozen=True, eq=False)
class MemoryView(Section):
    """GPU bytes per line (now, at the peak), each GPU's peak and the lines holding it, and a
    device mismatch or out-of-memory error explained (profilers/memory/)."""

    tracked: bool = False
    source: str = "measured"
    """``measured`` or ``simulated`` (the fake GPU's allocator)."""
    devices: list[dict[str, object]] = field(default_factory=list)
    peak: dict[str, object] | None = None
    lines: list[dict[str, object]] = field(default_factory=list)
    failure: dict[str, object] | None = None

    required = ("lines",)


@dataclass(frozen=True, eq=False)
class Timeline(Section):
    """The copy and sync events, the newest ``capacity`` kept: ``{"t", "direction", "bytes",
    "sync", "site"}`` each."""

    capacity: int = 0
    recorded: int = 0
    dropped: int = 0
    events: list[dict[str, object]] = field(default_factory=list)
    step_ends: list[dict[str, float]] | None = _optional()
    """When each step ended: ``{"step", "t"}`` (s since the run began)."""

    required = ("capacity", "recorded", "dropped", "events")


@dataclass(frozen=True, eq=False)
class MemoryFit(Section):
    """Whether the run's peak of GPU memory fits in the predicted GPU's."""

    peak_bytes: int = 0
    gpu_bytes: int = 0
    fits: bool | None = _optional()
    message: str | None = None


@dataclass(frozen=True, eq=False)
class Estimate(Section):
    """A predicted figure (ms) with its range: the host's part (``measured_on`` a CPU, its
    range from the steps' spread), the GPU model's (its range from the model's published
    ``error``) or the step's (with the ``verdicts`` it gets inside its range)."""

    measured_on: str | None = _optional()
    ms: float = 0.0
    low_ms: float = 0.0
    high_ms: float = 0.0
    basis: str | None = _optional()
    error: list[float] | None = _optional()
    validated: bool | None = _optional()
    published_rows: int | None = _optional()
    words: str | None = _optional()
    verdicts: list[str] | None = _optional()


@dataclass(frozen=True, eq=False)
class Predicted(Section):
    """``--fake-cuda --gpu NAME``: the GPU figures of ``time`` and ``what_if`` come from a
    model of that GPU (profilers/timing/replayed.py), and the memory check against it."""

    gpu: str = ""
    source: str | None = _optional()
    """Where the GPU's figures come from (its datasheet)."""
    memory: MemoryFit | None = _optional()
    host: Estimate | None = _optional()
    """The host's part of a step, measured on this machine's CPU (named), with its range from
    the steps' spread."""
    gpu_model: Estimate | None = _optional()
    """The GPU model's part of a step, with its range from the model's published error."""
    step: Estimate | None = _optional()
    """The predicted step (``ms``, ``low_ms``, ``high_ms``) and the verdicts inside it."""

    required = ("gpu",)
    parts = {"memory": MemoryFit, "host": Estimate, "gpu_model": Estimate, "step": Estimate}


@dataclass(frozen=True, eq=False)
class Saving(Section):
    """A fix the step allows and its saving per step (with its range where predicted)."""

    kind: str = ""
    site: str | None = None
    fix: str = ""
    hints: list[str] = field(default_factory=list)
    saving_ms: float = 0.0
    share_pct: float = 0.0
    new_ms: float = 0.0
    ops: int = 0
    together: bool | None = _optional()
    """Whether it is among the fixes applied together (``combined_ms``)."""
    saving_low_ms: float | None = _optional()
    saving_high_ms: float | None = _optional()
    rank: int | None = _optional()
    ranked: bool | None = _optional()
    """False where its range overlaps another's: they share a ``rank``."""


@dataclass(frozen=True, eq=False)
class WhatIf(Section):
    """Every fix the representative step allows, with its saving per step, replayed (measured
    GPU times) or PREDICTED (``gpu``: the model's GPU)."""

    measured: bool = True
    gpu: str | None = None
    step: int = 0
    steps_median: int | None = _optional()
    ops: int | None = _optional()
    ops_dropped: int | None = _optional()
    every: int | None = _optional()
    as_recorded_ms: float | None = _optional()
    unprofiled_ms: float = 0.0
    savings: list[Saving] = field(default_factory=list)
    sum_ms: float = 0.0
    combined_ms: float = 0.0
    combined_pct: float | None = _optional()
    interaction_ms: float = 0.0
    unprofiled_low_ms: float | None = _optional()
    unprofiled_high_ms: float | None = _optional()
    """A PREDICTED step's range (the host's spread and the GPU model's error)."""
    ranked: bool | None = _optional()
    """False where two fixes' saving ranges overlap: they share a rank."""

    required = ("savings",)
    parts = {"savings": (Saving,)}


@dataclass(frozen=True, eq=False)
class Compiled(Section):
    """What torch.compile did while the profile ran (profilers/compiled.py)."""

    frames: int = 0
    graphs: int = 0
    graph_breaks: list[dict[str, object]] = field(default_factory=list)
    ran_eager: str | None = None
    graph_break_lines: list[dict[str, object]] | None = _optional()
    recompiled: list[dict[str, object]] | None = _optional()
    eager_calls: int | None = _optional()
    """Calls of compiled code that ran eager (the profile's force_eager stance)."""
    cudagraph_skips: int | None = _optional()
    """How many times inductor compiled without the CUDA graphs mode="reduce-overhead" asked
    for (on CPU tensors it skips them silently)."""

    required = ("graphs",)
