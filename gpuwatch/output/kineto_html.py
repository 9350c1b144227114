"""A trace's analysis as one self-contained HTML page (no script, no network): per rank the
run's verdict, each step's wall time as a bar split into busy and the idle causes, the idle
time by line, the top kernels, the copies, and the definitions the figures rest on."""

from __future__ import annotations

from html import escape

from gpuwatch import _format as fmt
from gpuwatch.output.kineto_text import ADVICE, _shows, run_line
from profilers.kineto.result import CAUSES, DEFINITIONS, DeviceTime, RankResult, TraceAnalysis

MAX_STEPS = 100
"""Step rows per rank (the first; the rest summed in one line): the page stays under 1 MB per
rank however many steps or kernels the trace holds (tables of the top lines and kernels)."""
COLOURS = {"busy": "#2e7d32", "input": "#f9a825", "sync": "#c62828", "copy": "#6a1b9a",
           "comm": "#1565c0", "launch": "#8d6e63", "dependency": "#00838f", "warmup": "#bdbdbd"}  # fmt: skip
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{padding:2px 8px;text-align:right}
td.l,th.l{text-align:left}tr:nth-child(even){background:#f4f4f4}
.bar{display:flex;width:360px;height:14px}.bar span{display:block;height:100%}
.key span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}
code{font-size:90%}dt{font-weight:bold}
"""


def _bar(d: DeviceTime) -> str:
    if d.wall_ms <= 0:
        return ""
    parts = [("busy", d.busy_ms)] + [(c, d.idle_by_cause_ms[c]) for c in CAUSES]
    spans = "".join(
        f'<span title="{k} {fmt.duration_ms(v)}" style="width:{100 * v / d.wall_ms:.2f}%;'
        f'background:{COLOURS[k]}"></span>'
        for k, v in parts
        if v > 0
    )
    return f'<div class="bar">{spans}</div>'


def _table(head: list[str], rows: list[list[str]], left: int = 1) -> str:
    th = "".join(
        f'<th class="{"l" if i < left else ""}">{escape(h)}</th>' for i, h in enumerate(head)
    )
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>' for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{th}</tr>{body}</table>"


def _code(text: str) -> str:
    return f"<code>{escape(text)}</code>"


def _rank(r: RankResult, top: int) -> str:
    out = [f"<h2>{escape(r.path)} (rank {r.rank})</h2>"]
    for d in r.run:
        out.append(f"<p><b>{escape(run_line(r, d))}</b></p>")
        if d.verdict in ADVICE:
            out.append(f"<p>What to try: {escape(ADVICE[d.verdict])}</p>")
    key = "".join(f'<span style="background:{c}"></span>{k}' for k, c in COLOURS.items())
    out.append(f'<h3>Steps</h3><div class="key">{key}</div>')
    nccl = any(_shows(d) for d in r.run)  # the verdict counts it: shown beside busy
    rows = []
    for s in r.steps[:MAX_STEPS]:
        for d in s.devices:
            alone = [f"{100 * d.comm_ms / d.wall_ms:.1f}%" if d.wall_ms > 0 else "-"]
            rows.append(
                [escape(s.name), str(d.device), fmt.duration_ms(s.wall_ms), _bar(d)]
                + [f"{d.shares_pct.get('busy', 0):.1f}%"]
                + (alone if nccl else [])
                + [f"{d.shares_pct.get(k, 0):.1f}%" for k in CAUSES]
                + [fmt.duration_ms(s.input_ms), escape(d.verdict)]
            )
    head = ["step", "GPU", "wall", "", "busy", *(["NCCL alone"] if nccl else []), *CAUSES]
    out.append(_table([*head, "loader", "verdict"], rows))
    if len(r.steps) > MAX_STEPS:
        more = r.steps[MAX_STEPS:]
        wall = fmt.duration_ms(sum(s.wall_ms for s in more))
        out.append(f"<p>... {len(more):,} more steps ({wall}): all of them in --json</p>")
    out.append("<h3>Idle time by cause and line</h3>")
    out.append(
        _table(
            ["cause", "idle", "where"],
            [
                [c.cause, fmt.duration_ms(c.idle_ms), f"<code>{escape(c.where.key())}</code>"]
                for c in r.lines[: top * 4]
            ],
        )
    )
    ms, code = fmt.duration_ms, _code
    kernels = [
        [code(k.name[:160]), str(k.device), f"{k.count:,}", ms(k.total_ms), ms(k.max_ms)]
        for k in r.kernels[: top * 4]
    ]
    out.append("<h3>Top kernels</h3>")
    out.append(_table(["kernel", "GPU", "count", "total", "longest"], kernels))
    copies = [
        [c.direction, c.memory or "not in trace", f"{c.count:,}", fmt.size(c.bytes), ms(c.gpu_ms)]
        + [code(c.where.key()) if c.where else "all"]
        for c in (*r.copies, *r.copy_lines[: top * 2])
    ]
    out.append("<h3>Copies</h3>")
    head = ["direction", "host memory", "count", "bytes", "GPU time", "where"]
    out.append(_table(head, copies, left=2))
    active = [
        [str(a.device), f"{a.start_ms:.3f}-{a.end_ms:.3f} ms"]
        + [f"{a.to_dict()[k]}%" for k in ("busy_pct", "idle_pct", "compute_pct")]
        for a in r.active
    ]
    out.append("<h3>On HTA's definitions</h3>")
    out.append(_table(["GPU", "window", "busy", "idle", "compute"], active))
    streams = [
        [str(s.device), str(s.stream), ms(s.host_wait_ms), ms(s.kernel_wait_ms), ms(s.other_ms)]
        for s in r.streams
    ]
    out.append(_table(["GPU", "stream", "host_wait", "kernel_wait", "other"], streams))
    out += [f"<p><i>note: {escape(n)}</i></p>" for n in r.notes]
    return "\n".join(out)


def render_html(analysis: TraceAnalysis, top: int = 5) -> str:
    ranks = "\n".join(_rank(r, top) for r in analysis.ranks)
    terms = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in DEFINITIONS.items())
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>gpuwatch: {escape(', '.join(analysis.paths))}</title><style>{STYLE}</style></head><body>"
        "<h1>gpuwatch report of a torch.profiler trace</h1>"
        "<p>Every figure is measured: read from the trace.</p>"
        f"{ranks}<h2>Definitions</h2><dl>{terms}</dl></body></html>\n"
    )
