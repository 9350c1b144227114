"""The report's sections as frozen, typed records: :class:`TimeView` (where each step's time
went), :class:`MemoryView` (GPU bytes per line), :class:`Timeline` (copy and sync events),
:class:`Predicted` (``--gpu NAME``), :class:`WhatIf` (each fix's saving) and :class:`Compiled`
(what torch.compile did). No torch here.

Each holds its JSON object's keys as fields (``to_dict``/``from_dict`` give the same
``gpuwatch.profile/1`` object back, keys it does not know kept as they were), and reads as that
object too (``view["run"]``, ``view.get("after_first")``): a section is a read-only mapping of
its keys, an optional key that is absent (None) not among them. Nested parts (a step's
breakdown, a line's figures) stay JSON objects."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

__all__ = [
    "Compiled",
    "MemoryView",
    "Predicted",
    "Section",
    "TimeView",
    "Timeline",
    "WhatIf",
    "typed",
]

S = TypeVar("S", bound="Section")


def _optional(default: Any = None) -> Any:
    """A key the JSON object leaves out while it is None."""
    return field(default=default, metadata={"optional": True})


@dataclass(frozen=True, eq=False)
class Section(Mapping[str, Any]):
    """A report section: typed fields that read as the JSON object they are written as."""

    extra: Mapping[str, Any] = field(default_factory=dict, kw_only=True, repr=False)
    """Keys this version does not know (a newer report's): kept, written back as they were."""

    required: ClassVar[tuple[str, ...]] = ()
    """Keys a section read from JSON must have (its schema's ``required``)."""

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

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (``gpuwatch.profile/1``)."""
        return {k: self[k] for k in self}

    @classmethod
    def from_dict(cls: type[S], d: Mapping[str, Any]) -> S:
        """The section of the JSON object ``d``; ValueError where a required key is missing."""
        if isinstance(d, cls):
            return d
        if not isinstance(d, Mapping):
            raise ValueError(f"{cls.__name__} must be an object, not {type(d).__name__}")
        missing = [k for k in cls.required if k not in d]
        if missing:
            raise ValueError(f"{cls.__name__} needs {', '.join(missing)}")
        names = cls._names() - {"extra"}
        known = {k: v for k, v in d.items() if k in names}
        extra = {k: v for k, v in d.items() if k not in names}
        return cls(**known, extra=extra)

    def replace(self: S, **changes: Any) -> S:
        """A copy with ``changes`` (fields by name)."""
        return dataclasses.replace(self, **changes)


def typed(kind: type[S], d: Mapping[str, Any] | None) -> S | None:
    """The section ``kind`` of the JSON object ``d`` a builder made; None stays None."""
    return None if d is None else kind.from_dict(d)


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
    run: dict[str, Any] = field(default_factory=dict)
    """The whole run's breakdown (wall, unprofiled, own, by cause, lines, GPU half)."""
    after_first: dict[str, Any] | None = _optional()
    """The steps after the first, where two or more ended (step 0 holds the setup)."""
    first_step: dict[str, Any] | None = _optional()
    steps: list[dict[str, Any]] = field(default_factory=list)
    """The newest steps kept, each with its breakdown."""
    energy: dict[str, Any] | None = _optional()
    """The GPUs' energy over the run and per step (gpuwatch/output/energy.py)."""

    required = ("clock", "gpu", "run", "steps", "steps_closed", "steps_kept")


@dataclass(frozen=True, eq=False)
class MemoryView(Section):
    """GPU bytes per line (now, at the peak), each GPU's peak and the lines holding it, and a
    device mismatch or out-of-memory error explained (profilers/memory/)."""

    tracked: bool = False
    source: str = "measured"
    """``measured`` or ``simulated`` (the fake GPU's allocator)."""
    devices: list[dict[str, Any]] = field(default_factory=list)
    peak: dict[str, Any] | None = None
    lines: list[dict[str, Any]] = field(default_factory=list)
    failure: dict[str, Any] | None = None

    required = ("lines",)


@dataclass(frozen=True, eq=False)
class Timeline(Section):
    """The copy and sync events, the newest ``capacity`` kept: ``{"t", "direction", "bytes",
    "sync", "site"}`` each."""

    capacity: int = 0
    recorded: int = 0
    dropped: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    step_ends: list[dict[str, Any]] | None = _optional()
    """When each step ended: ``{"step", "t"}`` (s since the run began)."""

    required = ("capacity", "recorded", "dropped", "events")


@dataclass(frozen=True, eq=False)
class Predicted(Section):
    """``--fake-cuda --gpu NAME``: the GPU figures of ``time`` and ``what_if`` come from a
    model of that GPU (profilers/timing/replayed.py), and the memory check against it."""

    gpu: str = ""
    source: str | None = _optional()
    """Where the GPU's figures come from (its datasheet)."""
    memory: dict[str, Any] | None = _optional()
    host: dict[str, Any] | None = _optional()
    """The host's part of a step, measured on this machine's CPU (named), with its range from
    the steps' spread."""
    gpu_model: dict[str, Any] | None = _optional()
    """The GPU model's part of a step, with its range from the model's published error."""
    step: dict[str, Any] | None = _optional()
    """The predicted step (``ms``, ``low_ms``, ``high_ms``) and the verdicts inside it."""

    required = ("gpu",)


@dataclass(frozen=True, eq=False)
class WhatIf(Section):
    """Every fix the representative step allows, with its saving per step, replayed (measured
    GPU times) or PREDICTED (``gpu``: the model's GPU)."""

    measured: bool = True
    gpu: str | None = None
    step: int = 0
    steps_median: Any = _optional()
    ops: int | None = _optional()
    ops_dropped: int | None = _optional()
    every: Any = _optional()
    as_recorded_ms: float | None = _optional()
    unprofiled_ms: float = 0.0
    savings: list[dict[str, Any]] = field(default_factory=list)
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


@dataclass(frozen=True, eq=False)
class Compiled(Section):
    """What torch.compile did while the profile ran (profilers/compiled.py)."""

    frames: int = 0
    graphs: int = 0
    graph_breaks: list[dict[str, Any]] = field(default_factory=list)
    ran_eager: Any = None
    graph_break_lines: list[dict[str, Any]] | None = _optional()
    recompiled: list[dict[str, Any]] | None = _optional()
    eager_calls: int | None = _optional()
    """Calls of compiled code that ran eager (the profile's force_eager stance)."""
    cudagraph_skips: int | None = _optional()
    """How many times inductor compiled without the CUDA graphs mode="reduce-overhead" asked
    for (on CPU tensors it skips them silently)."""

    required = ("graphs",)
