"""Collectives and ranks in the summary and the HTML: what each rank sent, per op and per line,
and, in a report merged from ranks, the spread of each line's time across them (stragglers)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table

from gpuwatch import _format as fmt
from profilers import Line, Report
from profilers.merge import Spread


def rank_line(r: Report) -> str | None:
    """``rank 1 of 4`` for one rank's report, ``ranks 0, 1 of 2 merged`` for a merged one."""
    if r.ranks is not None:
        line = (
            f"ranks {', '.join(map(str, r.ranks))} of {r.world_size} merged: counts are all "
            "ranks' together, per-step figures per rank"
        )
        if r.missing_ranks:
            line += f"; no report from rank(s) {', '.join(map(str, r.missing_ranks))}"
        return line
    if r.rank is not None:
        return f"rank {r.rank} of {r.world_size}"
    return None


def _per_op_rows(r: Report) -> list[tuple[str, str, str]]:
    return [(op, f"{e.count:,}", fmt.size(e.bytes)) for op, e in r.totals.comm.by_op.items()]


def _by_comm_bytes(r: Report, top: int) -> list[tuple[Line, str]]:
    lines = sorted((s for s in r.lines if s.comm.count), key=lambda s: -s.comm.bytes)[:top]
    return [(s, ", ".join(f"{op} {e.count:,}" for op, e in s.comm.by_op.items())) for s in lines]


def comm_text(r: Report, top: int) -> list[RenderableType]:
    """The summary's collectives: by op, the lines that sent most, the spread across ranks."""
    c = r.totals.comm
    if not c.count and not c.wait_ms:
        return []
    t = Table(
        title=f"Collectives: {c.count:,}, {fmt.size(c.bytes)} sent"
        + (" (all ranks)" if r.ranks is not None else "")
        + f", host waited {fmt.duration_ms(c.wait_ms)}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        min_width=64,
    )
    for col in ("op", "count", "bytes"):
        t.add_column(col, justify="left" if col == "op" else "right")
    for row in _per_op_rows(r):
        t.add_row(*row)
    parts: list[RenderableType] = [t]
    lines = _by_comm_bytes(r, top)
    if lines:
        per_line = Table(
            title="Top lines by collective bytes",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            expand=True,
        )
        # NB: the line is the point of the table: it keeps its whole width, the ops may wrap,
        # and the source is what gives way.
        where = [f"{s.file}:{s.line}" for s, _ in lines]
        per_line.add_column("line", no_wrap=True, min_width=max(map(len, where)))
        per_line.add_column("collectives", min_width=12)
        for col in ("bytes", "host wait"):
            per_line.add_column(col, justify="right", no_wrap=True)
        per_line.add_column("source", no_wrap=True, overflow="ellipsis", ratio=1)
        for w, (s, ops) in zip(where, lines, strict=True):
            per_line.add_row(
                escape(w),
                escape(ops),
                fmt.size(s.comm.bytes),
                fmt.duration_ms(s.comm.wait_ms),
                escape((s.source or s.function)[:60]),
            )
        parts.append(per_line)
    return parts


def spread_text(found: Sequence[Spread], top: int) -> list[RenderableType]:
    """Per line, the slowest rank and how far behind the median it is (``found``: slowest first)."""
    found = found[:top]
    if not found:
        return []
    t = Table(
        title="Ranks: the slowest rank per line (time = ops + host wait on collectives)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        expand=True,
    )
    where = [f"{sp.line.file}:{sp.line.line}" for sp in found]
    t.add_column("line", no_wrap=True, min_width=max(map(len, where)))
    for col in ("slowest", "its time", "median", "behind"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("source", no_wrap=True, overflow="ellipsis", ratio=1)
    for w, sp in zip(where, found, strict=True):
        t.add_row(
            escape(w),
            f"rank {sp.slowest_rank}",
            fmt.duration_ms(sp.slowest_ms),
            fmt.duration_ms(sp.median_ms),
            f"+{sp.behind_pct:.0f}%",
            escape((sp.line.source or sp.line.function)[:50]),
        )
    return [t]


def summary_parts(r: Report, top: int, found: Sequence[Spread]) -> RenderableType | None:
    parts = comm_text(r, top) + spread_text(found, top)
    return Group(*parts) if parts else None


def _e(x: object) -> str:
    return html.escape(str(x))


def comm_html(r: Report, spread: Sequence[Spread]) -> str:
    """The HTML's collectives and rank-spread tables ('' when there are none)."""
    out = []
    c = r.totals.comm
    if c.count or c.wait_ms:
        rows = "".join(
            f"<tr><td class=l>{_e(a)}</td><td>{b}</td><td>{_e(s)}</td></tr>"
            for a, b, s in _per_op_rows(r)
        )
        out.append(
            f"<h2>Collectives</h2>\n<p>{c.count:,} collectives, {_e(fmt.size(c.bytes))} sent, "
            f"the host waited {_e(fmt.duration_ms(c.wait_ms))} on them.</p>\n"
            f"<table><tr><th class=l>op</th><th>count</th><th>bytes</th></tr>{rows}</table>"
        )
    lines = _by_comm_bytes(r, 30)
    if lines:
        rows = "".join(
            f"<tr><td class=l><code>{_e(s.file)}:{s.line}</code></td>"
            f"<td class=l>{_e(ops)}</td>"
            f"<td>{_e(fmt.size(s.comm.bytes))}</td><td>{_e(fmt.duration_ms(s.comm.wait_ms))}</td>"
            f"<td class=l><code>{_e((s.source or s.function)[:80])}</code></td></tr>"
            for s, ops in lines
        )
        out.append(
            "<h3>Collectives per line</h3>\n<table><tr><th class=l>line</th>"
            "<th class=l>collectives</th><th>bytes</th><th>host wait</th>"
            f"<th class=l>source</th></tr>{rows}</table>"
        )
    found = spread[:10]
    if found:
        rows = "".join(
            f"<tr><td class=l><code>{_e(sp.line.file)}:{sp.line.line}</code></td>"
            f"<td>rank {_e(sp.slowest_rank)}</td><td>{_e(fmt.duration_ms(sp.slowest_ms))}</td>"
            f"<td>{_e(fmt.duration_ms(sp.median_ms))}</td><td>+{sp.behind_pct:.0f}%</td>"
            f"<td class=l><code>{_e(sp.line.source[:80])}</code></td></tr>"
            for sp in found
        )
        out.append(
            "<h2>Ranks: the slowest rank per line</h2>\n<table><tr><th class=l>line</th>"
            "<th>slowest</th><th>its time</th><th>median</th><th>behind</th>"
            f"<th class=l>source</th></tr>{rows}</table>"
        )
    return "\n".join(out)
