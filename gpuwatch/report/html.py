"""One self-contained HTML file per run: plotly.js inlined (no CDN, opens offline), every string
from the user's code escaped."""

from __future__ import annotations

import html
from typing import Any

from gpuwatch import _format as fmt
from gpuwatch.report.collectives import comm_html, rank_line
from gpuwatch.report.hints import Hint, hints
from gpuwatch.report.text import (
    DIRECTION_NAMES,
    fallback_lines,
    gpu_busy,
    gpu_lines,
    gpu_source,
    internal_error_lines,
    simulated_lines,
    used_no_gpu,
)
from gpuwatch.report.timeview import time_charts
from profilers import DIRECTIONS, Report, Site

COLORS = {"h2d": "#1f77b4", "d2h": "#d62728", "d2d": "#2ca02c", "p2p": "#9467bd", "sync": "#ff7f0e"}
TOP = 15


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _p(text: object) -> str:
    """For plotly labels: plotly reads its own small HTML subset, and decodes &lt; &gt; &amp;
    but not &quot;, so only those three are escaped."""
    return html.escape(str(text), quote=False)


def _label(s: Site) -> str:
    source = s.source if len(s.source) <= 48 else s.source[:45] + "..."
    return _p(f"{s.file}:{s.line}  {source}")


def _figure_json(fig: Any) -> str:
    # NB: "<" as \u003c keeps any "</script>" in the data from ending the script block.
    return (
        str(fig.to_json()).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    )


def _bytes_per_line(r: Report) -> Any:
    import plotly.graph_objects as go

    sites = list(reversed(r.top_sites("bytes", TOP)))
    fig = go.Figure()
    for way in DIRECTIONS:
        fig.add_bar(
            name=f"{way} ({DIRECTION_NAMES[way]})",
            orientation="h",
            marker_color=COLORS[way],
            y=[_label(s) for s in sites],
            x=[s.copies(way).bytes for s in sites],
            customdata=[[s.copies(way).count, fmt.size(s.copies(way).bytes)] for s in sites],
            hovertemplate="%{y}<br>%{customdata[1]} in %{customdata[0]} copies<extra>"
            + way
            + "</extra>",
        )
    fig.update_layout(
        barmode="stack",
        title="Bytes moved per line",
        xaxis_title="bytes",
        height=max(260, 40 + 28 * len(sites)),
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
        yaxis={"automargin": True},
    )
    return fig


def _timeline(r: Report) -> Any:
    from plotly.subplots import make_subplots

    gpus = sorted({s["gpu"] for s in r.gpu_samples})
    if gpus:
        fig = make_subplots(
            rows=2,
            cols=1,
            shared_xaxes=True,
            vertical_spacing=0.08,
            row_heights=[0.55, 0.45],
            specs=[[{}], [{"secondary_y": True}]],
            subplot_titles=("Copies and syncs", "GPU utilisation and PCIe"),
        )
    else:
        fig = make_subplots(rows=1, cols=1, subplot_titles=("Copies and syncs",))
    events = r.timeline.get("events", [])
    for way in DIRECTIONS:
        pts = [e for e in events if e.get("direction") == way]
        if pts:
            fig.add_scatter(
                row=1,
                col=1,
                mode="markers",
                name=way,
                marker={"color": COLORS[way], "size": 6},
                x=[e["t"] for e in pts],
                y=[max(1, e["bytes"]) for e in pts],
                text=[_p(e["site"]) for e in pts],
                hovertemplate="%{text}<br>%{y} bytes at %{x:.3f} s<extra>" + way + "</extra>",
            )
    syncs = [e for e in events if e.get("sync")]
    if syncs:
        fig.add_scatter(
            row=1,
            col=1,
            mode="markers",
            name="sync",
            marker={"color": COLORS["sync"], "symbol": "x", "size": 8},
            x=[e["t"] for e in syncs],
            y=[1] * len(syncs),
            text=[_p(f"{e['site']} ({e['sync']})") for e in syncs],
            hovertemplate="%{text}<br>at %{x:.3f} s<extra>sync</extra>",
        )
    fig.update_yaxes(type="log", title_text="bytes (syncs at 1)", row=1, col=1)
    if not gpus:
        fig.update_xaxes(title_text="seconds since start", row=1, col=1)
        fig.update_layout(height=360, margin={"l": 10, "r": 10, "t": 40, "b": 40})
        return fig
    for gpu in gpus:
        pts = [s for s in r.gpu_samples if s["gpu"] == gpu]
        # GPM's SM activity (where the GPU has it) beside utilisation: what the SMs really did
        for key, what in (("gpu_util_pct", "util"), ("sm_active_pct", "SM active")):
            if key == "gpu_util_pct" or any(p.get(key) is not None for p in pts):
                x, y = [p["t"] for p in pts], [p.get(key) for p in pts]
                fig.add_scatter(row=2, col=1, mode="lines", name=f"GPU {gpu} {what} %", x=x, y=y)
        fig.add_scatter(
            row=2,
            col=1,
            secondary_y=True,
            mode="lines",
            line={"dash": "dot"},
            name=f"GPU {gpu} PCIe MB/s",
            x=[p["t"] for p in pts],
            y=[
                ((p.get("pcie_rx_bytes_per_s") or 0) + (p.get("pcie_tx_bytes_per_s") or 0)) / 1e6
                for p in pts
            ],
        )
    # NB: secondary_y=False: without it plotly sets the range on both axes of the row, and
    # the PCIe line (MB/s, far above 100) is drawn off the chart.
    fig.update_yaxes(title_text="util %", range=[0, 100], row=2, col=1, secondary_y=False)
    fig.update_yaxes(title_text="PCIe MB/s", row=2, col=1, secondary_y=True)
    fig.update_xaxes(title_text="seconds since start", row=2, col=1)
    fig.update_layout(height=560, margin={"l": 10, "r": 10, "t": 40, "b": 40})
    return fig


def _kernel_time(r: Report) -> Any:
    import plotly.graph_objects as go

    # NB: each op once, so the bars add up to the run's kernel time: a .backward() line's bar is
    # the whole backward it ran; a forward line's share of it is in its hover text and in the
    # table's "its backward" column, never stacked on its bar (that counted it twice).
    sites = sorted((s for s in r.sites if s.kernel_time_ms), key=lambda s: s.kernel_time_ms)
    sites = sites[-TOP:]
    fig = go.Figure()
    fig.add_bar(
        name="kernel time of the line's own ops",
        orientation="h",
        y=[_label(s) for s in sites],
        x=[s.kernel_time_ms for s in sites],
        marker_color="#17becf",
        customdata=[
            [s.ops, f"{s.backward_ms:.2f} ms" if s.backward_ops else "none"] for s in sites
        ],
        hovertemplate="%{y}<br>%{x:.2f} ms in %{customdata[0]} ops"
        "<br>its backward: %{customdata[1]} (part of the .backward() line's bar)<extra></extra>",
    )
    source = r.options.get("kernel_timing_source", "host")
    fig.update_layout(
        title=f"Kernel time per line, each op once ({_p(source)} timing); the .backward() "
        "line holds the whole backward",
        xaxis_title="ms",
        height=max(260, 60 + 28 * len(sites)),
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
        yaxis={"automargin": True},
        showlegend=False,
    )
    return fig


def _syncs(r: Report) -> Any:
    import plotly.graph_objects as go

    causes = sorted(r.totals.syncs.by_cause.items(), key=lambda kv: -kv[1])
    fig = go.Figure(
        go.Bar(x=[c for c, _ in causes], y=[n for _, n in causes], marker_color=COLORS["sync"])
    )
    fig.update_layout(
        title="Syncs by cause",
        yaxis_title="count",
        height=320,
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
    )
    return fig


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px;margin:0 0 4px} .meta{color:#555;margin-bottom:16px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{border:1px solid #ddd;border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:20px} .card span{color:#666;font-size:12px}
table{border-collapse:collapse;margin:8px 0 20px;font-size:13px}
th,td{border-bottom:1px solid #eee;padding:4px 10px;text-align:right;vertical-align:top}
th{background:#fafafa} td.l,th.l{text-align:left} code{font-family:ui-monospace,monospace;font-size:12px}
.empty{color:#666;font-style:italic} .hint{color:#8a4b00} .partial{background:#fff3cd;border:1px solid #e0c36c;padding:8px;border-radius:6px}
"""


def _charts(r: Report) -> dict[str, tuple[Any, str]]:
    """Each chart's figure, or the sentence that stands in for a chart with nothing to draw
    (empty axes read like a broken page)."""
    return {
        "timeline": (
            _timeline(r) if r.timeline.get("events") or r.gpu_samples else None,
            "No copy or sync happened: the timeline is empty.",
        ),
        "bytes": (
            _bytes_per_line(r) if r.totals.bytes_moved else None,
            "No bytes moved between host and GPUs.",
        ),
        "kernel": (
            _kernel_time(r) if r.totals.kernel_time_ms else None,
            "No kernel time was measured (--fake-cuda: the GPUs were simulated)."
            if r.options.get("fake_cuda")
            else "No kernel time was measured (kernel timing was off, or no op ran).",
        ),
        "syncs": (
            _syncs(r) if r.totals.syncs.count else None,
            "No syncs: the host never waited for a GPU.",
        ),
    }


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
        for line in simulated_lines(r) + fallback_lines(r) + internal_error_lines(r)
    )
    return (
        f"<h1>gpuwatch profile <code>{_e(' '.join(r.command))}</code></h1>\n"
        f"<div class=meta>{_e(f'{ranked} · ' if (ranked := rank_line(r)) else '')}"
        f"exit code {r.exit_code} · started {_e(fmt.local_time(r.started_at))} · "
        f"devices: {devices}</div>\n{partial}"
    )


def _cards(r: Report) -> str:
    t, source = r.totals, r.options.get("kernel_timing_source", "host")
    kernel = (fmt.duration_ms(t.kernel_time_ms), f"kernel time ({source})")
    if r.options.get("fake_cuda") or source == "off":
        why = "simulated GPUs" if r.options.get("fake_cuda") else "--no-kernel-timing"
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


def _hints(found: list[Hint]) -> str:
    rows = (
        "".join(
            f"<tr><td class=l><code>{_e(h.where)}</code></td><td class=l>{_e(h.message)}</td>"
            f"<td class=l>{_e(h.evidence)}</td></tr>"
            for h in found
        )
        or "<tr><td class=l colspan=3>No line copies or syncs often enough to flag.</td></tr>"
    )
    return (
        "<h2>Hints</h2>\n<table><tr><th class=l>line</th><th class=l>what to change</th>"
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
        why = str(r.options.get("gpu_stats", "no NVML")).rstrip(".?")
        gpu = f"<p>No GPU utilisation was recorded ({_e(why)}).</p>"
    return capped + gpu


def _top_lines(r: Report, found: list[Hint]) -> str:
    by_site: dict[tuple[str, int], list[str]] = {}
    for h in found:
        by_site.setdefault((h.site.file, h.site.line), []).append(h.message)
    top = sorted(
        r.sites, key=lambda s: (s.syncs.count, s.bytes_moved, s.kernel_time_ms), reverse=True
    )[:30]
    rows = "".join(
        f"<tr><td class=l><code>{_e(s.file)}:{s.line}</code><br><small>{_e(s.function)}</small></td>"
        f"<td class=l><code>{_e(s.source)}</code></td><td>{_e(fmt.size(s.bytes_moved))}</td>"
        f"<td>{s.syncs.count:,}</td><td>{_e(', '.join(f'{k} {v}' for k, v in s.syncs.by_cause.items()))}</td>"
        f"<td>{_e(fmt.duration_ms(s.kernel_time_ms))}</td><td>{f'{s.ops:,}' if r.counts_ops else '-'}</td>"
        f"<td>{_e(fmt.duration_ms(s.backward_ms)) if s.backward else '-'}</td>"
        f"<td class='l hint'>{'<br>'.join(_e(m) for m in by_site.get((s.file, s.line), []))}</td></tr>"
        for s in top
    )
    return (
        "<h2>Top lines</h2>\n<table><tr><th class=l>line</th><th class=l>source</th>"
        "<th>bytes</th><th>syncs</th><th class=l>causes</th><th>kernel time</th><th>ops</th>"
        "<th title=\"the time of the backward of this line's forward ops (also counted at the "
        '.backward() line)">its backward</th><th class=l>hints</th></tr>'
        f"{rows}</table>"
    )


def render_html(report: Report) -> str:
    """The whole page as a string: one small function per section, the figures' data inlined
    with plotly.js itself (the file opens offline)."""
    from plotly.offline import get_plotlyjs

    r = report
    charts = {**_charts(r), **time_charts(r)}
    places = {
        name: f'<div id="fig-{name}"></div>' if fig is not None else f"<p class=empty>{_e(why)}</p>"
        for name, (fig, why) in charts.items()
    }
    plots = "".join(
        f"(function () {{ var f = {_figure_json(fig)};\n"
        f"  Plotly.newPlot('fig-{name}', f.data, f.layout, {{displaylogo: false, responsive: true}}); }})();\n"
        for name, (fig, _) in charts.items()
        if fig is not None
    )
    found = hints(r)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpuwatch profile: {_e(" ".join(r.command) or "run")}</title>
<style>{CSS}</style>
<script>{get_plotlyjs()}</script>
</head><body>
{_header(r)}
{_cards(r)}{places["time"]}
{_copies(r)}
{comm_html(r)}
{_hints(found)}
{places["timeline"]}{_gpu_notes(r)}
{places["bytes"]}
{places["kernel"]}
{places["syncs"]}
{_top_lines(r, found)}
<script>
{plots}</script>
</body></html>
"""
