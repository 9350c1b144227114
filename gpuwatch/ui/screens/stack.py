"""Shows a process's current Python stack (``py-spy dump``), fetched in a worker thread."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gpuwatch.monitor.pyspy import StackDumpError, dump_stack


class StackScreen(ModalScreen[None]):
    """``dumper(pid) -> text`` raising :class:`StackDumpError` with a one-line reason."""

    DEFAULT_CSS = """
    StackScreen { align: center middle; }
    StackScreen > VerticalScroll {
        width: 95%; height: 85%; border: round $accent; background: $surface; padding: 0 1;
    }
    StackScreen #stack.-error { color: $error; text-style: bold; }
    """
    BINDINGS = [Binding("escape,q", "dismiss", "Close"), Binding("r", "refresh_stack", "Refresh")]

    def __init__(
        self, pid: int, title: str = "", dumper: Callable[[int], str] = dump_stack
    ) -> None:
        super().__init__()
        self.pid = pid
        self.title_text = title
        self.dumper = dumper

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = f"py-spy dump --pid {self.pid}  {self.title_text}"[:100]
            scroll.border_subtitle = "r refresh · esc close"
            yield Static(f"reading the stack of process {self.pid}…", id="stack")

    def on_mount(self) -> None:
        self.action_refresh_stack()

    def action_refresh_stack(self) -> None:
        self._fetch()

    @work(thread=True, exclusive=True)
    def _fetch(self) -> None:
        try:
            text, error = self.dumper(self.pid), False
        except StackDumpError as exc:
            text, error = str(exc), True
        self.app.call_from_thread(self._show, text, error)

    def _show(self, text: str, error: bool) -> None:
        stack = self.query_one("#stack", Static)
        stack.set_class(error, "-error")
        stack.update(Text(text))
