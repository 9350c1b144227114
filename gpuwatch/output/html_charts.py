"""The HTML report's charts (plotly figures), each built from a report alone; the page around
them is html.py's, and the notebook shows the same figures through plotly's own renderer."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from gpuwatch import _format as fmt
from gpuwatch.output.memory import memory_charts
from gpuwatch.output.text import DIRECTION_NAMES
from gpuwatch.output.timeview import time_charts
from profilers import DIRECTIONS, Line, Report

if TYPE_CHECKING:
    from plotly.graph_objects import Figure

COLORS = {"h2d": "#1f77b4", "d2h": "#d62728", "d2d": "#2ca02c", "p2p": "#9467bd", "sync": "#ff7f0e"}
TOP = 15
MARGIN = {"l": 10, "r": 10, "t": 40, "b": 40}


def _p(text: object) -> str:
    """For plotly labels: plotly reads its own small HTML subset, and decodes &lt; &gt; &amp;
    but not &quot;, so only those three are escaped."""
    return html.escape(str(text), quote=False)


def _label(s: Line) -> str:
    source = s.source if len(s.source) <= 48 else s.source[:45] + "..."
    return _p(f"{s.file}:{s.line}  {source}")


def figure_json(fig: Figure) -> str:
    # NB: "<" as \u003c keeps any "</script>" in the data from ending the script block.
    return (
        str(fig.to_json()).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    )


def _bytes_per_line(r: Report) -> Figure:
    import plotly.graph_objects as go

    lines = list(reversed(r.top_lines("bytes", TOP)))
    fig = go.Figure()
    for way in DIRECTIONS:
        fig.add_bar(
            name=f"{way} ({DIRECTION_NAMES[way]})",
            orientation="h",
            marker_color=COLORS[way],
            y=[_label(s) for s in lines],
            x=[s.copies(way).bytes for s in lines],
            customdata=[[s.copies(way).count, fmt.size(s.copies(way).bytes)] for s in lines],
            hovertemplate="%{y}<br>%{customdata[1]} in %{customdata[0]} copies<extra>"
            + way
            + "</extra>",
        )
    fig.update_layout(
        barmode="stack",
        title="Bytes moved per line (log scale)",
        # NB: logarithmic: one large line (a dataset moved once) left every other bar invisible
        # on a linear axis; on this one each line that moved a byte shows.
        xaxis={"type": "log", "title": {"text": "bytes"}},
        height=max(260, 40 + 28 * len(lines)),
        margin=MARGIN,
        yaxis={"automargin": True},
    )
    return fig


def _timeline(r: Report) -> Figure:
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
        fig.update_layout(height=360, margin=MARGIN)
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
    fig.update_layout(height=560, margin=MARGIN)
    return fig


def _kernel_time(r: Report) -> Figure:
    import plotly.graph_objects as go

    # NB: each op once, so the bars add up to the run's kernel time: a .backward() line's bar is
    # the whole backward it ran; a forward line's share of it is in its hover text and in the
    # table's "its backward" column, never stacked on its bar (that counted it twice).
    lines = sorted((s for s in r.lines if s.kernel_time_ms), key=lambda s: s.kernel_time_ms)
    lines = lines[-TOP:]
    fig = go.Figure()
    fig.add_bar(
        name="kernel time of the line's own ops",
        orientation="h",
        y=[_label(s) for s in lines],
        x=[s.kernel_time_ms for s in lines],
        marker_color="#17becf",
        customdata=[
            [s.ops, f"{s.backward_ms:.2f} ms" if s.backward_ops else "none"] for s in lines
        ],
        hovertemplate="%{y}<br>%{x:.2f} ms in %{customdata[0]} ops"
        "<br>its backward: %{customdata[1]} (part of the .backward() line's bar)<extra></extra>",
    )
    source = r.options.timing_source
    fig.update_layout(
        title=f"Kernel time per line, each op once ({_p(source)} timing); the .backward() "
        "line holds the whole backward",
        xaxis_title="ms",
        height=max(260, 60 + 28 * len(lines)),
        margin=MARGIN,
        yaxis={"automargin": True},
        showlegend=False,
    )
    return fig


def _syncs(r: Report) -> Figure:
    import plotly.graph_objects as go

    causes = sorted(r.totals.syncs.by_cause.items(), key=lambda kv: -kv[1])
    fig = go.Figure(
        go.Bar(x=[c for c, _ in causes], y=[n for _, n in causes], marker_color=COLORS["sync"])
    )
    fig.update_layout(title="Syncs by cause", yaxis_title="count", height=320, margin=MARGIN)
    return fig


def charts(r: Report) -> dict[str, tuple[Figure | None, str]]:
    """Each chart's figure, or the sentence in place of an empty one (empty axes look broken)."""
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
            if r.options.fake_cuda
            else "No kernel time was measured (kernel timing was off, or no op ran).",
        ),
        "syncs": (
            _syncs(r) if r.totals.syncs.count else None,
            "No syncs: the host never waited for a GPU.",
        ),
        **time_charts(r),  # "time": a stacked bar per step (gpuwatch/output/timeview.py)
        **memory_charts(r),  # "memory": GPU bytes per line (gpuwatch/output/memory.py)
    }
