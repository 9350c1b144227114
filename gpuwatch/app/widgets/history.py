"""A scrolling one-line history: one cell per sample, newest at the right, on a fixed scale."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.reactive import var

from gpuwatch.app.widgets._style import level_style
from gpuwatch.app.widgets.lines import LinesWidget

_TICKS = " ▁▂▃▄▅▆▇█"


def history_text(values: Sequence[float], width: int, scale_max: float | None) -> Text:
    """The last ``width`` values as block characters; ``scale_max`` None scales to the peak."""
    width = max(1, width)
    shown = list(values)[-width:]
    top = scale_max if scale_max is not None else max(shown, default=0.0)
    text = Text(" " * (width - len(shown)))
    run, run_style = "", ""
    for v in shown:
        frac = 0.0 if top <= 0 else min(1.0, max(0.0, v / top))
        tick = _TICKS[round(frac * (len(_TICKS) - 1))]
        # Load colours only mean something on an absolute scale; a peak-scaled graph is one hue.
        style = "grey37" if not v else level_style(frac * 100) if scale_max else "cyan"
        if style != run_style and run:
            text.append(run, style=run_style)
            run = ""
        run, run_style = run + (tick if tick != " " else "▁"), style
    if run:  # one span per run of a colour, not per cell: fewer segments to draw
        text.append(run, style=run_style)
    return text


class History(LinesWidget):
    """``label ▁▂▅▇█▆ value``: a minute or more of one metric at a glance."""

    DEFAULT_CSS = """
    History { height: 1; width: 1fr; }
    """

    values: var[tuple[float, ...]] = var(tuple)
    """Samples, oldest first; only the last ones that fit are drawn."""
    caption: var[str] = var("")
    """Text at the right end, e.g. the peak over the window."""

    def __init__(self, label: str, scale_max: float | None = 100.0, *, id: str | None = None):
        super().__init__(id=id)
        self.label = label
        self.scale_max = scale_max

    def show(self, values: tuple[float, ...], caption: str) -> None:
        """Both at once: one redraw, not two."""
        self.set_reactive(History.values, values)
        self.set_reactive(History.caption, caption)
        self.redraw()

    def watch_values(self) -> None:
        self.redraw()

    def watch_caption(self) -> None:
        self.redraw()

    def lines(self) -> list[Text]:
        head = Text(f"{self.label:<5}", style="dim")
        tail = Text(f" {self.caption}", style="dim") if self.caption else Text()
        width = self.size.width - len(head) - len(tail)
        return [Text.assemble(head, history_text(self.values, width, self.scale_max), tail)]
