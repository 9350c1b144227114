"""A labelled horizontal bar coloured by load, with a value text at its right."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import var

from gpuwatch.app.widgets._style import bar
from gpuwatch.app.widgets.lines import LinesWidget


class Meter(LinesWidget):
    """``LABEL ████████░░░░ text``: the bar takes whatever width the text leaves."""

    DEFAULT_CSS = """
    Meter { height: 1; width: 1fr; }
    """

    pct: var[float | None] = var(None)
    """Fill level, 0-100; ``None`` draws an empty dotted bar (value not reported)."""
    text: var[str] = var("")
    """Shown right of the bar, e.g. ``'67%'`` or ``'45.1 / 80.0 GiB'``."""

    def __init__(self, label: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.label = label

    def show(self, pct: float | None, text: str) -> None:
        """Both values at once: one redraw, not two."""
        self.set_reactive(Meter.pct, pct)
        self.set_reactive(Meter.text, text)
        self.redraw()

    def watch_pct(self) -> None:
        self.redraw()

    def watch_text(self) -> None:
        self.redraw()

    def lines(self) -> list[Text]:
        head = Text(f"{self.label:<5}", style="bold")
        tail = Text(f" {self.text}")
        width = self.size.width - len(head) - len(tail)
        return [Text.assemble(head, bar(self.pct, width), tail)]
