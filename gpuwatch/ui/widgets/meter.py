"""A labelled horizontal bar coloured by load, with a value text at its right."""

from __future__ import annotations

from rich.text import Text

from gpuwatch.ui.widgets._style import bar


def meter_line(label: str, pct: float | None, text: str, width: int) -> Text:
    """``LABEL ████████░░░░ text`` in ``width`` cells: the bar takes what the text leaves.
    ``pct`` is the fill level, 0-100; ``None`` draws an empty dotted bar (value not reported)."""
    head = Text(f"{label:<5}", style="bold")
    tail = Text(f" {text}")
    return Text.assemble(head, bar(pct, width - len(head) - len(tail)), tail)
