"""The end-of-run summary and hints, as ``gpuwatch profile`` prints them."""

from __future__ import annotations

from rich.console import RenderableType
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class SummaryScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    SummaryScreen { align: center middle; }
    SummaryScreen > VerticalScroll { width: 95%; height: 90%; border: round $success; background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,s", "dismiss", "Close"), Binding("q", "app.quit_or_stop", "Quit")]

    def __init__(self, summary: RenderableType, title: str) -> None:
        super().__init__()
        self.summary = summary
        self.title_text = title

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = self.title_text
            scroll.border_subtitle = "esc closes · q quits"
            yield Static(self.summary, id="summary")
