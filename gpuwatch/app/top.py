"""``gpuwatch top``: live GPU cards and the process table."""

from __future__ import annotations

import math
import signal
import threading
from collections import deque
from collections.abc import Callable

from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable, Footer, Header, Input
from textual.worker import get_current_worker

from gpuwatch.app.screens import HelpScreen, KillScreen, StackScreen
from gpuwatch.app.widgets import GpuCard, ProcessTable
from gpuwatch.nvml.backend import Backend
from gpuwatch.nvml.sampler import Sampler
from gpuwatch.nvml.samples import Snapshot
from gpuwatch.pyspy import dump_stack

#: Height of a full card, borders included; a compact card is one line.
FULL_CARD_HEIGHT = 10
FULL_CARD_MIN_WIDTH = 56
COMPACT_CARD_MIN_WIDTH = 78
#: Rows kept for the process table (with header, footer) before cards go compact.
MIN_TABLE_ROWS = 8
HISTORY_SECONDS = 300.0


class TopApp(App[None]):
    """Live per-GPU stats and the processes using the GPUs.

    Args:
        backend: where samples come from (``FakeBackend`` in tests and ``--demo``).
        interval_s: seconds between samples.
        readonly: refuse to signal processes.
        stack_dumper: ``pid -> text`` for the stack view; py-spy by default.
    """

    TITLE = "gpuwatch top"
    AUTO_FOCUS = "#processes"
    CSS_PATH = "top.tcss"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("space", "toggle_pause", "Pause", key_display="space"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("k", "kill", "Kill", tooltip="Send SIGTERM/SIGINT/SIGKILL to the selected process"),
        Binding(
            "enter,d",
            "stack",
            "Stack",
            key_display="enter/d",
            tooltip="Show the selected process's Python stack (py-spy dump)",
        ),
        Binding("question_mark", "help", "Help", key_display="?"),
    ]

    paused: reactive[bool] = reactive(False)
    """While True, no new samples are taken and the screen stays as it was."""
    compact: reactive[bool] = reactive(False)
    """GPU cards drawn as one line each, chosen from the terminal size and GPU count."""

    class SnapshotReady(Message):
        def __init__(self, snapshot: Snapshot) -> None:
            super().__init__()
            self.snapshot = snapshot

    class SamplingFailed(Message):
        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    def __init__(
        self,
        backend: Backend,
        interval_s: float = 1.0,
        readonly: bool = False,
        stack_dumper: Callable[[int], str] = dump_stack,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.interval_s = interval_s
        self.readonly = readonly
        self.stack_dumper = stack_dumper
        self.sampler = Sampler(backend, interval_s=interval_s)
        self.gpu_count = self.sampler.gpu_count
        self.snapshot: Snapshot | None = None
        self.samples_taken = 0
        n = max(1, int(HISTORY_SECONDS / interval_s))
        self._history = {
            i: (deque(maxlen=n), deque(maxlen=n), deque(maxlen=n)) for i in range(self.gpu_count)
        }
        self._sample_wake = threading.Event()
        self._sample_gate = threading.Event()
        self._sample_gate.set()

    # -- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=True)
        with Grid(id="cards"):
            for i in range(self.gpu_count):
                yield GpuCard(i, id=f"gpu-{i}")
        yield ProcessTable(id="processes")
        yield Input(
            placeholder="filter processes (user, command, pid); enter keeps, esc clears",
            id="filter",
        )
        yield Footer()

    def on_mount(self) -> None:
        self._update_subtitle()
        self._relayout()
        self.call_after_refresh(self.query_one(ProcessTable).focus)
        self._sample_loop()

    def on_resize(self, event: events.Resize) -> None:
        self._relayout(event.size.width, event.size.height)

    def _relayout(self, width: int | None = None, height: int | None = None) -> None:
        if width is None or height is None:
            width, height = self.size
        n = self.gpu_count
        full_cols = max(1, min(n, width // FULL_CARD_MIN_WIDTH))
        full_height = math.ceil(n / full_cols) * FULL_CARD_HEIGHT
        self.compact = full_height > height - 2 - MIN_TABLE_ROWS
        cols = max(1, min(n, width // COMPACT_CARD_MIN_WIDTH)) if self.compact else full_cols
        grid = self.query_one("#cards", Grid)
        grid.styles.grid_size_columns = cols
        grid.set_class(self.compact, "-compact")
        for card in self.query(GpuCard):
            card.compact = self.compact

    # -- sampling -----------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="sampler")
    def _sample_loop(self) -> None:
        worker = get_current_worker()
        while not worker.is_cancelled:
            self._sample_gate.wait()
            if worker.is_cancelled:
                break
            try:
                snap = self.sampler.snapshot()
            except Exception as exc:  # a backend bug must not take the UI down
                self.post_message(self.SamplingFailed(f"{type(exc).__name__}: {exc}"))
            else:
                self.post_message(self.SnapshotReady(snap))
            self._sample_wake.wait(self.interval_s)
            self._sample_wake.clear()

    def on_top_app_snapshot_ready(self, message: SnapshotReady) -> None:
        if self.paused:
            return
        self.samples_taken += 1
        self.show_snapshot(message.snapshot)

    def on_top_app_sampling_failed(self, message: SamplingFailed) -> None:
        self.notify(f"sampling failed: {message.error}", severity="error", timeout=5)

    def show_snapshot(self, snap: Snapshot) -> None:
        self.snapshot = snap
        for g in snap.gpus:
            util, mem, pcie = self._history[g.index]
            util.append(float(g.gpu_util_pct or 0))
            mem.append(g.memory_used_pct or 0.0)
            pcie.append(float((g.pcie_rx_bytes_per_s or 0) + (g.pcie_tx_bytes_per_s or 0)))
            card = self.query_one(f"#gpu-{g.index}", GpuCard)
            card.sample = g
            card.set_history(util, mem, pcie)
        self.query_one(ProcessTable).show(snap.processes)

    def on_unmount(self) -> None:
        self.workers.cancel_group(self, "sampler")
        self._sample_gate.set()
        self._sample_wake.set()
        self.sampler.close()

    # -- actions ------------------------------------------------------------------------------

    def watch_paused(self, paused: bool) -> None:
        if paused:
            self._sample_gate.clear()
        else:
            self._sample_gate.set()
            self._sample_wake.set()
        self._update_subtitle()

    def watch_compact(self, _compact: bool) -> None:
        if self.snapshot is not None:
            self.call_after_refresh(self.show_snapshot, self.snapshot)

    def _update_subtitle(self) -> None:
        driver = self.sampler.driver_version or "N/A"
        parts = [
            f"{self.backend.label}",
            f"driver {driver}",
            f"{self.gpu_count} GPUs",
            f"every {self.interval_s:g} s",
        ]
        if self.readonly:
            parts.append("read-only")
        if self.paused:
            parts.append("PAUSED")
        self.sub_title = " · ".join(parts)

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused

    def action_help(self) -> None:
        about = (
            f"gpuwatch top: {self.backend.label}, {self.gpu_count} GPUs, a sample every "
            f"{self.interval_s:g} s. Click a column header to sort by it."
        )
        self.push_screen(
            HelpScreen(
                [("gpuwatch top", self.BINDINGS), ("Process table", ProcessTable.BINDINGS)],
                about=about,
            )
        )

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-visible")
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_one(ProcessTable).set_filter(event.value)

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.query_one("#filter", Input).remove_class("-visible")
        self.query_one(ProcessTable).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("-visible")
        self.query_one(ProcessTable).set_filter("")
        self.query_one(ProcessTable).focus()

    def action_kill(self) -> None:
        if self.readonly:
            self.notify("read-only: signalling processes is off (--readonly)", severity="warning")
            return
        proc = self.query_one(ProcessTable).selected
        if proc is None:
            self.notify("no process selected", severity="warning")
            return

        def send(signum: int | None) -> None:
            if signum is None:
                return
            name = signal.Signals(signum).name
            try:
                self.backend.send_signal(proc.pid, signum)
            except ProcessLookupError:
                self.notify(f"process {proc.pid} has already exited", severity="warning")
            except PermissionError:
                self.notify(f"no permission to send {name} to process {proc.pid}", severity="error")
            else:
                self.notify(f"sent {name} to process {proc.pid}")
            self._sample_wake.set()

        self.push_screen(KillScreen(proc), send)

    @on(DataTable.RowSelected, "#processes")
    def _row_chosen(self) -> None:
        # NB: the focused table consumes enter itself and reports it as RowSelected.
        self.action_stack()

    def action_stack(self) -> None:
        proc = self.query_one(ProcessTable).selected
        if proc is None:
            self.notify("no process selected", severity="warning")
            return
        self.push_screen(StackScreen(proc.pid, proc.command or proc.name or "", self.stack_dumper))
