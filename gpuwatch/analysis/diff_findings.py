"""A diff's findings as its renderers show them: the ``gpuwatch.diff/1`` document (what
``gpuwatch diff --json`` writes) read into records. The diff's text and HTML are drawn from
this reading both when the diff runs and when ``gpuwatch report D.json`` shows it again, so
the two say the same by construction. Each record's fields are the document's keys (the
schema, gpuwatch/schemas/diff-1.schema.json, says their types)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from profilers.finite import dumps_finite, restore_not_finite

DIFF_SCHEMA = "gpuwatch.diff/1"

Figures = Mapping[str, float]  # by measure (``syncs``, ``h2d.pageable``...; 0 may be left out)

T = TypeVar("T")


def _pick(cls: type[T], d: Mapping[str, Any], **given: object) -> T:
    """``cls`` from the document's object ``d``, its fields by their keys (``given``: others)."""
    return cls(**{f.name: d.get(f.name) for f in fields(cls) if f.name not in given}, **given)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Side:
    """One run of the two (the document's ``before`` or ``after``); ``time``: where its time
    went (gpuwatch/analysis/diff_time.py: ``run_time``), None where it was not measured."""

    path: str
    command: Sequence[str]
    duration_s: float
    partial: bool
    steps: int | None
    fake_cuda: bool
    time: Mapping[str, object] | None


@dataclass(frozen=True)
class FrameRow:
    """A library frame of a line (``before_line``/``after_line``: None where it made nothing)."""

    status: str
    file: str
    function: str
    before_line: int | None
    after_line: int | None
    before: Figures
    after: Figures
    delta: Figures

    @property
    def label(self) -> str:
        """``transformers/trainer.py:2410 (was 2402) _inner_training_loop``."""
        line = self.after_line if self.after_line is not None else self.before_line
        was = f" (was {self.before_line})" if self.before_line not in (None, line) else ""
        return f"{self.file}:{line}{was} {self.function}".rstrip()


@dataclass(frozen=True)
class LineRow:
    """A line before and after, as matched (gpuwatch/analysis/diff.py)."""

    status: str
    match: str | None
    file: str
    function: str
    source: str
    before_line: int | None
    after_line: int | None
    before_function: str | None
    before_source: str | None
    time_ms: Mapping[str, float | None]
    before: Figures
    after: Figures
    delta: Figures
    library: tuple[FrameRow, ...]  # every library frame either side has, changed ones first

    @property
    def line(self) -> int:
        return int(self.after_line if self.after_line is not None else self.before_line or 0)

    def changed_frames(self) -> list[FrameRow]:
        return [f for f in self.library if any(f.delta.values())]

    @property
    def changed(self) -> bool:
        """Copies, bytes, syncs or collectives differ, or its library frames' do. NB: kernel
        time and op counts alone do not: on a GPU, times differ on every run."""
        moved = any(v for n, v in self.delta.items() if n not in ("kernel_ms", "ops"))
        return moved or bool(self.changed_frames())


@dataclass(frozen=True)
class DiffDoc:
    """The diff: figures per step where :attr:`per_step`, else for the whole run."""

    per_step: bool
    before: Side
    after: Side
    totals: Mapping[str, Figures]  # before, after and delta
    lines: tuple[LineRow, ...]
    doc: Mapping[str, object]  # the document itself (the JSON written, the HTML's data)

    def changed(self) -> list[LineRow]:
        return [d for d in self.lines if d.changed]

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> DiffDoc:
        """Reads a document checked against its schema."""
        lines = tuple(
            _pick(LineRow, d, time_ms=d.get("time_ms") or {}, library=tuple(
                _pick(FrameRow, f) for f in d.get("library") or ()
            ))
            for d in doc["lines"]
        )  # fmt: skip
        sides = {s: _pick(Side, doc[s]) for s in ("before", "after")}
        return _pick(cls, doc, **sides, lines=lines, doc=doc)

    @classmethod
    def written(cls, doc: Mapping[str, object]) -> DiffDoc:
        """``doc`` read as its JSON says it, as a saved diff is (NaN through null and back)."""
        again = json.loads(dumps_finite(doc))
        restore_not_finite(again, limit=1 << 62)
        return cls.from_dict(again)
