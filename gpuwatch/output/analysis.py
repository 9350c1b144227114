"""The one analysis of a finished report: :func:`analyze` works out, once, what every output
says about it (the verdict lines, each line's cost, the hints with their cost and saving, the
what-if rows, the ranks' spread), and the renderers format :class:`Findings` without working
anything out again. Torch-free: a saved report is analysed the same way as a fresh one, so
``gpuwatch report run.json`` says what the run said."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuwatch.output.hints import Hint
from gpuwatch.output.library_hints import all_hints
from gpuwatch.output.line_costs import line_costs
from gpuwatch.output.timeview import no_verdict, time_lines
from gpuwatch.output.whatif import what_if_lines
from profilers import Report
from profilers.merge import Spread, spreads

#: The most lines the ranks' spread is worked out for (every output shows at most this many).
MAX_SPREAD_LINES = 30


@dataclass(frozen=True)
class Findings:
    """What a report says, worked out once (:func:`analyze`) for every output."""

    verdict_lines: tuple[str, ...]
    """The summary's first lines: the verdict per step (or why there is none), step 0, the
    profiler's own time, the GPU's share, energy, the costliest line."""
    no_verdict: str | None
    """Why the run gets no verdict (no step ended and no GPU ran), None when it gets one."""
    line_costs: Mapping[str, tuple[float, float]]
    """``file:line`` -> (ms per step, % of the step) charged to it, costliest first."""
    hints: tuple[Hint, ...]
    """Every hint, the largest saving (or cost) first, with the knob of each well-known
    library frame (library_hints.py)."""
    what_if_lines: tuple[str, ...]
    """The what-if table's lines (each fix's saving per step, replayed or PREDICTED), or the
    one line that says why the run has none and what would give one."""
    spreads: tuple[Spread, ...]
    """In a report merged from ranks: per line, the slowest rank and how far behind it is."""


def analyze(report: Report) -> Findings:
    """Everything the outputs say about ``report``, worked out once."""
    costs = line_costs(report)
    return Findings(
        verdict_lines=tuple(time_lines(report, costs)),
        no_verdict=no_verdict(report),
        line_costs=costs,
        hints=tuple(all_hints(report)),
        what_if_lines=tuple(what_if_lines(report)),
        spreads=tuple(spreads(report, MAX_SPREAD_LINES)),
    )


def analysed(report: Report) -> Findings | None:
    """:func:`analyze`, or None where it fails (a bug of ours): the outputs that show the
    analysis then say so, and those of the report's data alone are written all the same."""
    try:
        return analyze(report)
    except Exception:  # noqa: BLE001 - said by each output that needs it (write_reports)
        return None
