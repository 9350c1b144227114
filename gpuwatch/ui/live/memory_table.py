"""GPU memory by line in the live view: the lines whose tensors hold the most GPU memory now
(from the snapshot's ``memory``: profilers/memory/section.py ``live_memory``), and each GPU's
bytes now and peak so far, in words short enough for a table's border."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events
from textual.widgets import DataTable

from gpuwatch import _format as fmt
from gpuwatch.ui.widgets.hot_lines import NO_SOURCE, PAD, short_path

#: Widths of the figure columns ("160.0 MiB").
FIGURE_WIDTH = 9

NOT_TRACKED = (
    "GPU memory per line: not tracked (profile with --memory; on by itself with --fake-cuda)"
)


def _gpu_size(nbytes: int) -> str:
    """A GPU's size as people name it (80 GiB, 24 GiB), not 80.0 GiB."""
    for unit, name in ((1024**3, "GiB"), (1024**2, "MiB")):
        if nbytes >= unit:
            return f"{nbytes / unit:.4g} {name}"
    return fmt.size(nbytes)


def memory_words(memory: dict[str, Any], room: int) -> str:
    """Each GPU's bytes now and peak so far in at most ``room`` characters when it can (the
    longest wording that fits; ``""`` when memory is not tracked): ``GPU memory 1.2 GiB now,
    peak 2.0 GiB of 80 GiB (predicted)``, down to ``1.2 GiB, peak 2.0 GiB``."""
    devices = memory.get("devices") or []
    if not memory.get("tracked") or not devices:
        return ""
    predicted = " (predicted)" if memory.get("source") == "simulated" else ""
    if len(devices) == 1:
        d = devices[0]
        now, peak = fmt.size(d["live_bytes"]), fmt.size(d["peak_bytes"])
        cap = d.get("capacity_bytes")
        of = f" of {_gpu_size(cap)}" if cap else ""
        choices = [
            f"GPU memory {now} now, peak {peak}{of}{predicted}",
            f"GPU memory {now} now, peak {peak}{of}",
            f"GPU {now} now, peak {peak}",
            f"{now}, peak {peak}",
        ]
    else:
        each = ", ".join(
            f"{d['device']} {fmt.size(d['live_bytes'])} ({fmt.size(d['peak_bytes'])})"
            for d in devices
        )
        choices = [f"GPU memory now (peak): {each}{predicted}", f"now (peak): {each}", each]
    return next((c for c in choices if len(c) <= room), choices[-1])


class MemoryLinesTable(DataTable[Text]):
    """The lines holding the most GPU memory now, most first: bytes now, the line's most."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.memory: dict[str, Any] = {}
        self.shown_columns: list[str] = []
        """The columns laid out for the current width (for tests)."""
        self._laid_out_for: tuple[int, int] | None = None

    def on_mount(self) -> None:
        self.border_title = "GPU memory by line"
        self._layout()

    def on_resize(self, event: events.Resize) -> None:
        self.show(self.memory)

    def _line_width(self) -> int:
        room = max(10, min(28, (self.size.width or 80) - 2 - 4 * PAD - 2 * FIGURE_WIDTH))
        lines = self.memory.get("lines") or []
        widest = max((len(self._label(r, room)) for r in lines), default=4)
        return max(4, min(room, widest))

    @staticmethod
    def _label(r: dict[str, Any], room: int) -> str:
        return f"{short_path(r['file'], room - len(str(r['line'])) - 1)}:{r['line']}"

    def _layout(self) -> None:
        width = (self.size.width or 80) - 2  # room for a scrollbar
        line_width = self._line_width()
        if self._laid_out_for == (width, line_width):
            return
        self._laid_out_for = (width, line_width)
        source = width - line_width - 2 * PAD - 2 * (FIGURE_WIDTH + 2 * PAD) - 2 * PAD
        self.clear(columns=True)
        self.add_column("line", key="line", width=line_width)
        self.add_column("now", key="now", width=FIGURE_WIDTH)
        self.add_column("its most", key="most", width=FIGURE_WIDTH)
        self.shown_columns = ["line", "now", "most"]
        if source >= NO_SOURCE:
            self.add_column("source", key="source", width=source)
            self.shown_columns.append("source")

    def show(self, memory: dict[str, Any]) -> None:
        """The snapshot's ``memory`` (its lines are the top ones, most first)."""
        self.memory = memory
        self._layout()
        self.clear()
        room = self._line_width()
        lines = memory.get("lines") or []
        for r in lines:
            cells = {
                "line": Text(self._label(r, room), style="cyan"),
                "now": Text(fmt.size(r["live_bytes"]), justify="right"),
                "most": Text(fmt.size(r["max_bytes"]), justify="right"),
                "source": Text(r.get("source") or "", no_wrap=True, overflow="ellipsis"),
            }
            self.add_row(*(cells[c] for c in self.shown_columns), key=f"{r['file']}:{r['line']}")
        if memory.get("tracked"):
            count = memory.get("line_count", len(lines))
            self.border_title = f"GPU memory by line, now ({len(lines)} of {count})"
        else:
            self.border_title = NOT_TRACKED
        self.border_subtitle = memory_words(memory, max(0, (self.size.width or 80) - 6))
