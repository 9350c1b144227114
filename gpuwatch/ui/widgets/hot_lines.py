"""The hottest user lines of the profiled script, updated in place, laid out for the width the
table has: the figures stay whole, the line is its file's short name, and the source is what gets
cut (never the numbers). Under a line whose copies or syncs a library made, a row for each of
the library frames that made the most (``↳ trainer.py:2502``, with its own figures): the user's
line is where to act, the library's where the cost is."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events
from textual.widgets import DataTable

from gpuwatch import _format as fmt

COLUMNS = ("line", "syncs", "bytes", "copies", "kernel", "its bwd", "ops", "source")
"""``its bwd``: the time of the backward of the line's forward ops (also in the .backward() line's
kernel time)."""

#: Figures in the order they are given up when the table is narrow, last first; the first
#: ``KEPT`` stay at any width (the source is cut before them).
FIGURES = ("syncs", "bytes", "kernel", "copies", "its bwd", "ops")
KEPT = 2
#: Widths of the figure columns (their usual longest value: "1527", "3.0 MiB", "972.9 ms").
WIDTHS = {"syncs": 6, "bytes": 9, "copies": 6, "kernel": 8, "its bwd": 8, "ops": 6}
#: The room the source keeps, when there is any to share, before a figure is given up.
MIN_SOURCE = 16
#: Less room than this and the source is not shown at all.
NO_SOURCE = 6
#: Cell padding DataTable adds on each side of every column.
PAD = 1
#: Library frames shown under a line (those with the most syncs, then copies: the snapshot's
#: order); the summary (s) has three, the JSON up to eight.
FRAMES_SHOWN = 2
#: What a library frame's row starts with, in the line column.
FRAME_MARK = "↳ "


def short_path(path: str, room: int) -> str:
    """``path`` when it fits in ``room``, else its last parts, else the end of its file name
    (``…walkthrough.py``): the line number beside it always stays whole."""
    if len(path) <= room:
        return path
    parts = path.split("/")
    for k in range(len(parts) - 1, 0, -1):
        tail = "…/" + "/".join(parts[-k:])
        if len(tail) <= room:
            return tail
    name = parts[-1]
    return name if len(name) <= room else "…" + name[len(name) - max(1, room - 1) :]


#: Figures that are times: left out where kernel time is not measured (rather than 0 µs).
TIMES = ("kernel", "its bwd")


def layout(width: int, line_width: int, timed: bool = True) -> tuple[list[str], int]:
    """The figure columns that fit ``width`` beside a ``line_width`` line column, and the room
    left for the source (0: no source column); no time columns unless ``timed``."""
    shown = [f for f in FIGURES if timed or f not in TIMES]
    while True:
        used = line_width + 2 * PAD + sum(WIDTHS[f] + 2 * PAD for f in shown)
        room = width - used - 2 * PAD
        if room >= MIN_SOURCE or len(shown) <= KEPT:
            return [f for f in COLUMNS if f in shown], room if room >= NO_SOURCE else 0
        shown.pop()


class HotLinesTable(DataTable[Text]):
    """Lines from a live snapshot, busiest first; the selected line stays selected."""

    def __init__(self, *, id: str | None = None, timed: bool = True) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.lines: list[dict[str, Any]] = []
        self.line_count = 0
        self.counting = "every_op"
        self.timed = timed
        """False where kernel time is not measured (--fake-cuda, --no-kernel-timing): the time
        columns are left out and the title says so, rather than 0 µs on every line."""
        self.shown_columns: list[str] = []
        """The columns laid out for the current width (for tests and the help)."""
        self._laid_out_for: tuple[int, int] | None = None
        self._row_lines: list[int] = []
        """The line each row shows (a library frame's row: the line it is under)."""
        self._row_keys: list[str] = []

    def on_mount(self) -> None:
        self.border_title = "Hottest lines"
        self._layout()

    def on_resize(self, event: events.Resize) -> None:
        self.show(self.lines, self.line_count, self.counting)

    def _line_width(self) -> int:
        # NB: the line column holds the short path: the whole relative path would take the room
        # the source needs (a 160-column terminal cut the source to about 25 characters). It
        # gets at most what the figures that always stay leave it.
        kept = sum(WIDTHS[f] + 2 * PAD for f in FIGURES[:KEPT])
        room = max(10, min(28, (self.size.width or 80) - 2 - 2 * PAD - kept))
        labels = [self._label(s, room) for s in self.lines]
        labels += [self._label(f, room, FRAME_MARK) for s in self.lines for f in _frames(s)]
        widest = max(map(len, labels), default=4)
        return max(4, min(room, widest))

    def _label(self, s: dict[str, Any], room: int, mark: str = "") -> str:
        path = short_path(s["file"], room - len(mark) - len(str(s["line"])) - 1)
        return f"{mark}{path}:{s['line']}"

    def _layout(self) -> None:
        width = self.size.width or 80
        line_width = self._line_width()
        if self._laid_out_for == (width, line_width):
            return
        self._laid_out_for = (width, line_width)
        figures, source = layout(width - 2, line_width, self.timed)  # room for a scrollbar
        self.shown_columns = ["line", *figures, *(["source"] if source else [])]
        self.clear(columns=True)
        self.add_column("line", key="line", width=line_width)
        for name in figures:
            self.add_column(name, key=name, width=WIDTHS[name])
        if source:
            self.add_column("source", key="source", width=source)

    def show(
        self, lines: list[dict[str, Any]], line_count: int, counting: str = "every_op"
    ) -> None:
        """The busiest lines; ``counting`` ``"copies"``: the run counts no ops (the fast path of
        --no-kernel-timing), and their column says so rather than 0."""
        counts_ops = counting == "every_op"
        selected, selected_row = self.selected_key, self._selected_row()
        self.lines, self.line_count, self.counting = lines, line_count, counting
        self._layout()
        self.clear()
        room = self._line_width()
        self._row_lines, self._row_keys = [], []
        for i, s in enumerate(lines):
            cells = {
                "line": Text(self._label(s, room), style="cyan"),
                **_figures(s["syncs"]["count"], _total(s, "bytes"), _total(s, "count")),
                "kernel": Text(fmt.duration_ms(s["kernel_time_ms"]), justify="right"),
                "its bwd": Text(
                    fmt.duration_ms(s["backward"]["kernel_time_ms"]) if s.get("backward") else "-",
                    justify="right",
                ),
                "ops": Text(f"{s['ops']:,}" if counts_ops else "-", justify="right"),
            }
            causes = ", ".join(f"{k} {v:,}" for k, v in s["syncs"]["by_cause"].items())
            cells["source"] = Text(
                s["source"] + (f"   [{causes}]" if causes else ""),
                no_wrap=True,
                overflow="ellipsis",
            )
            self._add(cells, _key(s), i)
            for f in _frames(s):
                self._add_frame(s, f, room, i)
        if selected_row in self._row_keys:  # the same row: a library frame's stays on it
            self.move_cursor(row=self._row_keys.index(selected_row), animate=False)
        elif selected in self._row_keys:  # its frame is gone: the line it was under
            self.move_cursor(row=self._row_keys.index(selected), animate=False)
        untimed = "" if self.timed else "; kernel time not measured"
        self.border_title = f"Hottest lines ({len(lines)} of {line_count}{untimed})"

    def _add(self, cells: dict[str, Text], key: str, line: int) -> None:
        self.add_row(*(cells[c] for c in self.shown_columns), key=key)
        self._row_lines.append(line)
        self._row_keys.append(key)

    def _selected_row(self) -> str | None:
        if not 0 <= self.cursor_row < len(self._row_keys):
            return None
        return self._row_keys[self.cursor_row]

    def _add_frame(self, line: dict[str, Any], f: dict[str, Any], room: int, i: int) -> None:
        """A row under ``line`` for a library frame that made some of its copies and syncs:
        its place (its whole path in the source column: the line column may cut it) and
        function, its own figures; no time or op columns (a frame has none)."""
        dim = Text("", justify="right")
        cells = {
            "line": Text(self._label(f, room, FRAME_MARK), style="dim cyan"),
            **_figures(f["syncs"]["count"], f["copies"]["bytes"], f["copies"]["count"], "dim"),
            "kernel": dim,
            "its bwd": dim,
            "ops": dim,
        }
        causes = ", ".join(f"{k} {v:,}" for k, v in f["syncs"]["by_cause"].items())
        cells["source"] = Text(
            f"in {f['function']} ({f['file']})" + (f"   [{causes}]" if causes else ""),
            style="dim",
            no_wrap=True,
            overflow="ellipsis",
        )
        self._add(cells, f"{_key(line)} {f['file']}:{f['line']}", i)

    @property
    def selected_key(self) -> str | None:
        """The user's line the cursor is on (on a library frame's row: the line it is under)."""
        if not self.lines or not 0 <= self.cursor_row < len(self._row_lines):
            return None
        return _key(self.lines[self._row_lines[self.cursor_row]])


def _key(s: dict[str, Any]) -> str:
    return f"{s['file']}:{s['line']}"


def _frames(s: dict[str, Any]) -> list[dict[str, Any]]:
    """The library frames shown under a line (a snapshot from before frames were kept: none)."""
    frames: list[dict[str, Any]] = s.get("library") or []
    return frames[:FRAMES_SHOWN]


def _total(s: dict[str, Any], figure: str) -> int:
    return sum(int(s[w][figure]) for w in ("h2d", "d2h", "d2d", "p2p"))


def _figures(syncs: int, nbytes: int, copies: int, style: str = "") -> dict[str, Text]:
    return {
        "syncs": Text(
            f"{syncs:,}",
            justify="right",
            style=" ".join(filter(None, (style, "yellow" * bool(syncs)))),
        ),
        "bytes": Text(fmt.size(nbytes), justify="right", style=style),
        "copies": Text(f"{copies:,}", justify="right", style=style),
    }
