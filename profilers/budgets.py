"""Budgets: ceilings on what a run (or a guarded block) may copy, sync or communicate.

One vocabulary everywhere: ``gpuwatch profile --budget``, ``[tool.gpuwatch.budget]`` in
pyproject.toml, ``gpuwatch diff --budget`` (on growth), :func:`profilers.budget` and the pytest
marker. A budget is terms joined by commas, each ``[line:]MEASURE[/step] <= N`` (``<`` too; ``=``
reads as ``<=``: a budget is a ceiling)::

    syncs/step<=1, h2d.pageable=0, line:syncs.item=0

* MEASURE is a count or a size of the report: ``syncs``, ``syncs.CAUSE``, ``copies``, ``bytes``,
  ``h2d`` / ``d2h`` / ``d2d`` / ``p2p`` (copies) with ``.bytes``, ``.pageable``,
  ``.non_blocking``, ``comm`` (collectives) with ``.bytes`` or ``.OP``, ``kernel_ms``, ``ops``;
* ``/step``: per training step (steps as the report counts them);
* ``line:``: every line on its own must keep under it; otherwise the run's total must.

No torch here: the CLI checks a saved report's budget without importing it.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from profilers.finite import number
from profilers.names import CAUSES, DIRECTIONS
from profilers.records import Line
from profilers.report import Report
from profilers.stats import COMM_OPS, CommOp, Counted

__all__ = [
    "MEASURES",
    "Breach",
    "Budget",
    "BudgetError",
    "Term",
    "check_report",
    "fmt",
    "measure",
    "line_label",
]


class BudgetError(ValueError):
    """A budget that cannot be read. The message is one line and names the bad part."""


def _copies(way: str, field: str) -> Callable[[Counted], float]:
    return lambda c: float(getattr(c.copies(way), field))


_NO_COMM = CommOp()  # read only


def _comm_op(op: str) -> Callable[[Counted], float]:
    return lambda c: float(c.comm.by_op.get(op, _NO_COMM).count)


def _cause(cause: str) -> Callable[[Counted], float]:
    return lambda c: float(c.syncs.by_cause.get(cause, 0))


def _measures() -> dict[str, Callable[[Counted], float]]:
    out: dict[str, Callable[[Counted], float]] = {"syncs": lambda c: float(c.syncs.count)}
    out.update({f"syncs.{cause}": _cause(cause) for cause in CAUSES})
    out["copies"] = lambda c: float(sum(c.copies(w).count for w in DIRECTIONS))
    out["bytes"] = lambda c: float(c.bytes_moved)
    for way in DIRECTIONS:
        out[way] = _copies(way, "count")
        for field in ("bytes", "pageable", "non_blocking"):
            out[f"{way}.{field}"] = _copies(way, field)
    out["comm"] = lambda c: float(c.comm.count)
    out["comm.bytes"] = lambda c: float(c.comm.bytes)
    out.update({f"comm.{op}": _comm_op(op) for op in COMM_OPS})
    out["kernel_ms"] = lambda c: float(c.kernel_time_ms)
    out["ops"] = lambda c: float(c.ops)
    return out


MEASURES: dict[str, Callable[[Counted], float]] = _measures()
"""Every measure a budget may name, and how to read it off a line or the totals."""

_KWARGS = {name.replace(".", "_"): name for name in MEASURES}
"""``profilers.budget(h2d_pageable=0)``: the keyword spelling of each measure."""

_HELP = (
    "syncs[.CAUSE], copies, bytes, h2d|d2h|d2d|p2p[.bytes|.pageable|.non_blocking], "
    "comm[.bytes|.OP], kernel_ms, ops"
)


def measure(counted: Counted, name: str) -> float:
    """The value of measure ``name`` on a line or on the totals."""
    return MEASURES[name](counted)


@dataclass(frozen=True)
class Term:
    """One ceiling: ``measure`` (per step, per line) must stay ``<= limit`` (``< limit``)."""

    measure: str
    limit: float
    per_step: bool = False
    per_line: bool = False
    strict: bool = False
    """``<`` rather than ``<=``."""

    @property
    def name(self) -> str:
        """How the user writes the left side (``line:syncs/step``)."""
        return f"{'line:' if self.per_line else ''}{self.measure}{'/step' if self.per_step else ''}"

    def __str__(self) -> str:
        return f"{self.name}{'<' if self.strict else '<='}{fmt(self.limit)}"

    def over(self, value: float) -> bool:
        """Whether ``value`` breaks this ceiling (a hair of float noise is forgiven)."""
        slack = 1e-9 * max(1.0, abs(self.limit))
        return value >= self.limit - slack if self.strict else value > self.limit + slack


_TERM = re.compile(
    r"^(?:(?P<scope>[A-Za-z_-]+):)?\s*(?P<measure>[A-Za-z0-9_.]+)\s*(?P<step>/\s*step)?\s*"
    r"(?P<op><=|==|=|<|>=|>|!=)\s*(?P<limit>\S+)$"
)


def _limit(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BudgetError(f"{where}: the limit must be a number, not {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise BudgetError(f"{where}: the limit must be a number of 0 or more, not {text}")
    return value


def _measure_name(name: str, where: str) -> str:
    key = name.strip().lower()
    if key in MEASURES:
        return key
    close = difflib.get_close_matches(key, list(MEASURES), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise BudgetError(f"{where}: unknown measure {name!r} ({hint}measures: {_HELP})")


def _term(text: str, where: str) -> Term:
    m = _TERM.match(text.strip())
    if m is None:
        raise BudgetError(
            f"{where}: cannot read {text.strip()!r}; write MEASURE<=N, e.g. syncs/step<=1"
        )
    if m["op"] in (">", ">=", "!="):
        raise BudgetError(f"{where}: {text.strip()!r}: a budget is a ceiling; use <=, < or =")
    scope = (m["scope"] or "").lower()
    if scope not in ("", "line", "total"):
        raise BudgetError(
            f"{where}: unknown scope {m['scope']!r} in {text.strip()!r} (line: or none)"
        )
    return Term(
        _measure_name(m["measure"], where),
        _limit(m["limit"], where),
        per_step=bool(m["step"]),
        per_line=scope == "line",
        strict=m["op"] == "<",
    )


@dataclass(frozen=True)
class Budget:
    """Ceilings, each read the same way wherever the budget came from."""

    terms: tuple[Term, ...]
    source: str = "--budget"
    """Where it was given, for messages (``--budget``, a pyproject.toml path)."""

    def __str__(self) -> str:
        return ",".join(str(t) for t in self.terms)

    @classmethod
    def parse(cls, text: str, source: str = "--budget") -> Budget:
        """``"syncs/step<=1,h2d.pageable=0"``; :class:`BudgetError` names what is wrong."""
        pieces = [p for p in re.split(r"[,;\n]", text)]
        if not any(p.strip() for p in pieces):
            raise BudgetError(f"{source}: the budget is empty (e.g. 'syncs/step<=1')")
        terms = []
        for piece in pieces:
            if not piece.strip():
                raise BudgetError(f"{source}: an empty term in {text.strip()!r} (two commas?)")
            terms.append(_term(piece, source))
        return cls._of(terms, source)

    @classmethod
    def from_table(cls, table: Mapping[str, object], source: str) -> Budget:
        """A ``[tool.gpuwatch.budget]`` table: ``"syncs/step" = 1`` (each value a ceiling)."""
        terms = []
        for key, value in table.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BudgetError(f"{source}: {key!r} must be a number (a ceiling), not {value!r}")
            terms.append(_term(f"{key}<={value}", source))
        if not terms:
            raise BudgetError(f"{source}: the budget table is empty")
        return cls._of(terms, source)

    @classmethod
    def from_kwargs(cls, spec: str | None, limits: Mapping[str, float], source: str) -> Budget:
        """``profilers.budget("syncs<=1", h2d_pageable=0)``: a spec, keyword ceilings, or both."""
        terms = list(cls.parse(spec, source).terms) if spec is not None else []
        for key, value in limits.items():
            name = _KWARGS.get(key)
            if name is None:
                _measure_name(key, source)  # raises, with the nearest name
                raise AssertionError("unreachable")
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BudgetError(f"{source}: {key}= must be a number, not {value!r}")
            terms.append(Term(name, _limit(str(value), source)))
        if not terms:
            raise BudgetError(f"{source}: no ceiling given (e.g. syncs=0)")
        return cls._of(terms, source)

    @classmethod
    def _of(cls, terms: list[Term], source: str) -> Budget:
        seen: set[str] = set()
        for t in terms:
            if t.name in seen:
                raise BudgetError(f"{source}: {t.name} is given twice")
            seen.add(t.name)
        return cls(tuple(terms), source)


def fmt(value: float) -> str:
    """A count as a whole number, a per-step figure with two decimals."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:,.2f}"


#: Characters of a line's source shown in a message.
SOURCE_CHARS = 60


def line_label(line: Line) -> str:
    """``train.py:42 (train) loss.item()``: where a line is and what it says."""
    text = " ".join(line.source.split())
    if len(text) > SOURCE_CHARS:
        text = text[: SOURCE_CHARS - 3] + "..."
    return f"{line.file}:{line.line} ({line.function})" + (f" {text}" if text else "")


@dataclass(frozen=True)
class Breach:
    """A ceiling broken: by how much, and the lines it comes from (``(label, value)``)."""

    term: Term
    value: float | None
    """The total (or per step) measured; None for a per-line term or one not measurable."""
    lines: tuple[tuple[str, float], ...] = ()
    note: str = ""
    """Why the term could not be checked (no step seen), instead of a value."""
    more: int = 0
    """Lines left out of ``lines`` (the smallest)."""

    def text(self) -> list[str]:
        """The term and what it measured, then each line with its amount (indented, aligned)."""
        unit = " per step" if self.term.per_step else ""
        head = f"{self.term}: "
        if self.note:
            return [head + self.note]
        if self.value is not None:
            over = fmt(self.value - self.term.limit)
            out = [f"{head}{fmt(self.value)}{unit} ({over} over), from"]
            amounts = [f"{fmt(v)}{unit}" for _, v in self.lines]
        else:
            n = len(self.lines) + self.more
            out = [f"{head}{n} line{'s' if n != 1 else ''} over it"]
            amounts = [f"{fmt(v)}{unit} ({fmt(v - self.term.limit)} over)" for _, v in self.lines]
        width = max((len(a) for a in amounts), default=0)
        out += [
            f"  {a:>{width}}  {label}" for a, (label, _) in zip(amounts, self.lines, strict=True)
        ]
        if self.more:
            out.append(f"  ... and {self.more} more line{'s' if self.more != 1 else ''}")
        return out


#: Lines named per breach (the largest first).
MAX_LINES = 10


def breach_of(
    term: Term, total: float | None, lines: Iterable[tuple[str, float]], note: str = ""
) -> Breach | None:
    """The breach of ``term`` given the total and each line's value (both already per step when
    the term is), or None when it holds."""
    if note:
        return Breach(term, None, note=note)
    if term.per_line:
        over = sorted(((k, v) for k, v in lines if term.over(v)), key=lambda kv: -kv[1])
        if not over:
            return None
        return Breach(term, None, tuple(over[:MAX_LINES]), more=max(0, len(over) - MAX_LINES))
    assert total is not None
    if not term.over(total):
        return None
    parts = sorted(((k, v) for k, v in lines if v > 0), key=lambda kv: -kv[1])
    return Breach(term, total, tuple(parts[:MAX_LINES]), more=max(0, len(parts) - MAX_LINES))


def steps_of(report: Report) -> int | None:
    """The steps a report counted (None when it saw none)."""
    return (int(number(report.steps.get("count", 0))) if report.steps else 0) or None


def check_report(budget: Budget, report: Report) -> list[Breach]:
    """Every term of ``budget`` the run of ``report`` breaks (a term per step in a run with no
    step is broken: it cannot be checked, and a CI must not pass it silently)."""
    steps = steps_of(report)
    out = []
    for term in budget.terms:
        note = ""
        if term.per_step and steps is None:
            note = (
                "cannot be checked: the run ended no step (no optimizer.step() or profilers.step())"
            )
        div = float(steps) if term.per_step and steps else 1.0
        total = measure(report.totals, term.measure) / div
        lines = [(line_label(s), measure(s, term.measure) / div) for s in report.lines]
        breach = breach_of(term, total, lines, note)
        if breach is not None:
            out.append(breach)
    return out
