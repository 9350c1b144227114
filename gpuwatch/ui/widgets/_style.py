"""Colour thresholds and text bars shared by the widgets."""

from __future__ import annotations

from rich.text import Text

#: (upper bound exclusive, style) for load-like percentages: light, moderate, heavy.
LOAD_LEVELS = ((50.0, "green"), (80.0, "yellow"), (float("inf"), "red"))
TEMP_LEVELS = ((70.0, "green"), (85.0, "yellow"), (float("inf"), "bold red"))


def level_style(value: float | None, levels: tuple[tuple[float, str], ...] = LOAD_LEVELS) -> str:
    if value is None:
        return "dim"
    for bound, style in levels:
        if value < bound:
            return style
    return levels[-1][1]


def bar(pct: float | None, width: int, style: str | None = None) -> Text:
    """A bar of ``width`` cells filled to ``pct`` with eighth-block precision."""
    width = max(1, width)
    if pct is None:
        return Text("·" * width, style="dim")
    pct = min(100.0, max(0.0, pct))
    eighths = round(pct / 100.0 * width * 8)
    full, part = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[part].strip() if part else ""
    filled = "█" * full + partial
    text = Text(filled, style=style or level_style(pct))
    text.append("░" * (width - len(filled)), style="grey37")
    return text
