"""What each fix would save, for the renderers: the table of ``gpuwatch report --what-if``, the
summary's "an unprofiled step would take" line, each hint's saving, the HTML's section. Reads
``report.what_if`` (profilers/timing/replayed.py); a report without it renders as before.

Every figure here is replayed (from the run's recorded steps), or predicted under ``--fake-cuda
--gpu NAME``, and says so."""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Mapping, Sequence

from gpuwatch import _format as fmt
from gpuwatch.analysis.hints import label
from profilers import Report
from profilers.finite import number
from profilers.timing.whatif import DECIDES


def span_ms(low: float, high: float) -> str:
    """``1.1-3.3 ms``, ``79-362 µs``, ``850 µs-1.2 ms``: a range, its unit said once where the
    two ends share it."""
    a, b = fmt.duration_ms(low), fmt.duration_ms(high)
    if a == b:
        return a
    if a.rpartition(" ")[2] == b.rpartition(" ")[2]:
        return f"{a.rpartition(' ')[0]}-{b}"
    return f"{a}-{b}"


def _range(d: Mapping[str, object], low: str, high: str) -> str:
    """`` (1.1-3.3 ms)`` where ``d`` holds a range, else nothing."""
    if d.get(low) is None or d.get(high) is None:
        return ""
    return f" ({span_ms(float(number(d[low])), float(number(d[high])))})"


def prediction_lines(r: Report) -> list[str]:
    """A prediction's two parts, each with its range (profilers/timing/uncertainty.py): the
    host's, measured on this CPU (named), and the GPU model's, with the model's measured error;
    then the step's range. Empty for a run that predicted nothing (or saved before the parts
    were written)."""
    p = r.predicted
    host, model, step = (p.host, p.gpu_model, p.step) if p else (None, None, None)
    if not (p and host is not None and model is not None and step is not None):
        return []
    gpu = p.gpu
    verdicts = [str(v) for v in step.get("verdicts") or []]
    hedge = ""
    if len(verdicts) > 1:
        hedge = (
            f" (the verdict is not known: {verdicts[0]} as predicted, "
            f"{' or '.join(verdicts[1:])} elsewhere in the ranges)"
        )
    return [
        f"PREDICTED step on the {gpu}: {fmt.duration_ms(float(step['ms']))}"
        f"{_range(step, 'low_ms', 'high_ms')}{hedge}, in two parts:",
        f"  host: {fmt.duration_ms(float(host['ms']))} per step"
        f"{_range(host, 'low_ms', 'high_ms')[:-1]}, {host['basis']}), MEASURED on this CPU, "
        f"{host['measured_on']}, not on the {gpu}'s host",
        f"  GPU model: {fmt.duration_ms(float(model['ms']))} busy per step"
        f"{_range(model, 'low_ms', 'high_ms')}; {model['words']}",
    ]


def unprofiled_line(r: Report) -> str | None:
    """``an unprofiled step would take about 3.2 ms (PREDICTED for H100-SXM)``; with the
    prediction's range where it has one (``3.2 ms (2.9-4.1 ms) ...``)."""
    w = r.what_if
    if not w:
        return None
    return (
        f"an unprofiled step would take about {fmt.duration_ms(float(w['unprofiled_ms']))}"
        f"{_range(w, 'unprofiled_low_ms', 'unprofiled_high_ms')} "
        f"({label(w)}, step {w['step']} replayed without the profiler's own time)"
    )


def _not_available(r: Report) -> str:
    """Why there is no what-if, and what would give one (never the flags the run was given)."""
    if r.predicted is not None and r.predicted.gpu:
        return (
            "no step ended to replay: the model replays steps (end each with optimizer.step(), "
            "or call profilers.step() where a step ends)"
        )
    asked = r.options.profile
    if r.options.timing_source == "cuda_events" and asked is not None:
        # NB: a GPU run records its steps for a replay only when asked (the record of every op
        # costs the hot path)
        if not asked.what_if:
            return "the run did not record its steps for a replay: profile it with --what-if"
        return (
            "no whole step was recorded to replay: the replay needs the run's steps timed "
            "(no --steps window), each ended by optimizer.step() or profilers.step()"
        )
    if r.options.fake_cuda:
        return "no GPU times to replay: add --gpu NAME to predict them for a named GPU"
    return (
        "no GPU times to replay: run on a GPU with kernel timing, or with --fake-cuda --gpu "
        "NAME for a prediction"
    )


def what_if_lines(r: Report) -> list[str]:
    """The ``--what-if`` table: every fix, its saving (with its range, where predicted), the
    combined saving, the overlap; savings whose ranges overlap are marked as not ranked."""
    w = r.what_if
    if not w:
        return [f"What if: not available ({_not_available(r)})."]
    base = float(w["unprofiled_ms"])
    # NB: ops and as_recorded_ms are optional in the schema (a report may lack them)
    ops = f", {int(w['ops']):,} ops" if w.get("ops") is not None else ""
    recorded = w.get("as_recorded_ms")
    as_recorded = (
        f" ({fmt.duration_ms(float(recorded))} as recorded, the profiler's time in)"
        if recorded is not None
        else ""
    )
    out = [
        f"What if ({label(w)}; step {w['step']}{ops}"
        + (f", {w['ops_dropped']:,} past the cap not replayed" if w.get("ops_dropped") else "")
        + f"): a step takes {fmt.duration_ms(base)}"
        f"{_range(w, 'unprofiled_low_ms', 'unprofiled_high_ms')} unprofiled{as_recorded}",
    ]
    savings = w.get("savings", [])
    if not savings:
        kept = [f"{s.file}:{s.line}" for s in r.lines if s.syncs.count and DECIDES.match(s.source)]
        out.append(
            "  no fix applies: no sync, blocking copy or input wait to remove"
            + (f" (the reads at {', '.join(kept)} decide what the script does)" if kept else "")
        )
        return out
    width = max(len(str(s["site"])) for s in savings)
    ranged = any("saving_low_ms" in s for s in savings)
    spans = [_range(s, "saving_low_ms", "saving_high_ms").strip(" ()") for s in savings]
    wide = max((len(x) for x in spans), default=0)
    # NB: ``2=``: a rank shared with another fix (their ranges overlap)
    shared = Counter(s.get("rank") for s in savings)
    ranks = [
        "" if s.get("rank") is None else f"{s['rank']}{'=' if shared[s['rank']] > 1 else ''}"
        for s in savings
    ]
    head = "  " + ("rank  " if ranged else "") + f"{'saves/step':>10}  "
    head += f"{'range':<{wide}}  " if ranged else ""
    out.append(f"{head}{'%':>5}  {'line':<{width}}  fix")
    for s, sp, place in zip(savings, spans, ranks, strict=True):
        alternative = (
            "" if s.get("together", True) else " (instead of the other fix of this copy: not both)"
        )
        rng = f"{sp:<{wide}}  " if ranged else ""
        out.append(
            "  "
            + (f"{place:<4}  " if ranged else "")
            + f"{fmt.duration_ms(float(s['saving_ms'])):>10}  {rng}"
            f"{fmt.pct(float(s['share_pct'])):>5}  {str(s['site']):<{width}}  {s['fix']}{alternative}"
        )
    if any(s.get("ranked") is False for s in savings):
        which = (
            "none of these fixes can be ranked against the others"
            if len({s.get("rank") for s in savings}) == 1
            else "fixes that share a rank (=) cannot be ranked against each other"
        )
        out.append(
            f"  {which}: their savings' ranges overlap (the host's spread on this CPU and the "
            "GPU model's error are wider than the differences), so which saves more is not known"
        )
    out.append(
        f"  all together: saves {fmt.duration_ms(float(w['combined_ms']))} per step "
        f"({fmt.pct(float(w['combined_pct']))}): a step of "
        f"{fmt.duration_ms(base - float(w['combined_ms']))}; their savings add up to "
        f"{fmt.duration_ms(float(w['sum_ms']))}, " + _overlap(float(w["interaction_ms"]))
    )
    return out


def _overlap(ms: float) -> str:
    if not math.isfinite(ms):
        return f"an overlap between them that is {fmt.NOT_FINITE}"
    if ms > 0:
        return f"{fmt.duration_ms(ms)} of it saved twice (fixes that free the same idle time)"
    if ms < 0:
        return f"{fmt.duration_ms(-ms)} less than together (fixes that help each other)"
    return "no overlap between them"


def what_if_html(r: Report, lines: Sequence[str]) -> str:
    """The HTML report's section: the table (``what_if_lines``), escaped; '' without ``what_if``."""
    if not r.what_if:
        return ""
    return (
        f"<h2>What if</h2><p>{html.escape(lines[0])}</p>"
        f"<pre>{html.escape(chr(10).join(lines[1:]))}</pre>"
    )
