"""Widgets of a few fixed lines of rich Text, drawn through Textual's line API.

A refresh of a ``Static`` parses its content into Textual's own text model and lays it out; a
card's meters, graphs and stats change every sample, so that is most of what ``top`` costs. Here
a line's segments come straight from the Text, on the widget's own style, only for the lines
Textual asks for (NB: the fixed height is set in CSS; these widgets never change size).
"""

from __future__ import annotations

from rich.segment import Segment
from rich.text import Text
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget


class LinesWidget(Widget):
    """Draws :meth:`lines`, one Text per row; :meth:`render` gives them joined, as text."""

    def lines(self) -> list[Text]:
        raise NotImplementedError

    def render(self) -> Text:
        return Text("\n").join(self.lines())

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
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
