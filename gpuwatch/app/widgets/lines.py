"""Widgets of a few fixed lines of rich Text, drawn through Textual's line API.

A refresh of a ``Static`` parses its content into Textual's own text model and lays it out; a
card's meters, graphs and stats change every sample, so that is most of what ``top`` costs. Here
a line's segments come straight from the Text, on the widget's own style, only for the lines
Textual asks for (NB: the fixed height is set in CSS; these widgets never change size).
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget


class LinesWidget(Widget):
    """Draws :meth:`lines`, one Text per row; :meth:`render` gives them joined, as text."""

    _base: Style | None = None

    def lines(self) -> list[Text]:
        raise NotImplementedError

    def notify_style_update(self) -> None:
        self._base = None  # a new theme or class: the widget's own style is looked up again
        super().notify_style_update()

    def render(self) -> Text:
        return Text("\n").join(self.lines())

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._base is None:
            self._base = self.rich_style  # NB: it walks every ancestor's background: kept
        base = self._base
        lines = self.lines()
        if y >= len(lines):
            return Strip.blank(width, base)
        segments = [
            Segment(seg.text, base + seg.style if seg.style else base)
            for seg in lines[y].render(self.app.console)
            if seg.text != "\n"
        ]
        return Strip(segments).adjust_cell_length(width, base)


class TextLines(LinesWidget):
    """Shows :attr:`text`, one row per line of it."""

    text: reactive[Text] = reactive(Text)

    def lines(self) -> list[Text]:
        return list(self.text.split("\n"))
