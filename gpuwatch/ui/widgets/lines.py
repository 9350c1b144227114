"""Widgets of a few fixed lines of rich Text, drawn through Textual's line API.

NB: a ``Static`` parses and lays out its content on every refresh, most of what ``top`` cost;
here a line's segments come straight from the Text, and a new value repaints only the rows
whose text changed (the fixed height is set in CSS: these widgets never change size).
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.reactive import var
from textual.strip import Strip
from textual.widget import Widget


class LinesWidget(Widget):
    """Draws :meth:`lines`, one Text per row; :meth:`render` gives them joined, as text."""

    _base: Style | None = None
    _drawn: tuple[int, list[Text]] = (-1, [])
    """The width the lines were made for, and the lines."""

    def lines(self) -> list[Text]:
        """The rows to draw; subclasses say what they show (none: blank rows)."""
        return []

    def notify_style_update(self) -> None:
        self._base = None  # a new theme or class: the widget's own style is looked up again
        super().notify_style_update()

    def render(self) -> Text:
        return Text("\n").join(self.lines())

    def redraw(self) -> None:
        """Repaints the rows whose text changed since they were drawn."""
        width, drawn = self._drawn
        if not self.is_mounted or width != self.size.width:
            self.refresh()  # not drawn yet at this width: all of it, when it is
            return
        lines = self.lines()
        self._drawn = (width, lines)
        for y in range(max(len(lines), len(drawn))):
            if y >= len(lines) or y >= len(drawn) or lines[y] != drawn[y]:
                self.refresh(Region(0, y, width, 1))

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._base is None:
            self._base = self.rich_style  # NB: it walks every ancestor's background: kept
        base = self._base
        if self._drawn[0] != width:
            self._drawn = (width, self.lines())
        lines = self._drawn[1]
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

    text: var[Text] = var(Text)

    def watch_text(self) -> None:
        self.redraw()

    def lines(self) -> list[Text]:
        return list(self.text.split("\n"))
