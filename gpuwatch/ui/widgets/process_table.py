"""The table of processes on the GPUs: sortable (cycle with ``s``, reverse with ``r``) and
filterable by a case-insensitive substring of user, command, PID, type or job, or by the job
alone with ``job:TEXT`` (a SLURM job id, a pod, namespace or container, ``r0`` for rank 0)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from gpuwatch import _format as fmt
from gpuwatch.monitor.nvml.samples import ProcessSample


@dataclass(frozen=True)
class Column:
    title: str
    key: Callable[[ProcessSample], float | str]
    cell: Callable[[ProcessSample], str]
    right: bool = True


def _n(v: float | None) -> float:
    return -1.0 if v is None else float(v)


COLUMNS: tuple[Column, ...] = (
    Column("GPU", lambda p: p.gpu_index, lambda p: str(p.gpu_index)),
    Column("PID", lambda p: p.pid, lambda p: str(p.pid)),
    Column("USER", lambda p: p.user or "", lambda p: p.user or fmt.NA, right=False),
    Column("TYPE", lambda p: p.type, lambda p: p.type, right=False),
    Column("GPU MEM", lambda p: _n(p.gpu_memory_bytes), lambda p: fmt.size(p.gpu_memory_bytes)),
    Column("SM%", lambda p: _n(p.sm_util_pct), lambda p: fmt.pct(p.sm_util_pct)),
    Column("CPU%", lambda p: _n(p.cpu_pct), lambda p: fmt.pct(p.cpu_pct)),
    Column("HOST MEM", lambda p: _n(p.host_memory_bytes), lambda p: fmt.size(p.host_memory_bytes)),
    Column("JOB", lambda p: _job(p), lambda p: _job(p) or "-", right=False),
    Column(
        "COMMAND",
        lambda p: p.command or p.name or "",
        lambda p: p.command or p.name or fmt.NA,
        right=False,
    ),
)
#: The column sorted by at start: GPU memory, largest first, like nvitop.
DEFAULT_SORT = 4


#: Kept after every column's title: where the sorted column shows its arrow.
_ARROW_ROOM = " "


def _cell(column: int, text: str) -> Text:
    return Text(text, justify="right" if COLUMNS[column].right else "left")


def row_key(p: ProcessSample) -> str:
    return f"{p.gpu_index}:{p.pid}"


def _job(p: ProcessSample) -> str:
    return p.job.label if p.job is not None else ""


#: The filter's prefix that matches jobs only: ``job:4242`` is SLURM job 4242, not a pid.
JOB_FILTER = "job:"


def matches(p: ProcessSample, needle: str) -> bool:
    if not needle:
        return True
    needle = needle.lower()
    words = p.job.words() if p.job is not None else ()
    if needle.startswith(JOB_FILTER):
        # NB: a job filter matches a whole field (job 12 is not job 4312), a pod by prefix.
        want = needle.removeprefix(JOB_FILTER).strip()
        return any(w.lower() == want or w.lower().startswith(want + "-") for w in words)
    hay = (str(p.pid), p.user or "", p.command or p.name or "", p.type, *words)
    return any(needle in h.lower() for h in hay)


class ProcessTable(DataTable[Text]):
    """Processes of the latest snapshot, filtered and sorted; keeps the selection across ticks."""

    BINDINGS = [
        Binding("s", "cycle_sort", "Sort", tooltip="Sort by the next column"),
        Binding("r", "reverse_sort", "Reverse", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.sort_column = DEFAULT_SORT
        self.sort_reverse = True
        self.filter_text = ""
        self._processes: list[ProcessSample] = []
        self.problems: list[str] = []
        """Why processes may be missing (``GPU 0: no permission to list ...``)."""
        self._shown: dict[str, ProcessSample] = {}
        self._cells: dict[str, tuple[str, ...]] = {}
        """The text of each shown row's cells, top to bottom, as last drawn."""
        self._sorted_as: tuple[int, bool] | None = None
        self.rebuilds = 0
        """How many times the rows were laid out anew (rows came, went or moved)."""

    def on_mount(self) -> None:
        for i, col in enumerate(COLUMNS):
            # NB: the width of a column is measured from its label when it is added; the room
            # for the sort arrow is kept now, so that the arrow shows on whichever column.
            self.add_column(Text(col.title + _ARROW_ROOM), key=str(i))
        self._update_titles()

    def show(self, processes: Sequence[ProcessSample], problems: Sequence[str] = ()) -> None:
        """Replace the rows with ``processes`` (filtered and sorted), keeping the selected row;
        ``problems`` say why some processes may be missing (shown in the title)."""
        if list(processes) == self._processes and list(problems) == self.problems:
            return  # nothing new since the last sample: nothing to draw
        self._processes = list(processes)
        self.problems = list(problems)
        self._refill()

    @property
    def shown_processes(self) -> list[ProcessSample]:
        """The processes as shown, top to bottom."""
        return list(self._shown.values())

    @property
    def selected(self) -> ProcessSample | None:
        if not self._shown or self.cursor_row < 0 or self.cursor_row >= len(self._shown):
            return None
        return list(self._shown.values())[self.cursor_row]

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._refill()

    def _refill(self) -> None:
        """Shows the processes; a tick that changes some values redraws those cells only, and
        the rows are laid out anew only when processes come, go or change places."""
        col = COLUMNS[self.sort_column]
        rows = [p for p in self._processes if matches(p, self.filter_text)]
        rows.sort(key=col.key, reverse=self.sort_reverse)
        shown = {row_key(p): p for p in rows}
        cells = {key: tuple(c.cell(p) for c in COLUMNS) for key, p in shown.items()}
        # NB: the table caches its rendered header with its rows: a new sort relabels the
        # columns, so it lays the rows out again too.
        sorted_as = (self.sort_column, self.sort_reverse)
        if list(cells) == list(self._cells) and sorted_as == self._sorted_as:
            self._set_cells(
                (key, i, now)
                for key, new in cells.items()
                for i, (was, now) in enumerate(zip(self._cells[key], new, strict=True))
                if was != now
            )
            self._shown, self._cells = shown, cells
        else:
            selected = self.selected
            self._shown, self._cells, self._sorted_as = shown, cells, sorted_as
            self.clear()
            self.rebuilds += 1
            for key, texts in cells.items():
                self.add_row(*(_cell(i, t) for i, t in enumerate(texts)), key=key)
            if selected is not None and row_key(selected) in shown:
                self.move_cursor(row=list(shown).index(row_key(selected)), animate=False)
        self._update_titles()

    def _set_cells(self, changed: Iterable[tuple[str, int, str]]) -> None:
        """New text in some cells, repainting the rows they are in rather than the whole table.
        NB: ``DataTable.update_cell`` repaints every row; the table's cells and the counter its
        render caches are keyed on are set here directly where they are as expected, and a cell
        that grows wider than its column goes through ``update_cell`` to widen it."""
        quiet = isinstance(getattr(self, "_data", None), dict) and isinstance(
            getattr(self, "_update_count", None), int
        )
        rows: set[str] = set()
        for key, col, text in changed:
            column = self.columns.get(ColumnKey(str(col)))
            if not quiet or column is None or len(text) > column.content_width:
                self.update_cell(key, str(col), _cell(col, text), update_width=True)
            else:
                self._data[RowKey(key)][ColumnKey(str(col))] = _cell(col, text)
                rows.add(key)
        if rows:
            self._update_count += 1
            for key in rows:
                self.refresh_row(self.get_row_index(key))

    def sort_by(self, column: int, reverse: bool | None = None) -> None:
        if reverse is None:
            # A new column starts with its most useful order: big numbers first, text A-Z.
            reverse = COLUMNS[column].right if column != self.sort_column else self.sort_reverse
        self.sort_column, self.sort_reverse = column, reverse
        self._refill()

    def action_cycle_sort(self) -> None:
        self.sort_by((self.sort_column + 1) % len(COLUMNS))

    def action_reverse_sort(self) -> None:
        self.sort_by(self.sort_column, not self.sort_reverse)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        if event.column_index == self.sort_column:
            self.action_reverse_sort()
        else:
            self.sort_by(event.column_index)

    def _update_titles(self) -> None:
        relabelled = False
        for i, col in enumerate(COLUMNS):
            arrow = ("▼" if self.sort_reverse else "▲") if i == self.sort_column else ""
            column = self.columns.get(str(i))  # type: ignore[call-overload]
            label = Text(col.title + (arrow or _ARROW_ROOM), style="bold" if arrow else "")
            if column is not None and column.label != label:
                column.label = label
                relabelled = True
        shown, total = len(self._shown), len(self._processes)
        title = f"Processes ({shown} of {total})" if self.filter_text else f"Processes ({total})"
        if self.filter_text:
            title += f"  filter: {self.filter_text!r}"
        if self.problems:
            title += "  · " + "; ".join(self.problems)
        if title != self.border_title:
            self.border_title = title
        if relabelled:
            self.refresh()
