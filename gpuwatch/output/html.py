"""One self-contained HTML file per run: plotly.js inlined (no CDN, opens offline), every string
from the user's code escaped."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuwatch import _format as fmt
from gpuwatch.analysis.findings import Findings
from gpuwatch.analysis.hints import Hint, hints_order
from gpuwatch.output.collectives import comm_html, rank_line
from gpuwatch.output.compiled import compiled_lines
from gpuwatch.output.html_charts import charts, figure_json
from gpuwatch.output.memory import memory_html, memory_title
from gpuwatch.output.text import (
    DIRECTION_NAMES,
    fallback_lines,
    gpu_busy,
    gpu_lines,
    gpu_source,
    internal_error_lines,
    simulated_lines,
    used_no_gpu,
)
from gpuwatch.output.timeview import time_lines
from gpuwatch.output.whatif import what_if_html, what_if_lines
from profilers import DIRECTIONS, Line, Report

if TYPE_CHECKING:
    from plotly.graph_objects import Figure


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


PAGE_CSS = (
    "body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;"
    "max-width:1400px}"
)
#: The rules both the page and the notebook use; in a notebook each is scoped to the report's
#: own element, so that it never restyles the notebook around it.
RULES = """
h1{font-size:22px;margin:0 0 4px} .meta{color:#555;margin-bottom:16px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{border:1px solid #ddd;border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:20px} .card span{color:#666;font-size:12px}
table{border-collapse:collapse;margin:8px 0 20px;font-size:13px}
th,td{border-bottom:1px solid #eee;padding:4px 10px;text-align:right;vertical-align:top}
th{background:#fafafa} td.l,th.l{text-align:left} code{font-family:ui-monospace,monospace;font-size:12px}
.empty{color:#666;font-style:italic} .hint{color:#8a4b00} .partial{background:#fff3cd;border:1px solid #e0c36c;padding:8px;border-radius:6px}
.verdict p{margin:4px 0} .verdict p:first-child{font-size:16px;font-weight:600}
"""


def scoped_css(scope: str) -> str:
    """:data:`RULES` with every selector under ``scope`` (``.gpuwatch-report``)."""
    out = []
    for rule in RULES.replace("}", "}\n").split("\n"):
        selectors, brace, body = rule.strip().partition("{")
        if brace:
            names = ",".join(f"{scope} {sel.strip()}" for sel in selectors.split(","))
            out.append(f"{names}{{{body}")
    return "\n".join(out)


def _header(r: Report) -> str:
    devices = (
        ", ".join(
            _e(f"{d['device']} ({d['name']})" if d.get("name") else d["device"]) for d in r.devices
        )
        or "none"
    )
    partial = (
        f"<p class=partial>This run did not finish{': ' + _e(r.error) if r.error else ''}. "
        "The numbers cover the part that ran.</p>"
        if r.partial
        else ""
    ) + "".join(
        f"<p class=partial>{_e(line)}</p>"
        for line in compiled_lines(r)
        + simulated_lines(r)
        + fallback_lines(r)
        + internal_error_lines(r)
    )
    return (
        f"<h1>gpuwatch profile <code>{_e(' '.join(r.command))}</code></h1>\n"
        f"<div class=meta>{_e(f'{ranked} · ' if (ranked := rank_line(r)) else '')}"
        f"exit code {r.exit_code} · started {_e(fmt.local_time(r.started_at))} · "
        f"devices: {devices}</div>\n{partial}"
    )


def _cards(r: Report) -> str:
    t, source = r.totals, r.options.timing_source
    kernel = (fmt.duration_ms(t.kernel_time_ms), f"kernel time ({source})")
    if not kernel_measured(r):
        why = "simulated GPUs" if r.options.fake_cuda else "--no-kernel-timing"
        kernel = ("-", f"kernel time (not measured: {why})")
    cards = [
        (fmt.size(t.bytes_moved), "moved between host and GPUs"),
        (f"{t.syncs.count:,}", "syncs (host waited)"),
        kernel,
        (f"{t.ops:,}", "ops") if r.counts_ops else ("-", "ops (not counted: --no-kernel-timing)"),
        (fmt.duration_ms(r.duration_s * 1000), "wall time"),
    ]
    cards += [
        (f"{busy:.0f}%", f"GPU {gpu} busy ({gpu_source(r)})") for gpu, busy, _, _ in gpu_busy(r)
    ]
    items = "".join(f"<div class=card><b>{_e(v)}</b><span>{_e(k)}</span></div>" for v, k in cards)
    return f"<div class=cards>{items}</div>"


def _copies(r: Report) -> str:
    rows = "".join(
        f"<tr><td class=l>{way} ({_e(DIRECTION_NAMES[way])})</td><td>{c.count:,}</td>"
        f"<td>{_e(fmt.size(c.bytes))}</td><td>{c.pageable:,}</td><td>{c.non_blocking:,}</td>"
        f"<td>{_e(fmt.throughput(c.bytes, c.time_ms / 1000) if c.time_ms else '-')}</td></tr>"
        for way in DIRECTIONS
        for c in [r.totals.copies(way)]
    )
    return (
        "<h2>Copies</h2>\n<table><tr><th class=l>direction</th><th>copies</th><th>bytes</th>"
        f"<th>pageable</th><th>non_blocking</th><th>effective</th></tr>{rows}</table>"
    )


def _hints(found: Sequence[Hint]) -> str:
    rows = (
        "".join(
            f"<tr><td class=l><code>{_e(h.where)}</code></td><td class=l>{_e(h.message)}</td>"
            f"<td class=l>{_e(h.evidence)}</td></tr>"
            for h in found
        )
        or "<tr><td class=l colspan=3>No line copies or syncs often enough to flag.</td></tr>"
    )
    return (
        f"<h2>Hints, {hints_order(found)}</h2>\n<table><tr><th class=l>line</th>"
        "<th class=l>what to change</th>"
        f"<th class=l>evidence</th></tr>{rows}</table>"
    )


def _gpu_notes(r: Report) -> str:
    tl = r.timeline
    capped = (
        f"<p>The timeline keeps the newest {tl.get('capacity', 0):,} copy/sync events; "
        f"{tl.get('dropped', 0):,} older ones are counted above but not drawn.</p>"
        if tl.get("dropped")
        else ""
    )
    if r.gpu_samples:
        gpu = "".join(f"<p>{_e(line)}</p>" for line in gpu_lines(r))
    elif used_no_gpu(r):
        gpu = "<p>No CUDA device was used, so no GPU's load is charged to this script.</p>"
    else:
        why = str(r.options.gpu_stats or "no NVML").rstrip(".?")
        gpu = f"<p>No GPU utilisation was recorded ({_e(why)}).</p>"
    return capped + gpu


def _top_lines(r: Report, found: Sequence[Hint]) -> str:
    by_line: dict[tuple[str, int], list[str]] = {}
    for h in found:
        for line in h.lines or (h.line.line,):  # a merged hint: each of its lines
            by_line.setdefault((h.line.file, line), []).append(h.message)
    top = sorted(
        r.lines, key=lambda s: (s.syncs.count, s.bytes_moved, s.kernel_time_ms), reverse=True
    )[:30]
    timed = kernel_measured(r)
    rows = "".join(
        f"<tr><td class=l><code>{_e(s.file)}:{s.line}</code><br><small>{_e(s.function)}</small>"
        f"{_made_at(s)}</td>"
        f"<td class=l><code>{_e(s.source)}</code></td><td>{_e(fmt.size(s.bytes_moved))}</td>"
        f"<td>{s.syncs.count:,}</td><td>{_e(', '.join(f'{k} {v:,}' for k, v in s.syncs.by_cause.items()))}</td>"
        f"<td>{_e(fmt.duration_ms(s.kernel_time_ms)) if timed else 'not measured'}</td>"
        f"<td>{f'{s.ops:,}' if r.counts_ops else '-'}</td>"
        f"<td>{_e(fmt.duration_ms(s.backward_ms)) if s.backward and timed else '-'}</td>"
        f"<td class='l hint'>{'<br>'.join(_e(m) for m in by_line.get((s.file, s.line), []))}</td></tr>"
        for s in top
    )
    return (
        "<h2>Top lines</h2>\n<table><tr><th class=l>line</th><th class=l>source</th>"
        "<th>bytes</th><th>syncs</th><th class=l>causes</th><th>kernel time</th><th>ops</th>"
        "<th title=\"the time of the backward of this line's forward ops (also counted at the "
        '.backward() line)">its backward</th><th class=l>hints</th></tr>'
        f"{rows}</table>"
    )


def _made_at(s: Line) -> str:
    """Where inside a library the line's copies and syncs were made (at most three frames)."""
    return "".join(
        f"<br><small>made at <code>{_e(f.file)}:{f.line}</code> {_e(f.function)}: "
        f"{f.syncs:,} syncs, {f.copies:,} copies</small>"
        for f in s.library[:3]
    )


def kernel_measured(r: Report) -> bool:
    """False where kernel time was not measured (simulated GPUs, ``--no-kernel-timing``): then
    every line says so rather than showing 0 µs."""
    return not r.options.fake_cuda and r.options.kernel_timing_source != "off"


def _time_text(r: Report, f: Findings) -> str:
    """The summary's first lines (the verdict, step 0, the costliest line), above the bars."""
    lines = time_lines(r, f)
    if not lines:
        return ""
    return "<div class=verdict>" + "".join(f"<p>{_e(line)}</p>" for line in lines) + "</div>"


def _body(r: Report, places: dict[str, str], f: Findings) -> str:
    found = f.hints
    return f"""{_header(r)}
{_cards(r)}{_time_text(r, f)}
{_hints(found)}
{places["time"]}
{memory_html(r)}{places["memory"] if memory_title(r) else ""}
{_copies(r)}
{comm_html(r, f.spreads)}
{what_if_html(r, what_if_lines(r))}
{places["timeline"]}{_gpu_notes(r)}
{places["bytes"]}
{places["kernel"]}
{places["syncs"]}
{_top_lines(r, found)}"""


def render_html(report: Report, findings: Findings) -> str:
    """The whole page as a string: one small function per section, the figures' data inlined
    with plotly.js itself (the file opens offline), with the report's ``findings``."""
    from plotly.offline import get_plotlyjs

    figures = charts(report)
    places = {
        name: f'<div id="fig-{name}"></div>' if fig is not None else f"<p class=empty>{_e(why)}</p>"
        for name, (fig, why) in figures.items()
    }
    plots = "".join(
        f"(function () {{ var f = {figure_json(fig)};\n"
        f"  Plotly.newPlot('fig-{name}', f.data, f.layout, {{displaylogo: false, responsive: true}}); }})();\n"
        for name, (fig, _) in figures.items()
        if fig is not None
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpuwatch profile: {_e(" ".join(report.command) or "run")}</title>
<style>{PAGE_CSS}{RULES}</style>
<script>{get_plotlyjs()}</script>
</head><body>
{_body(report, places, findings)}
<script>
{plots}</script>
</body></html>
"""


def render_fragment(report: Report, findings: Findings) -> tuple[str, list[tuple[str, Figure]]]:
    """The report for a notebook: the page's sections as one element with its own scoped style
    and no plotly.js (a few KiB, not 4.8 MB), and the figures, which the notebook shows through
    plotly's own renderer; each chart's place says where it went."""
    figures = charts(report)
    places = {
        name: f"<p class=empty>{_e(why if fig is None else 'The chart ' + title + ' is below.')}</p>"
        for name, (fig, why) in figures.items()
        for title in [_chart_title(fig)]
    }
    page = (
        f"<div class=gpuwatch-report><style>{scoped_css('.gpuwatch-report')}</style>\n"
        f"{_body(report, places, findings)}\n</div>"
    )
    return page, [(name, fig) for name, (fig, _) in figures.items() if fig is not None]


def _chart_title(fig: Figure | None) -> str:
    if fig is None:
        return ""
    title = fig.layout.title.text
    return f'"{title}"' if title else ""
