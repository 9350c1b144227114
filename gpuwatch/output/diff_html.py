"""``gpuwatch diff --html``: one self-contained page (no script, no fetch): the runs, the totals
before and after, and every line that changed, with the diff's JSON embedded for tools."""

from __future__ import annotations

import html

from gpuwatch.analysis.diff_findings import DiffDoc, LineRow
from gpuwatch.output import diff_text
from profilers.finite import dumps_finite

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{padding:3px 10px;border-bottom:1px solid #ddd}
th{text-align:left;background:#f4f4f4}td.n{text-align:right;white-space:nowrap}
.down{color:#17803d}.up{color:#c0262d;font-weight:600}.same{color:#888}
code{font:12px ui-monospace,monospace}.was{color:#888;font-size:12px}
.new{background:#fff6dc}.gone{background:#eaf7ee}
"""


def _cell(name: str, before: float, after: float) -> str:
    if before == after:
        return f'<td class="n same">{html.escape(diff_text.amount(name, before))}</td>'
    cls = "down" if after < before else "up"
    text = f"{diff_text.amount(name, before)} → {diff_text.amount(name, after)}"
    return f'<td class="n {cls}">{html.escape(text)}</td>'


def _line_row(d: LineRow, shown: list[tuple[str, str]]) -> str:
    was = ""
    if d.match == "edited" and d.before_source is not None:
        was = f'<div class="was">was: <code>{html.escape(d.before_source)}</code></div>'
    elif d.match == "other_function" and d.before_function is not None:
        was = f'<div class="was">was in {html.escape(d.before_function)}</div>'
    cells = "".join(
        _cell(name, d.before.get(name, 0.0), d.after.get(name, 0.0)) for _, name in shown
    )
    return (
        f'<tr class="{diff_text.STATUS.get(d.status, "")}">'
        f"<td>{html.escape(diff_text.status_word(d))}</td>"
        f"<td><code>{html.escape(diff_text.where(d))}</code></td>{cells}"
        f"<td>{html.escape(d.function)}: <code>{html.escape(d.source)}</code>{was}</td></tr>"
        f"{_frame_rows(d, shown)}"
    )


def _frame_rows(d: LineRow, shown: list[tuple[str, str]]) -> str:
    """Rows under a line: each library frame whose copies or syncs changed."""
    frames, more = diff_text.frame_rows(d)
    rows = [
        '<tr class="frame"><td></td><td></td>'
        + "".join(
            _cell(name, f.before[name], f.after[name])
            if name in diff_text.FRAME_COLUMNS else "<td></td>"
            for _, name in shown
        )
        + f'<td class="was">{html.escape(diff_text.frame_words(f))}</td></tr>'
        for f in frames
    ]  # fmt: skip
    if more:
        rows.append(
            f'<tr class="frame"><td colspan="{len(shown) + 2}"></td><td class="was">'
            f"↳ {more} more library frames changed (in the JSON)</td></tr>"
        )
    return "".join(rows)


def render_html(diff: DiffDoc) -> str:
    """The page, as text."""
    unit = "per step" if diff.per_step else "for the whole run"
    runs = "".join(
        f"<tr><th>{label}</th><td><code>{html.escape(r.path)}</code></td>"
        f"<td><code>{html.escape(' '.join(r.command))}</code></td>"
        f'<td class="n">{r.steps if r.steps else "no"} steps</td>'
        f"<td>{'fake GPU' if r.fake_cuda else ''}</td></tr>"
        for label, r in (("before", diff.before), ("after", diff.after))
    )
    totals = []
    for name, label in diff_text.TOTAL_ROWS:
        b, a = diff.totals["before"].get(name, 0.0), diff.totals["after"].get(name, 0.0)
        if name in diff_text.ALWAYS or b or a:
            cls = "down" if a < b else "up" if a > b else "same"
            totals.append(
                f"<tr><td>{html.escape(label.strip())}</td>"
                f'<td class="n">{html.escape(diff_text.amount(name, b))}</td>'
                f'<td class="n">{html.escape(diff_text.amount(name, a))}</td>'
                f'<td class="n {cls}">{html.escape(diff_text.signed(name, diff.totals["delta"].get(name, 0.0)))}</td></tr>'
            )
    changed = diff.changed()
    shown = diff_text.columns(diff)
    heads = "".join(f"<th>{h}</th>" for h, _ in shown)
    rows = "".join(_line_row(d, shown) for d in changed) or (
        '<tr><td colspan="8">No line\'s copies, syncs or collectives changed.</td></tr>'
    )
    rest = diff_text.quiet_lines(diff, changed)
    # NB: "</" would end the script element early; JSON allows "<\/".
    data = dumps_finite(diff.doc).replace("</", "<\\/")  # JSON.parse: no NaN
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>gpuwatch diff</title><style>{STYLE}</style></head><body>"
        f"<h1>gpuwatch diff</h1><table>{runs}</table>"
        f"<p>Figures {unit}.</p>"
        f"<h2>Totals</h2><table><tr><th></th><th>before</th><th>after</th><th>change</th></tr>"
        f"{''.join(totals)}</table>"
        f"<h2>Lines that changed: {len(changed)} of {len(diff.lines)}</h2>"
        f"<table><tr><th></th><th>line</th>{heads}<th>source</th></tr>{rows}</table>"
        f"<p>{html.escape(rest)}</p>"
        f'<script type="application/json" id="gpuwatch-diff">{data}</script>'
        "</body></html>\n"
    )
