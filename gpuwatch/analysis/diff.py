"""Two runs compared line by line (``gpuwatch diff before.json after.json``); no torch here.

Lines are matched by what they say (their code without its comment and spacing), not by their
number, since a fix usually moves lines:

1. same file, function and source text (``moved`` when the number changed, else ``same``);
2. same file and source text in another function (``other_function``: a helper renamed, a loop
   moved into a new function), one to one;
3. same file, the text edited but still alike (``edited``: ``.to(device)`` became
   ``.to(device, non_blocking=True)``): in the same function first, then (stricter) in
   another; the most alike pairs first;
4. the rest appeared (only after) or disappeared (only before).

Within a matched line, its library frames are compared too (:func:`match_frames`).

Figures are per step where both runs counted steps (runs of different lengths compare), else
for the whole run.
"""

from __future__ import annotations

import difflib
import io
import math
import tokenize
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpuwatch.analysis.diff_findings import DIFF_SCHEMA
from gpuwatch.analysis.diff_time import line_time_ms, run_time
from profilers.budgets import MEASURES, Breach, Budget, breach_of, line_label, measure, steps_of
from profilers.libraries import LibraryFrame
from profilers.names import CAUSES, DIRECTIONS
from profilers.records import Line
from profilers.report import Report
from profilers.stats import COMM_OPS, Counted

__all__ = ["DIFF_SCHEMA", "FrameDiff", "LineDiff", "RunDiff", "check_growth", "diff_reports"]


#: How alike two edited lines must be (difflib's ratio) to count as one line changed.
EDITED_RATIO = 0.6
EDITED_ELSEWHERE_RATIO = 0.75

#: The measures every figure set holds (per-cause and per-collective ones only when non-zero).
CORE = (
    "syncs",
    "copies",
    "bytes",
    *[f"{w}{f}" for w in DIRECTIONS for f in ("", ".bytes", ".pageable", ".non_blocking")],
    "comm",
    "comm.bytes",
    "kernel_ms",
    "ops",
)
OPTIONAL = (*[f"syncs.{c}" for c in CAUSES], *[f"comm.{op}" for op in COMM_OPS])

#: What a library frame holds (profilers/libraries.py), compared per frame.
FRAME_MEASURES = ("syncs", "copies", "bytes")


class _Paired:
    """One thing in two runs: ``before`` and ``after``, either None where only one has it."""

    before: object
    after: object

    @property
    def status(self) -> str:
        if self.before is None:
            return "appeared"
        if self.after is None:
            return "disappeared"
        return "matched"


@dataclass(frozen=True)
class FrameDiff(_Paired):
    """One library frame of a line, before and after (None on the side that has none: the frame
    made no copy or sync there)."""

    before: LibraryFrame | None
    after: LibraryFrame | None

    @property
    def frame(self) -> LibraryFrame:
        """The frame as it is after (as it was, for a frame that made nothing after)."""
        frame = self.after if self.after is not None else self.before
        assert frame is not None
        return frame


def match_frames(before: Iterable[LibraryFrame], after: Iterable[LibraryFrame]) -> list[FrameDiff]:
    """A line's library frames paired: by file and line, then by file and function (a library
    whose lines moved between the runs), one to one; the rest on one side only."""
    b, a = list(before), list(after)
    out: list[FrameDiff] = []
    keys: tuple[Callable[[LibraryFrame], tuple[str, object]], ...] = (
        lambda f: (f.file, f.line),
        lambda f: (f.file, f.function),
    )
    for key in keys:
        after_by: dict[tuple[str, object], list[LibraryFrame]] = {}
        for f in a:
            after_by.setdefault(key(f), []).append(f)
        left = []
        for f in b:
            mates = after_by.get(key(f))
            if mates:
                out.append(FrameDiff(f, mates.pop(0)))
            else:
                left.append(f)
        paired = {id(d.after) for d in out}
        b, a = left, [f for f in a if id(f) not in paired]
    return out + [FrameDiff(f, None) for f in b] + [FrameDiff(None, f) for f in a]


@dataclass(frozen=True)
class LineDiff(_Paired):
    """One line before and after (either None when it appeared or disappeared)."""

    before: Line | None
    after: Line | None
    match: str | None
    """``same``, ``moved``, ``other_function``, ``edited``; None when only one side has it."""

    @property
    def line(self) -> Line:
        """The line as it is after (as it was, for a line that disappeared)."""
        line = self.after if self.after is not None else self.before
        assert line is not None
        return line

    @property
    def label(self) -> str:
        if self.status == "matched" and self.match != "same":
            assert self.before is not None
            return f"{line_label(self.line)} (was line {self.before.line}, {self.before.function})"
        return line_label(self.line) + {"appeared": " (new)", "disappeared": " (gone)"}.get(
            self.status, ""
        )

    def frames(self) -> list[FrameDiff]:
        """The line's library frames on either side, paired (:func:`match_frames`)."""
        return match_frames(
            self.before.library if self.before is not None else (),
            self.after.library if self.after is not None else (),
        )


@dataclass(frozen=True)
class RunDiff:
    """The comparison; figures are per step when :attr:`per_step`."""

    before: Report
    after: Report
    lines: tuple[LineDiff, ...]
    paths: tuple[str, str] = ("", "")  # where the two reports were read from

    @property
    def per_step(self) -> bool:
        return None not in (steps_of(self.before), steps_of(self.after))

    @property
    def after_first(self) -> bool:
        """Whether the time figures compared are over the steps after the first: only where both
        reports have them (an older report's are over its whole run: the other is read so too)."""
        return all(r.time is None or "after_first" in r.time for r in (self.before, self.after))

    def value(
        self, item: LineDiff | None, side: str, name: str, per_step: bool | None = None
    ) -> float:
        """A line's (or, for None, the totals') figure on one side: per step when
        ``per_step`` (by default, when both runs have steps), else for the whole run."""
        report = self.before if side == "before" else self.after
        counted: Counted | None = (
            report.totals if item is None else (item.before if side == "before" else item.after)
        )
        if counted is None:
            return 0.0
        by_step = self.per_step if per_step is None else per_step and self.per_step
        return measure(counted, name) / ((steps_of(report) if by_step else None) or 1)

    def delta(self, item: LineDiff | None, name: str, per_step: bool | None = None) -> float:
        after = self.value(item, "after", name, per_step)
        return after - self.value(item, "before", name, per_step)

    def names(self, item: LineDiff | None = None) -> list[str]:
        """The measures shown: the core ones, and each cause or collective either side has."""
        extra = [
            n for n in OPTIONAL if self.value(item, "before", n) or self.value(item, "after", n)
        ]
        return [*CORE, *extra]

    def frame_value(self, frame: LibraryFrame | None, side: str, name: str) -> float:
        """A library frame's figure (of FRAME_MEASURES) on one side, per step as :meth:`value`."""
        if frame is None:
            return 0.0
        report = self.before if side == "before" else self.after
        value = {"syncs": frame.syncs, "copies": frame.copies, "bytes": frame.copy_bytes}[name]
        return value / ((steps_of(report) if self.per_step else None) or 1)

    def frame_delta(self, frame: FrameDiff, name: str) -> float:
        after = self.frame_value(frame.after, "after", name)
        return after - self.frame_value(frame.before, "before", name)

    def frame_dicts(self, item: LineDiff) -> list[dict[str, object]]:
        """The line's library frames in the JSON: each with its figures before, after and the
        change (every frame either side has; changed ones first)."""
        frames = item.frames()
        frames.sort(key=lambda f: [-abs(self.frame_delta(f, n)) for n in FRAME_MEASURES])
        return [
            {
                "status": f.status,
                "file": f.frame.file,
                "function": f.frame.function,
                "before_line": f.before.line if f.before is not None else None,
                "after_line": f.after.line if f.after is not None else None,
                "before": {
                    n: _round(self.frame_value(f.before, "before", n)) for n in FRAME_MEASURES
                },
                "after": {n: _round(self.frame_value(f.after, "after", n)) for n in FRAME_MEASURES},
                "delta": {n: _round(self.frame_delta(f, n)) for n in FRAME_MEASURES},
            }
            for f in frames
        ]

    def figures(self, item: LineDiff | None) -> dict[str, dict[str, float | int]]:
        names = self.names(item)
        return {
            side: {n: _round(self.value(item, side, n)) for n in names}
            for side in ("before", "after")
        } | {"delta": {n: _round(self.delta(item, n)) for n in names}}

    def to_dict(self, before_path: str = "", after_path: str = "") -> dict[str, object]:
        """The ``gpuwatch.diff/1`` document (gpuwatch/schemas/diff-1.schema.json)."""
        return {
            "schema": DIFF_SCHEMA,
            "per_step": self.per_step,
            "before": _run(self.before, before_path, self.after_first),
            "after": _run(self.after, after_path, self.after_first),
            "totals": self.figures(None),
            "lines": [
                {
                    "status": d.status,
                    "match": d.match,
                    "file": d.line.file,
                    "function": d.line.function,
                    "source": d.line.source,
                    "before_line": d.before.line if d.before is not None else None,
                    "after_line": d.after.line if d.after is not None else None,
                    "before_function": d.before.function if d.before is not None else None,
                    "before_source": d.before.source if d.before is not None else None,
                    "time_ms": {
                        "before": line_time_ms(self.before, d.before, self.after_first),
                        "after": line_time_ms(self.after, d.after, self.after_first),
                    },
                    **self.figures(d),
                    "library": self.frame_dicts(d),
                }
                for d in self.lines
            ],
        }


def _round(v: float) -> float | int:
    if not math.isfinite(v):
        return v  # a figure that was not finite stays so (written null)
    return int(v) if v == int(v) and abs(v) < 2**53 else round(v, 6)


def _run(report: Report, path: str, after_first: bool) -> dict[str, object]:
    fake = report.options.fake_cuda
    return {
        "time": run_time(report, after_first),
        "path": path,
        "command": list(report.command),
        "started_at": report.started_at,
        "duration_s": round(report.duration_s, 6),
        "exit_code": report.exit_code,
        "partial": report.partial,
        "steps": steps_of(report),
        "fake_cuda": bool(fake),
    }


def _text(line: Line) -> str:
    """A line's code, as matching compares it: its comment and spacing left out (a fix that
    rewrites a comment is still the same line); ``#N`` when its source could not be read."""
    code = line.source
    if "#" in code:
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
        except (tokenize.TokenError, SyntaxError):
            tokens = []  # half a statement (a line of a longer one): compared as it is
        comments = [t for t in tokens if t.type == tokenize.COMMENT]
        code = code[: comments[0].start[1]] if comments else code
    return " ".join(code.split()) or f"#{line.line}"


def _pair(
    before: list[Line],
    after: list[Line],
    key: Callable[[Line], object],
    kind: Callable[[Line, Line], str],
    out: list[LineDiff],
) -> tuple[list[Line], list[Line]]:
    """Pairs lines with equal ``key`` in line order; returns what is left on each side."""
    groups: dict[object, tuple[list[Line], list[Line]]] = {}
    for s in before:
        groups.setdefault(key(s), ([], []))[0].append(s)
    for s in after:
        groups.setdefault(key(s), ([], []))[1].append(s)
    used: set[int] = set()
    for b_list, a_list in groups.values():
        b_list.sort(key=lambda s: s.line)
        a_list.sort(key=lambda s: s.line)
        for b, a in zip(b_list, a_list, strict=False):
            out.append(LineDiff(b, a, kind(b, a)))
            used.update((id(b), id(a)))
    return [s for s in before if id(s) not in used], [s for s in after if id(s) not in used]


def _edited(
    before: list[Line], after: list[Line], out: list[LineDiff]
) -> tuple[list[Line], list[Line]]:
    """Step 3: alike text in the same file, in the same function first (a line edited where it
    was), then in another (stricter: the code moved into a new function and was edited)."""
    pairs = []
    for b in before:
        for a in after:
            if b.file != a.file or not (b.source and a.source):
                continue
            same_function = b.function == a.function
            ratio = difflib.SequenceMatcher(None, _text(b), _text(a)).ratio()
            if ratio >= (EDITED_RATIO if same_function else EDITED_ELSEWHERE_RATIO):
                pairs.append((same_function, ratio, -abs(a.line - b.line), b, a))
    pairs.sort(key=lambda p: p[:3], reverse=True)
    used: set[int] = set()
    for _, _, _, b, a in pairs:
        if id(b) not in used and id(a) not in used:
            out.append(LineDiff(b, a, "edited"))
            used.update((id(b), id(a)))
    return [s for s in before if id(s) not in used], [s for s in after if id(s) not in used]


def match_lines(before: Iterable[Line], after: Iterable[Line]) -> list[LineDiff]:
    """Every line of both runs, paired where they are the same line of code (module doc)."""
    out: list[LineDiff] = []
    b, a = list(before), list(after)
    b, a = _pair(
        b, a, lambda s: (s.file, s.function, _text(s)),
        lambda x, y: "same" if x.line == y.line else "moved", out,
    )  # fmt: skip
    b, a = _cross(b, a, out)
    b, a = _edited(b, a, out)
    out += [LineDiff(s, None, None) for s in b]
    out += [LineDiff(None, s, None) for s in a]
    return out


def _cross(
    before: list[Line], after: list[Line], out: list[LineDiff]
) -> tuple[list[Line], list[Line]]:
    """Step 2: the same text in another function; lines with no source stay for later."""
    nb, na = [s for s in before if not s.source], [s for s in after if not s.source]
    b, a = _pair(
        [s for s in before if s.source],
        [s for s in after if s.source],
        lambda s: (s.file, _text(s)),
        lambda x, y: "other_function",
        out,
    )
    return b + nb, a + na


def diff_reports(before: Report, after: Report, paths: tuple[str, str] = ("", "")) -> RunDiff:
    """``before`` and ``after`` (read from ``paths``) compared; lines ordered by how much they
    changed (syncs first)."""
    lines = match_lines(before.lines, after.lines)
    draft = RunDiff(before, after, tuple(lines))
    weights = ("syncs", "bytes", "copies", "comm", "kernel_ms")
    lines.sort(key=lambda item: [abs(draft.delta(item, n)) for n in weights], reverse=True)
    return RunDiff(before, after, tuple(lines), paths)


def check_growth(budget: Budget, diff: RunDiff) -> list[Breach]:
    """Every term of ``budget`` that the growth from before to after breaks: ``syncs/step<=0``
    (the total may not grow), ``line:syncs/step<=0`` (no line may add a sync per step)."""
    out = []
    for term in budget.terms:
        note = ""
        if term.per_step and not diff.per_step:
            sides = (("before", diff.before), ("after", diff.after))
            which = " and ".join(side for side, r in sides if steps_of(r) is None)
            note = f"cannot be checked: no step was seen {which}"
        lines = [(d.label, diff.delta(d, term.measure, term.per_step)) for d in diff.lines]
        breach = breach_of(term, diff.delta(None, term.measure, term.per_step), lines, note)
        if breach is not None:
            out.append(breach)
    return out


assert set(CORE) | set(OPTIONAL) <= set(MEASURES)
