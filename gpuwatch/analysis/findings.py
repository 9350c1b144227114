"""What a report says, as data: the types every renderer reads (filled once by ``analysis.py``,
which renderers never import), and their round trip through the JSON's ``findings``, so that
``gpuwatch report run.json`` renders what the run rendered without analysing it again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

from gpuwatch.analysis.hints import Hint
from profilers import Line
from profilers.merge import Spread

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

D = TypeVar("D", bound="DataclassInstance")


@dataclass(frozen=True)
class Verdict:
    """What held the steps up (profilers/timing/verdict.py): the largest cause's share, the
    step's ms and its ms by cause; ``measured``: ``measured`` (CUDA events), ``host`` (the
    host's time, GPU not measured) or ``predicted``."""

    kind: str
    share_pct: float
    step_ms: float
    causes_ms: Mapping[str, float]
    measured: str


@dataclass(frozen=True)
class WhatIfRow:
    """One fix of the what-if: its saving per step, ``replayed`` or ``predicted``."""

    kind: str
    line: str | None
    saving_ms: float
    measured: str


@dataclass(frozen=True)
class Findings:
    """What a report says, worked out once for every output."""

    verdict: Verdict | None
    no_verdict: str | None
    """Why the run gets no verdict (no step ended and no GPU ran), None when it gets one."""
    line_costs: Mapping[str, tuple[float, float]]
    """``file:line`` -> (ms per step, % of the step) charged to it, costliest first."""
    hints: tuple[Hint, ...]
    what_if: tuple[WhatIfRow, ...]
    spreads: tuple[Spread, ...]
    """In a report merged from ranks: per line, the slowest rank and how far behind it is."""

    def to_dict(self) -> dict[str, object]:
        costs = [
            {"line": k, "ms_per_step": v[0], "pct_of_step": v[1]}
            for k, v in self.line_costs.items()
        ]
        return {
            "verdict": self.verdict and _plain(self.verdict),
            "no_verdict": self.no_verdict,
            "line_costs": costs,
            **{k: [_plain(x) for x in getattr(self, k)] for k in ("hints", "what_if", "spreads")},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Findings:
        """The findings a report's JSON keeps (checked against the schema first)."""
        return cls(
            verdict=d["verdict"] and _typed(Verdict, d["verdict"]),
            no_verdict=d["no_verdict"],
            line_costs={c["line"]: (c["ms_per_step"], c["pct_of_step"]) for c in d["line_costs"]},
            hints=tuple(_typed(Hint, h) for h in d["hints"]),
            what_if=tuple(_typed(WhatIfRow, w) for w in d["what_if"]),
            spreads=tuple(_typed(Spread, s) for s in d["spreads"]),
        )


def _plain(obj: DataclassInstance) -> dict[str, object]:
    """A dataclass's fields as JSON (a :class:`Line` as the report's sites, a tuple a list).
    NB: by ``fields()``, so a field added to :class:`Hint` is written with no change here."""
    out = {f.name: getattr(obj, f.name) for f in fields(obj)}
    return {
        k: v.to_dict() if isinstance(v, Line) else list(v) if isinstance(v, tuple) else v
        for k, v in out.items()
    }


def _typed(cls: type[D], d: Mapping[str, object]) -> D:
    """:func:`_plain` back; fields a newer writer added that ``cls`` lacks are left out."""
    known = {f.name for f in fields(cls)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in known}
    if isinstance(line := values.get("line"), dict):
        values["line"] = Line.from_dict(line)
    return cls(**values)
