"""The report: plain data in the ``gpuwatch.profile/1`` shape, with ``to_dict``/``from_dict``."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, TypeVar

from profilers.finite import NOT_FINITE, dumps_finite, iterable, mapping, number, restore_not_finite
from profilers.options import RunOptions
from profilers.records import Line, Totals
from profilers.sections import Compiled, MemoryView, Predicted, Section, Timeline, TimeView, WhatIf
from profilers.stats import Counters
from profilers.text import printable, write_text_atomic

__all__ = ["SCHEMA", "Report", "ReportFormatError", "printable", "write_text_atomic"]

SCHEMA = "gpuwatch.profile/1"


S = TypeVar("S", bound=Section)

#: The report's typed sections, by field (each also its JSON key).
_SECTIONS: dict[str, type[Section]] = {
    "timeline": Timeline,
    "time": TimeView,
    "memory": MemoryView,
    "predicted": Predicted,
    "what_if": WhatIf,
    "compiled": Compiled,
}


class InternalError(TypedDict):
    """An op the profiler could not count: how often, and the first error's message."""

    count: int
    error: str


class ReportFormatError(ValueError):
    """A file that is not a gpuwatch profile, or a damaged one. The message is one line."""


@dataclass(frozen=True)
class Report:
    """One profiled run, all a renderer needs and no torch. Frozen: built once, finished once
    (gpuwatch/profile/finish.py), then only read; :meth:`replace` makes a changed copy."""

    command: list[str] = field(default_factory=list)
    exit_code: int = 0
    duration_s: float = 0.0
    devices: list[dict[str, object]] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)
    lines: list[Line] = field(default_factory=list)
    timeline: Timeline = field(default_factory=Timeline)
    """Copy and sync events, newest ``capacity`` kept: ``{"t", "direction", "bytes", "sync", "site"}``."""
    partial: bool = False
    """True when the run did not finish (an exception, Ctrl-C, a killed child)."""
    options: RunOptions = field(default_factory=RunOptions)
    """How the run was profiled (JSON: ``options``)."""
    gpu_samples: list[dict[str, Any]] = field(default_factory=list)
    """GPU utilisation/memory/PCIe over the run (``{"t", "gpu", ...}``), filled by the CLI."""
    started_at: str | None = None
    error: str | None = None
    """The script's exception, one line (``ValueError: bad shape``), when it raised."""
    internal_errors: dict[str, InternalError] = field(default_factory=dict)
    """What the profiler could not count: ``{op: {"count": n, "error": first message}}``. The
    ops themselves ran as they would have; only their copies and syncs are missing."""
    rank: int | None = None
    """This process's rank in a distributed run (``RANK``), None when not distributed."""
    world_size: int | None = None
    ranks: list[int] | None = None
    """In a report merged from ranks' reports: the ranks it holds (each line's ``by_rank``)."""
    steps: dict[str, Any] | None = None
    """``{"count": n, "source": "optimizer" | "manual"}``: the training steps seen (JSON:
    ``totals.steps``); None when no step was."""
    gpu_fallback: dict[str, object] | None = None
    """The script asked whether there is a GPU (``asked``, at ``file``:``line``), got none
    (``answer``) and ran no op on one: the run says nothing of what it does on a GPU."""
    missing_ranks: list[int] | None = None
    """In a merged report: ranks of the world with no report (a rank that crashed unseen)."""
    time: TimeView | None = None
    """Where each step's time went; None where not measured (a merged report, --steps)."""
    memory: MemoryView | None = None
    """GPU bytes per line (profilers/memory/); None: not tracked."""
    predicted: Predicted | None = None
    """``--fake-cuda --gpu NAME``: ``time`` and ``what_if`` are that GPU model's."""
    compiled: Compiled | None = None
    """What torch.compile did (profilers/compiled.py); None where nothing was compiled."""
    what_if: WhatIf | None = None
    """Each fix's saving per step; None where the run has no GPU times."""

    def __post_init__(self) -> None:
        # NB: a section given as its JSON object (a builder's dict, an edited copy) is made the
        # typed, frozen record here, so that every report holds its sections one way.
        for name, kind in _SECTIONS.items():
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                object.__setattr__(self, name, kind.from_dict(value))

    @property
    def counts_ops(self) -> bool:
        """Whether every op was counted (the dispatch mode); False on the fast path of
        ``--no-kernel-timing``, which sees only the ops that copy, sync or communicate."""
        return self.options.counts_ops

    def top_lines(self, key: str, n: int = 10) -> list[Line]:
        """Lines with the most ``bytes`` moved, ``syncs``, ``kernel_time_ms``, ``ops``, or
        ``backward_ms`` (the time of the backward of a line's forward ops)."""
        getters: dict[str, Callable[[Line], float]] = {
            "bytes": lambda s: s.bytes_moved,
            "syncs": lambda s: s.syncs.count,
            "kernel_time_ms": lambda s: s.kernel_time_ms,
            "ops": lambda s: s.ops,
            "backward_ms": lambda s: s.backward_ms,
        }
        get = getters[key]
        return [s for s in sorted(self.lines, key=get, reverse=True) if get(s)][:n]

    def replace(self, **changes: Any) -> Report:
        """A copy of this report with ``changes`` (fields by name)."""
        return dataclasses.replace(self, **changes)

    def with_lines(self, lines: list[Line]) -> Report:
        """This report with ``lines`` instead, the totals summed from them."""
        totals = Counters()
        for line in lines:
            totals.merge_counts(line)
        return dataclasses.replace(self, lines=list(lines), totals=Totals.of(totals))

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": SCHEMA,
            "command": list(self.command),
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 6),
            "partial": self.partial,
            "error": self.error,
            "started_at": self.started_at,
            "devices": self.devices,
            "totals": {
                **self.totals.counters_dict(),
                **({"steps": self.steps} if self.steps else {}),
            },
            "sites": [s.to_dict() for s in self.lines],
            "timeline": self.timeline.to_dict(),
            "gpu_samples": self.gpu_samples,
            "options": self.options.to_dict(),
            "internal_errors": self.internal_errors,
            "rank": self.rank,
            "world_size": self.world_size,
            **({"ranks": self.ranks} if self.ranks is not None else {}),
            **({"missing_ranks": self.missing_ranks} if self.missing_ranks else {}),
            **({"gpu_fallback": self.gpu_fallback} if self.gpu_fallback else {}),
            **{
                name: section.to_dict()
                for name in _SECTIONS
                if (section := getattr(self, name)) is not None
            },
        }

    def to_json(self) -> str:
        """The ``gpuwatch.profile/1`` document as text (ASCII: any byte of a non-UTF-8 name
        survives as an escape)."""
        return dumps_finite(self.to_dict(), indent=1) + "\n"

    @classmethod
    def from_dict(cls, d: object) -> Report:
        if not isinstance(d, dict):
            raise ReportFormatError("not a gpuwatch profile: the JSON is not an object")
        schema = d.get("schema")
        if schema != SCHEMA:
            raise ReportFormatError(
                f"not a gpuwatch profile: schema is {schema!r}, expected {SCHEMA!r}"
            )
        if NOT_FINITE in d:  # the parsed JSON of to_json(): NaN back where it wrote null
            d = copy.deepcopy(d)
            wrong = restore_not_finite(d, limit=_count_values(d))
            if wrong is not None:
                raise ReportFormatError(f"damaged gpuwatch profile: {wrong}")
        try:
            return cls(
                command=[str(c) for c in d.get("command", [])],
                exit_code=int(d.get("exit_code", 0)),
                duration_s=float(d.get("duration_s", 0.0)),
                devices=list(d.get("devices", [])),
                totals=Totals.from_dict(d["totals"]),
                lines=[Line.from_dict(s) for s in d.get("sites", [])],
                timeline=Timeline.from_dict(d["timeline"]) if d.get("timeline") else Timeline(),
                partial=_bool(d.get("partial", False), "partial"),
                options=RunOptions.from_dict(d.get("options")),
                gpu_samples=list(d.get("gpu_samples", [])),
                started_at=d.get("started_at"),
                error=d.get("error"),
                internal_errors={
                    str(op): {"count": int(e["count"]), "error": str(e.get("error", ""))}
                    for op, e in (d.get("internal_errors") or {}).items()
                },
                steps=_steps(d["totals"].get("steps")),
                rank=_opt_int(d.get("rank")),
                world_size=_opt_int(d.get("world_size")),
                ranks=[int(r) for r in d["ranks"]] if d.get("ranks") is not None else None,
                missing_ranks=[int(r) for r in d.get("missing_ranks") or []] or None,
                gpu_fallback=dict(d["gpu_fallback"]) if d.get("gpu_fallback") else None,
                time=_section(d.get("time"), TimeView),
                memory=_section(d.get("memory"), MemoryView),
                predicted=_section(d.get("predicted"), Predicted),
                what_if=_section(d.get("what_if"), WhatIf),
                compiled=_section(d.get("compiled"), Compiled),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ReportFormatError(
                f"damaged gpuwatch profile: {type(exc).__name__}: {exc}"
            ) from exc

    def save(self, path: str | Path) -> None:
        """Writes the JSON document whole or not at all (see :func:`write_text_atomic`)."""
        write_text_atomic(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> Report:
        try:
            text = Path(path).read_text()
        except UnicodeDecodeError as exc:
            raise ReportFormatError(f"not a gpuwatch profile: {path} is not text") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ReportFormatError(
                f"not a gpuwatch profile: {path} is not valid JSON ({exc.msg} at line {exc.lineno})"
            ) from exc
        wrong = restore_not_finite(data, limit=len(text))
        if wrong is not None:
            raise ReportFormatError(f"damaged gpuwatch profile {path}: {wrong}")
        return cls.from_dict(data)


def _count_values(node: object) -> int:
    """How many values ``node`` holds, nested ones included (a bound on ``not_finite``)."""
    if isinstance(node, dict):
        return len(node) + sum(_count_values(v) for v in node.values())
    if isinstance(node, list):
        return len(node) + sum(_count_values(v) for v in node)
    return 0


def _steps(d: object) -> dict[str, object] | None:
    if not d:
        return None
    v = mapping(d)
    out: dict[str, object] = {"count": int(number(v["count"])), "source": str(v["source"])}
    if v.get("window") is not None:
        out["window"] = [int(number(x)) for x in iterable(v["window"])]
        out["seen"] = int(number(v.get("seen", 0)))
    return out


def _section(v: Mapping[str, object] | None, kind: type[S]) -> S | None:
    """The section ``kind`` of the JSON value ``v`` (None: absent); ValueError if damaged."""
    if v is None:
        return None
    section = kind.from_dict(v)  # NB: a nested part that is not an object raises there
    if isinstance(section, MemoryView) and not isinstance(section.lines, list):
        raise ValueError("memory must be an object with a list of lines")
    return section


def _opt_int(v: object) -> int | None:
    return None if v is None else int(number(v))


def _bool(value: object, name: str) -> bool:
    # NB: bool("false") is True: a report whose flag is a string is damaged, not partial.
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, not {value!r}")
    return value
