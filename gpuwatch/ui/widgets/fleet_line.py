"""``top --remote``'s opening line: how many GPUs of every host are busy, idle, held idle (memory
held, nothing running) or unreachable."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import var

from gpuwatch.monitor.nvml.activity import Fleet
from gpuwatch.ui.widgets.lines import LinesWidget


class FleetLine(LinesWidget):
    """``fleet: 12 GPUs · 8 busy · 2 idle · 1 held idle · 1 unreachable``, on one line."""

    DEFAULT_CSS = "FleetLine { width: 100%; height: 1; padding: 0 1; }"

    fleet: var[Fleet | None] = var(None)
    """The latest counts; None before the first sample."""

    def watch_fleet(self) -> None:
        self.redraw()

    def lines(self) -> list[Text]:
        f = self.fleet
        if f is None:
            return [Text("fleet: waiting for the first sample", style="dim")]
        t = Text("fleet: ", "bold").append(f"{f.total} GPUs · ")
        t.append(f"{f.busy} busy", "green").append(" · ").append(f"{f.idle} idle")
        t.append(" · ").append(f"{f.held_idle} held idle", "bold red" if f.held_idle else "")
        t.append(" · ").append(f"{f.unreachable} unreachable", "bold red" if f.unreachable else "")
        t.truncate(self.size.width, overflow="ellipsis")
        return [t]
