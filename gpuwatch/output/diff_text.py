"""``gpuwatch diff`` in the terminal (rich): the runs, the totals before and after, then each
line that changed, matched across edits (gpuwatch/analysis/diff.py)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TextIO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuwatch import _format as fmt
from gpuwatch.analysis.diff_findings import DiffDoc, FrameRow, LineRow, Side
from gpuwatch.output.whatif import span_ms
from profilers.budgets import fmt as count
from profilers.finite import number
from profilers.names import CAUSES

#: Total rows: (measure, label); a row shows when either run has any of it (syncs, copies and
#: bytes always do).
TOTAL_ROWS = (
    ("syncs", "syncs"),
    *[(f"syncs.{c}", f"  {c}") for c in CAUSES],
    ("copies", "copies"),
    ("bytes", "bytes copied"),
    ("h2d", "  host→GPU"),
    ("h2d.pageable", "    from pageable memory"),
    ("d2h", "  GPU→host"),
    ("d2d", "  in one GPU"),
    ("p2p", "  GPU→GPU"),
    ("comm", "collectives"),
    ("comm.bytes", "  bytes"),
    ("kernel_ms", "kernel time"),
    ("ops", "ops"),
)
ALWAYS = {"syncs", "copies", "bytes"}

#: Line columns: (header, measure).
LINE_COLUMNS = (
    ("syncs", "syncs"),
    ("copies", "copies"),
    ("bytes", "bytes"),
    ("pageable", "h2d.pageable"),
    ("comm", "comm"),
    ("kernel", "kernel_ms"),
)

STATUS = {"appeared": "new", "disappeared": "gone"}

#: Library frames shown under a changed line (the JSON has every one).
FRAMES_SHOWN = 3
#: A frame's figures, by the line column they sit under.
FRAME_COLUMNS = {"syncs": "syncs", "copies": "copies", "bytes": "bytes"}


def columns(diff: DiffDoc) -> list[tuple[str, str]]:
    """The line columns worth showing: collectives and kernel time only where a run has them."""
    keep = {
        n: any(diff.totals[s].get(n) for s in ("before", "after")) for n in ("comm", "kernel_ms")
    }
    return [(head, name) for head, name in LINE_COLUMNS if keep.get(name, True)]


def quiet_lines(diff: DiffDoc, changed: list[LineRow]) -> str:
    """What the table leaves out: lines that came or went with no copy, sync or collective."""
    shown = {id(d) for d in changed}
    came = sum(1 for d in diff.lines if d.status == "appeared" and id(d) not in shown)
    went = sum(1 for d in diff.lines if d.status == "disappeared" and id(d) not in shown)
    if not (came or went):
        return ""
    return (
        f"{came} line{'s' if came != 1 else ''} appeared and {went} disappeared with no copy, "
        "sync or collective (in the JSON)"
    )


def amount(name: str, value: float) -> str:
    if name.endswith("bytes"):
        return fmt.size(value)
    if name == "kernel_ms":
        return fmt.duration_ms(value)
    return count(value)


def change(name: str, before: float, after: float) -> Text:
    """``6.20 → 0.09`` (green when it fell, red when it grew), or the one value when equal."""
    if before == after:
        return Text(amount(name, before), style="dim")
    style = "green" if after < before else "red"
    return Text(f"{amount(name, before)} → {amount(name, after)}", style=style)


def signed(name: str, delta: float) -> str:
    if not delta:
        return "="
    return ("+" if delta > 0 else "-") + amount(name, abs(delta))


def run_line(label: str, run: Side) -> Text:
    cmd = " ".join(run.command) or "(no command)"
    steps = run.steps
    bits = [f"{steps:,} steps" if steps else "no steps", fmt.duration_ms(run.duration_s * 1e3)]
    if run.fake_cuda:
        bits.append("fake GPU")
    if run.partial:
        bits.append("partial")
    where = f"{run.path}: " if run.path else ""
    return Text(f"{label} {where}{cmd} ({', '.join(bits)})")


def where(d: LineRow) -> str:
    text = f"{d.file}:{d.line}"
    if None not in (d.before_line, d.after_line) and d.before_line != d.after_line:
        text += f" (was {d.before_line})"
    return text


def status_word(d: LineRow) -> str:
    match = {"same": "", "other_function": "moved"}.get(d.match or "", d.match or "")
    return STATUS.get(d.status, match)


def status(d: LineRow) -> Text:
    word = status_word(d)
    style = "dim" if d.status == "matched" else "green" if word == "gone" else "yellow"
    return Text(word, style=style)


def source(d: LineRow) -> Text:
    text = Text(f"{d.function}: ", style="dim")
    text.append(d.source)
    if d.match in ("edited", "other_function") and d.status == "matched":
        was = d.before_source if d.match == "edited" else f"in {d.before_function}"
        text.append(f"\nwas: {was}", style="dim")
    return text


def frame_rows(d: LineRow) -> tuple[list[FrameRow], int]:
    """The changed library frames shown under a line (at most FRAMES_SHOWN), and how many more."""
    frames = d.changed_frames()
    return frames[:FRAMES_SHOWN], max(0, len(frames) - FRAMES_SHOWN)


def frame_words(f: FrameRow) -> str:
    """``made in transformers/trainer.py:2410 _inner_training_loop`` (``, gone``: it made no
    copy or sync after)."""
    state = {"appeared": ", new", "disappeared": ", gone"}.get(f.status, "")
    return f"↳ made in {f.label}{state}"


def render(diff: DiffDoc, top: int = 20) -> RenderableType:
    unit = "per step" if diff.per_step else "whole run"
    parts: list[RenderableType] = [
        run_line("before:", diff.before),
        run_line("after: ", diff.after),
        Text(
            "figures per step (both runs counted steps)"
            if diff.per_step
            else "figures for the whole run (per step needs steps in both runs)",
            style="italic",
        ),
    ]
    verdicts = time_line(diff)
    if verdicts is not None:
        parts.append(verdicts)
    totals = Table(title=f"Totals ({unit})", box=box.SIMPLE, title_justify="left")
    totals.add_column("")
    for head in ("before", "after", "change"):
        totals.add_column(head, justify="right")
    for name, label in TOTAL_ROWS:
        b, a = diff.totals["before"].get(name, 0.0), diff.totals["after"].get(name, 0.0)
        if name in ALWAYS or b or a:
            style = "green" if a < b else "red" if a > b else "dim"
            totals.add_row(
                label,
                amount(name, b),
                amount(name, a),
                Text(signed(name, diff.totals["delta"].get(name, 0.0)), style=style),
            )
    parts.append(totals)
    changed = diff.changed()
    shown = changed[:top]
    title = f"Lines that changed ({unit}): {len(changed)} of {len(diff.lines)}"
    if len(shown) < len(changed):
        title += f", the first {len(shown)} (--top N for more)"
    lines = Table(title=title, box=box.SIMPLE, title_justify="left")
    lines.add_column("")
    lines.add_column("line", no_wrap=True)
    shown_columns = columns(diff)
    for head, _ in shown_columns:
        lines.add_column(head, justify="right")
    timed = diff.before.time is not None or diff.after.time is not None
    if timed:
        lines.add_column("time", justify="right")
    lines.add_column("source", overflow="fold", ratio=1)
    for d in shown:
        cells = [
            change(name, d.before.get(name, 0.0), d.after.get(name, 0.0))
            for _, name in shown_columns
        ]
        if timed:
            cells.append(line_time(d))
        lines.add_row(status(d), where(d), *cells, source(d))
        _add_frames(lines, d, shown_columns, timed)
    parts.append(lines if shown else Text("No line's copies, syncs or collectives changed."))
    rest = quiet_lines(diff, changed)
    if rest:
        parts.append(Text(rest, style="dim"))
    return Group(*parts)


def _add_frames(table: Table, d: LineRow, shown: list[tuple[str, str]], timed: bool) -> None:
    """Rows under a changed line: each library frame whose copies or syncs changed, its
    figures under the line's columns (blank where a frame holds no such figure)."""
    frames, more = frame_rows(d)
    for f in frames:
        cells: list[Text | str] = [
            change(name, f.before[name], f.after[name]) if name in FRAME_COLUMNS else ""
            for _, name in shown
        ]
        if timed:
            cells.append("")
        table.add_row("", "", *cells, Text(frame_words(f), style="dim"))
    if more:
        table.add_row(
            "",
            "",
            *[""] * (len(shown) + timed),
            Text(f"↳ {more} more library frames changed (in the JSON)", style="dim"),
        )


def time_line(diff: DiffDoc) -> Text | None:
    """``where the time goes: launch-bound, 12.0 ms per step -> input-bound, 8.1 ms per step``
    (measured, as each report says), or None when neither run measured it."""
    sides = [diff.before.time, diff.after.time]
    if sides == [None, None]:
        return None

    def said(t: Mapping[str, object] | None) -> str:
        if t is None:
            return "not measured"
        unit = "per step" if t["per_step"] else "in all"
        ms = fmt.duration_ms(_ms(t, "ms"))
        if t.get("low_ms") is not None and t.get("high_ms") is not None:
            ms += f" ({_span(t)})"
        return f"{t['verdict']}, {ms} {unit}"

    where = {t["measured_on"] for t in sides if t is not None}
    named = sorted({str(t.get("predicted_for")) for t in sides if t and t.get("predicted_for")})
    if where == {"predicted"}:
        on = f"PREDICTED for {', '.join(named)}"
    elif "predicted" in where:
        on = f"measured on one side, PREDICTED for {', '.join(named)} on the other"
    else:
        on = "measured on the GPU" if where == {"gpu"} else "measured on the host"
    over = {t.get("over") for t in sides if t is not None and t["per_step"]}
    if over == {"steps after the first"}:
        on += ", over the steps after the first"
    text = f"where the time goes ({on}): {said(sides[0])} → {said(sides[1])}"
    b, a = sides
    if b and a and all(t.get("low_ms") is not None for t in (b, a)):
        if _overlap(b, a):
            text += (
                "; cannot rank the two: their predicted ranges overlap (the host's spread and "
                "the GPU model's error are wider than the difference)"
            )
        text += _parts_said(b, a)
    return Text(text)


def _ms(d: Mapping[str, object], key: str) -> float:
    return float(number(d[key]))


def _overlap(b: Mapping[str, object], a: Mapping[str, object]) -> bool:
    return _ms(b, "low_ms") <= _ms(a, "high_ms") and _ms(a, "low_ms") <= _ms(b, "high_ms")


def _span(d: Mapping[str, object]) -> str:
    return span_ms(_ms(d, "low_ms"), _ms(d, "high_ms"))


def _parts_said(b: Mapping[str, object], a: Mapping[str, object]) -> str:
    """Two predictions' parts apart: the GPU model's (what tells two GPUs apart), ranked or
    not by their ranges, and the host's, measured on the CPU each run had."""
    out = ""
    for key, what in (("gpu_part", "the GPU model's part"), ("host_part", "the host's part")):
        p, q = b.get(key), a.get(key)
        if not (isinstance(p, dict) and isinstance(q, dict)):
            continue

        def one(d: Mapping[str, object]) -> str:
            return f"{fmt.duration_ms(_ms(d, 'ms'))} ({_span(d)})"

        verdict = "cannot rank" if _overlap(p, q) else "ranked"
        where = ", measured on the CPU that ran each" if key == "host_part" else ""
        out += f"; {what}{where}: {one(p)} → {one(q)} ({verdict})"
    return out


def line_time(d: LineRow) -> Text:
    """The line's time before and after (``-`` where not measured)."""
    b, a = d.time_ms.get("before"), d.time_ms.get("after")

    def ms(v: float | None) -> str:
        return "-" if v is None else fmt.duration_ms(v)

    style = "dim" if a is None or b is None or a == b else "green" if a < b else "red"
    return Text(f"{ms(b)} → {ms(a)}", style=style)


def print_diff(diff: DiffDoc, top: int, file: TextIO | None = None) -> None:
    out = file if file is not None else sys.stdout
    console = Console(file=out, width=None if out.isatty() else 160, highlight=False)
    console.print(render(diff, top))
