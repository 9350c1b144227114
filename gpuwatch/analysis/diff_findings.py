"""A diff's findings as its renderers show them: the ``gpuwatch.diff/1`` document (what
``gpuwatch diff --json`` writes) read into records. The diff's text and HTML are drawn from
this reading both when the diff runs and when ``gpuwatch report D.json`` shows it again, so
the two say the same by construction."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from profilers.finite import dumps_finite, iterable, mapping, number, restore_not_finite

Figures = Mapping[str, float]


def _figures(d: Mapping[str, object]) -> tuple[Figures, Figures, Figures]:
    """``before``, ``after`` and ``delta`` of a line, a frame or the totals."""
    return tuple(  # type: ignore[return-value]
        {str(k): float(number(v)) for k, v in mapping(d[side]).items()}
        for side in ("before", "after", "delta")
    )


def _int(v: object) -> int | None:
    return None if v is None else int(number(v))


@dataclass(frozen=True)
class Side:
    """One run of the two (its ``before`` or ``after`` entry)."""

    path: str
    command: tuple[str, ...]
    duration_s: float
    partial: bool
    steps: int | None
    fake_cuda: bool
    time: Mapping[str, object] | None
    """Where its time went (gpuwatch/analysis/diff_time.py: ``run_time``), None: not measured."""

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Side:
        time = d.get("time")
        return cls(
            str(d["path"]),
            tuple(str(c) for c in iterable(d["command"])),
            float(number(d["duration_s"])),
            bool(d["partial"]),
            _int(d["steps"]),
            bool(d["fake_cuda"]),
            None if time is None else mapping(time),
        )


@dataclass(frozen=True)
class FrameRow:
    """A library frame of a line, before and after (``before_line``/``after_line`` None on
    the side where it made no copy or sync)."""

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
        """``transformers/trainer.py:2410 _inner_training_loop`` (``(was 2402)`` where the
        library's line moved)."""
        line = self.after_line if self.after_line is not None else self.before_line
        was = ""
        if self.before_line is not None and self.before_line != line:
            was = f" (was {self.before_line})"
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
    time_ms: tuple[float | None, float | None]
    before: Figures
    after: Figures
    delta: Figures
    frames: tuple[FrameRow, ...]
    """Every library frame either side has, changed ones first (as the JSON keeps them)."""

    @property
    def line(self) -> int:
        line = self.after_line if self.after_line is not None else self.before_line
        return int(line or 0)

    def changed_frames(self) -> list[FrameRow]:
        return [f for f in self.frames if any(f.delta.values())]

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
    totals: tuple[Figures, Figures, Figures]
    lines: tuple[LineRow, ...]
    doc: Mapping[str, object]
    """The document itself (the JSON written, the HTML's embedded data)."""

    def changed(self) -> list[LineRow]:
        return [d for d in self.lines if d.changed]

    @classmethod
    def from_dict(cls, doc: Mapping[str, object]) -> DiffDoc:
        """Reads a document checked against its schema (KeyError, TypeError, ValueError for
        what the schema lets through)."""
        lines = []
        for raw in iterable(doc["lines"]):
            d = mapping(raw)
            time_ms = mapping(d.get("time_ms") or {})
            b, a = (time_ms.get(s) for s in ("before", "after"))
            frames = tuple(
                FrameRow(
                    str(f["status"]),
                    str(f["file"]),
                    str(f["function"]),
                    _int(f["before_line"]),
                    _int(f["after_line"]),
                    *_figures(f),
                )
                for f in map(mapping, iterable(d.get("library") or ()))
            )
            lines.append(
                LineRow(
                    str(d["status"]),
                    None if d["match"] is None else str(d["match"]),
                    str(d["file"]),
                    str(d["function"]),
                    str(d["source"]),
                    _int(d["before_line"]),
                    _int(d["after_line"]),
                    None if d["before_function"] is None else str(d["before_function"]),
                    None if d["before_source"] is None else str(d["before_source"]),
                    tuple(None if v is None else float(number(v)) for v in (b, a)),  # type: ignore[arg-type]
                    *_figures(d),
                    frames,
                )
            )
        return cls(
            bool(doc["per_step"]),
            Side.from_dict(mapping(doc["before"])),
            Side.from_dict(mapping(doc["after"])),
            _figures(mapping(doc["totals"])),
            tuple(lines),
            doc,
        )

    @classmethod
    def written(cls, doc: Mapping[str, object]) -> DiffDoc:
        """The reading of ``doc`` as its JSON says it (a figure that is not finite goes through
        null and back), which a saved diff's reading is too."""
        again = json.loads(dumps_finite(doc))
        restore_not_finite(again, limit=1 << 62)
        return cls.from_dict(again)
