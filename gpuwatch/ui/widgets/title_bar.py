"""The top line of ``gpuwatch top``: its title, what it watches, and when the figures were
sampled. Textual's Header re-lays out the whole screen when its subtitle changes; this line
repaints itself alone, once a sample."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import var

from gpuwatch.ui.widgets.lines import LinesWidget


class TitleBar(LinesWidget):
    """``gpuwatch top — demo · 2 GPUs · every 1 s · 00:17:49``, centred on one line."""

    DEFAULT_CSS = """
    TitleBar { dock: top; width: 100%; height: 1; background: $panel; color: $foreground; }
    """

    text: var[str] = var("")

    def watch_text(self) -> None:
        self.redraw()

    def lines(self) -> list[Text]:
        line = Text(self.text, no_wrap=True, overflow="ellipsis")
        line.truncate(self.size.width, overflow="ellipsis")
        line.align("center", self.size.width)
        return [line]
