"""The ``?`` screen: every key binding of the app and its widgets."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def _rows(bindings: Iterable[BindingType]) -> list[tuple[str, str]]:
    rows = []
    for b in bindings:
        if isinstance(b, Binding):
            keys = b.key_display or ", ".join(k.strip() for k in b.key.split(","))
            rows.append((keys, b.tooltip or b.description))
        else:
            rows.append((str(b[0]), str(b[-1])))
    return rows


class HelpScreen(ModalScreen[None]):
    """Lists ``sections``: (title, bindings) pairs. Escape, q or ? closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 100; max-width: 95%; height: auto; max-height: 90%;
        border: round $accent; padding: 0 1; background: $surface;
    }
    HelpScreen Static { width: 100%; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", key_display="esc")]

    def __init__(self, sections: list[tuple[str, Iterable[BindingType]]], about: str = "") -> None:
        super().__init__()
        self.sections = sections
        self.about = about

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, padding=(0, 2, 0, 0), expand=True)
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column(overflow="fold", ratio=1)
        for title, bindings in self.sections:
            table.add_row(f"[bold]{title}[/]", "")
            for keys, what in _rows(bindings):
                table.add_row(f"  {keys}", what)
            table.add_row("", "")
        with VerticalScroll() as scroll:
            scroll.border_title = "Keys"
            scroll.border_subtitle = "esc closes"
            if self.about:
                # NB: as wide as the box, so the text wraps to it instead of running off its edge.
                yield Static(self.about + "\n", id="help-about")
            yield Static(table, id="help-table")
