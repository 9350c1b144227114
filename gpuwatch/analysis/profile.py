"""The one analysis of a finished report: :func:`analyze_run` works out, once, what every output
says about it (:class:`~gpuwatch.analysis.findings.Findings`: the verdict and its causes, each
line's cost, the hints with their cost and saving, the what-if rows, the ranks' spread), and
the renderers format them without working anything out again. Torch-free; its findings are
written into the JSON, so ``gpuwatch report run.json`` says what the run said."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuwatch.analysis.findings import Findings, Verdict, WhatIfRow
from gpuwatch.analysis.library_hints import all_hints  # noqa: TID251 - the analysis itself
from gpuwatch.analysis.line_costs import line_costs, measured_gpu, predicted_gpu  # noqa: TID251
from profilers import Report
from profilers.merge import spreads  # noqa: TID251 - the analysis itself
from profilers.timing.verdict import per_step

#: The most lines the ranks' spread is worked out for (every output shows at most this many).
MAX_SPREAD_LINES = 30


def analyze_run(report: Report) -> Findings:
    """Everything the outputs say about ``report``, worked out once."""
    why_not = no_verdict(report)
    w = report.what_if
    how = "predicted" if w and w.get("measured") == "predicted" else "replayed"
    return Findings(
        verdict=_verdict(report) if why_not is None else None,
        no_verdict=why_not,
        line_costs=line_costs(report),
        hints=tuple(all_hints(report)),
        what_if=tuple(
            WhatIfRow(str(s["kind"]), s.get("site"), float(s["saving_ms"]), how)
            for s in (w.get("savings", []) if w else [])
        ),
        spreads=tuple(spreads(report, MAX_SPREAD_LINES)),
    )


def _verdict(r: Report) -> Verdict | None:
    """The per-step verdict (the steps after the first where two or more ended)."""
    basis, steps = per_step(r.time) if r.time else ({}, 0)
    if "verdict" not in basis:
        return None
    gpu = predicted_gpu(basis)
    step_ms = float(basis["gpu"]["wall_ms"] if gpu else basis["wall_unprofiled_ms"] / max(1, steps))
    shares = sorted(basis.get("shares_pct", {}).items(), key=lambda kv: kv[1], reverse=True)
    return Verdict(
        kind=str(basis["verdict"]),
        share_pct=float(shares[0][1]) if shares else 0.0,
        step_ms=step_ms,
        causes_ms={k: step_ms * float(v) / 100 for k, v in shares},
        measured="predicted" if gpu else "measured" if measured_gpu(basis) else "host",
    )


def analysed(report: Report) -> Findings | None:
    """:func:`analyze_run`, or None where it fails (a bug of ours): the outputs that show the
    analysis then say so, and those of the report's data alone are written all the same."""
    try:
        return analyze_run(report)
    except Exception:  # noqa: BLE001 - said by each output that needs it (write_reports)
        return None


def no_verdict(r: Report) -> str | None:
    """Why the run gets no verdict, or None when it gets one. A verdict says what held the GPU's
    steps up, so it needs a step that ended or a GPU that ran (measured or predicted): a script
    that stopped before its first op (a syntax error, no GPU to start on) or that only ran on the
    CPU without steps has none, whatever its host time was spent on."""
    t: Mapping[str, Any] = r.time or {}
    if int(t.get("steps_closed", 0)) or predicted_gpu(t.get("run") or {}) is not None:
        return None
    if any(str(d.get("device", "")).startswith("cuda") for d in r.devices):
        return None
    if r.counts_ops and not r.totals.ops:
        stopped = f" before it stopped ({r.error})" if r.error else ""
        return f"the script ran no torch op{stopped}"
    # NB: the fast path counts no ops: it cannot tell a script that ran none from one that did
    stopped = f"; it stopped: {r.error}" if r.error else ""
    return (
        f"no step ended and no GPU ran{stopped} (end each step with optimizer.step() or "
        "profilers.step() for a verdict per step)"
    )
