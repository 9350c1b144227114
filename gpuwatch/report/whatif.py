"""What each fix would save, for the renderers: the table of ``gpuwatch report --what-if``, the
summary's "an unprofiled step would take" line, each hint's saving, the HTML's section. Reads
``report.what_if`` (profilers/timing/replayed.py); a report without it renders as before.

Every figure here is replayed (from the run's recorded steps), or predicted under ``--fake-cuda
--gpu NAME``, and says so."""

from __future__ import annotations

import html
import math
import sys
from typing import Any

from gpuwatch import _format as fmt
from profilers import Report


def label(w: dict[str, Any]) -> str:
    """``PREDICTED for H100-SXM`` or ``replayed``: where the figures come from."""
    if w.get("measured") == "predicted":
        return f"PREDICTED for {w.get('gpu')}"
    return "replayed"


def unprofiled_line(r: Report) -> str | None:
    """``an unprofiled step would take about 3.2 ms (PREDICTED for H100-SXM)``."""
    w = r.what_if
    if not w:
        return None
    return (
        f"an unprofiled step would take about {fmt.duration_ms(float(w['unprofiled_ms']))} "
        f"({label(w)}, step {w['step']} replayed without the profiler's own time)"
    )


def savings_by_hint(r: Report) -> dict[tuple[str, str], tuple[float, float]]:
    """``(hint kind, file:line)`` -> (ms saved per step, % of the step) by the what-if that
    states that hint's saving."""
    w = r.what_if
    if not w:
        return {}
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for s in w.get("savings", []):
        for hint in s.get("hints", []):
            out[(str(hint), str(s["site"]))] = (float(s["saving_ms"]), float(s["share_pct"]))
    return out


def saving_words(ms: float, pct: float, w: dict[str, Any]) -> str:
    """``the fix saves about 1.2 ms per step (31%, PREDICTED for H100-SXM)``: what the step
    gives back, not what the line costs (a sync in a busy GPU's shadow costs its wait and
    saves nothing)."""
    return f"the fix saves about {fmt.duration_ms(ms)} per step ({fmt.pct(pct)}, {label(w)})"


def what_if_lines(r: Report) -> list[str]:
    """The ``--what-if`` table: every fix, its saving, the combined saving, the overlap."""
    w = r.what_if
    if not w:
        return [f"What if: not available ({_why_none(r)})."]
    base = float(w["unprofiled_ms"])
    out = [
        f"What if ({label(w)}; step {w['step']}, {w['ops']:,} ops"
        + (f", {w['ops_dropped']:,} past the cap not replayed" if w.get("ops_dropped") else "")
        + f"): a step takes {fmt.duration_ms(base)} unprofiled "
        f"({fmt.duration_ms(float(w['as_recorded_ms']))} as recorded, the profiler's time in)",
    ]
    savings = w.get("savings", [])
    if not savings:
        out.append("  no fix applies: no sync, blocking copy or input wait to remove")
        return out
    width = max(len(str(s["site"])) for s in savings)
    out.append(f"  {'saves/step':>10}  {'%':>5}  {'line':<{width}}  fix")
    for s in savings:
        alternative = "" if s.get("together", True) else " (the other fix of this copy saves more)"
        out.append(
            f"  {fmt.duration_ms(float(s['saving_ms'])):>10}  {fmt.pct(float(s['share_pct'])):>5}  "
            f"{str(s['site']):<{width}}  {s['fix']}{alternative}"
        )
    out.append(
        f"  all together: saves {fmt.duration_ms(float(w['combined_ms']))} per step "
        f"({fmt.pct(float(w['combined_pct']))}): a step of "
        f"{fmt.duration_ms(base - float(w['combined_ms']))}; their savings add up to "
        f"{fmt.duration_ms(float(w['sum_ms']))}, " + _overlap(float(w["interaction_ms"]))
    )
    return out


def _why_none(r: Report) -> str:
    """Why a report has no ``what_if``: a GPU run records its steps for a replay only when
    asked (the record of every op costs the hot path), other runs have no GPU times."""
    asked = r.options.profile
    if r.options.timing_source == "cuda_events" and asked is not None:
        if not asked.what_if:
            return "the run did not record its steps for a replay: profile it with --what-if"
        return (
            "no whole step was recorded to replay: the replay needs the run's steps timed "
            "(no --steps window), each ended by optimizer.step() or profilers.step()"
        )
    return (
        "no GPU times to replay: run on a GPU with kernel timing, or with --fake-cuda --gpu "
        "NAME for a prediction"
    )


def _overlap(ms: float) -> str:
    if not math.isfinite(ms):
        return f"an overlap between them that is {fmt.NOT_FINITE}"
    if ms > 0:
        return f"{fmt.duration_ms(ms)} of it saved twice (fixes that free the same idle time)"
    if ms < 0:
        return f"{fmt.duration_ms(-ms)} less than together (fixes that help each other)"
    return "no overlap between them"


def print_what_if(r: Report, file: Any = None) -> None:
    print("\n".join(what_if_lines(r)), file=file or sys.stderr)


def what_if_html(r: Report) -> str:
    """The HTML report's section: the same table, escaped (empty without ``what_if``)."""
    if not r.what_if:
        return ""
    lines = what_if_lines(r)
    return (
        f"<h2>What if</h2><p>{html.escape(lines[0])}</p>"
        f"<pre>{html.escape(chr(10).join(lines[1:]))}</pre>"
    )
