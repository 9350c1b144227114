"""A scrolling one-line history: one cell per sample, newest at the right, on a fixed scale."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from gpuwatch.ui.widgets._style import level_style

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


def history_line(
    label: str, values: Sequence[float], caption: str, width: int, scale_max: float | None
) -> Text:
    """``label ▁▂▅▇█▆ caption`` in ``width`` cells: a minute or more of one metric at a glance."""
    head = Text(f"{label:<5}", style="dim")
    tail = Text(f" {caption}", style="dim") if caption else Text()
    graph = history_text(values, width - len(head) - len(tail), scale_max)
    return Text.assemble(head, graph, tail)
