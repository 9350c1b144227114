"""Confirmation before signalling a process: which signal, or cancel."""

from __future__ import annotations

import signal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from gpuwatch.monitor.nvml.samples import ProcessSample


class KillScreen(ModalScreen[int | None]):
    """Dismisses with the chosen signal number, or ``None`` to cancel (escape, n)."""

    DEFAULT_CSS = """
    KillScreen { align: center middle; }
    KillScreen > Vertical {
        width: 64; height: auto; border: thick $error; background: $surface; padding: 1 2;
    }
    KillScreen Horizontal { height: auto; margin-top: 1; }
    KillScreen Button { margin-right: 1; min-width: 10; }
    """
    BINDINGS = [
        Binding("escape,n", "dismiss(None)", "Cancel"),
        Binding("t", "send('SIGTERM')", "SIGTERM"),
        Binding("i", "send('SIGINT')", "SIGINT"),
        Binding("K", "send('SIGKILL')", "SIGKILL"),
    ]

    def __init__(self, process: ProcessSample) -> None:
        super().__init__()
        self.process = process

    def compose(self) -> ComposeResult:
        p = self.process
        with Vertical():
            yield Static(
                f"[b]Send a signal to process {p.pid}?[/b]\n\n"
                f"user: {p.user or 'N/A'}   GPU {p.gpu_index}\n{p.command or p.name or ''}",
                markup=True,
            )
            with Horizontal():
                yield Button("SIGTERM (t)", id="SIGTERM", variant="warning")
                yield Button("SIGINT (i)", id="SIGINT")
                yield Button("SIGKILL (K)", id="SIGKILL", variant="error")
                yield Button("Cancel (esc)", id="cancel", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        name = str(event.button.id)
        self.dismiss(None if name == "cancel" else int(signal.Signals[name]))

    def action_send(self, name: str) -> None:
        self.dismiss(int(signal.Signals[name]))
