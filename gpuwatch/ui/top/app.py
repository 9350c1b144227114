"""``gpuwatch top``: live GPU cards and the process table."""

from __future__ import annotations

import signal
from collections.abc import Callable

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.reactive import reactive
from textual.widgets import DataTable, Footer, Input

from gpuwatch.monitor.nvml.activity import IdlePolicy, fleet, held_idle_since
from gpuwatch.monitor.nvml.backend import Backend
from gpuwatch.monitor.nvml.history import History
from gpuwatch.monitor.nvml.sampler import Sampler
from gpuwatch.monitor.nvml.samples import Snapshot
from gpuwatch.monitor.pyspy import StackDumpError, dump_stack
from gpuwatch.ui.sampling import CardLayout, SamplingApp
from gpuwatch.ui.screens import HelpScreen, KillScreen, StackScreen
from gpuwatch.ui.signals import close_on_signals
from gpuwatch.ui.widgets import GpuCard, GpuCards, ProcessTable
from gpuwatch.ui.widgets.fleet_line import FleetLine
from gpuwatch.ui.widgets.title_bar import TitleBar

#: Rows kept for the process table (with header, footer) before cards go compact.
MIN_TABLE_ROWS = 8
#: The footer's width from which its ^p palette hint shows.
WIDE_FOOTER = 100


class TopApp(SamplingApp[None]):
    """Live per-GPU stats and the processes using the GPUs. ``stack_dumper``: ``pid -> text``
    for the stack view; ``sampler``: over ``backend`` (tests pass one with a fixed clock)."""

    TITLE = "gpuwatch top"
    AUTO_FOCUS = "#processes"
    CSS_PATH = "top.tcss"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("space", "toggle_pause", "Pause", key_display="space"),
        # NB: priority: the app sees "/" before it forwards the keys queued behind it to the
        # focused widget, so they reach the filter ("/car" reversed the sort with its "r").
        Binding("slash", "filter", "Filter", key_display="/", priority=True),
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

    def __init__(
        self,
        backend: Backend,
        interval_s: float = 1.0,
        readonly: bool = False,
        stack_dumper: Callable[[int], str] = dump_stack,
        idle: IdlePolicy | None = None,
        sampler: Sampler | None = None,
    ) -> None:
        sampler = sampler or Sampler(backend, interval_s=interval_s, idle=idle)
        super().__init__(sampler, interval_s)
        self.backend = backend
        self.readonly = readonly
        self.stack_dumper = stack_dumper
        self.gpu_count = sampler.gpu_count
        self.snapshot: Snapshot | None = None
        self.samples_taken = 0
        self.signalled: int | None = None
        """SIGTERM or SIGHUP that closed the app (gpuwatch then exits with 128 + it)."""
        self._driver_problem: str | None = None
        self.history = History(interval_s)
        """The cards' graphs (gpuwatch/monitor/nvml/history.py), also kept while paused or covered."""
        self._layout: CardLayout | None = None
        self._said_no_gpm = False
        self.fleet_view = hasattr(backend, "hosts")
        """``top --remote``: a fleet line opens the screen."""

    def compose(self) -> ComposeResult:
        # NB: no running clock: the time shown is the latest sample's (a clock of its own
        # repaints once more every second, a fifth of what top costs).
        yield TitleBar(id="title")
        if self.fleet_view:
            yield FleetLine(id="fleet")
        shown = getattr(self.backend, "indices", None)  # top --only: the GPUs' own indices
        rest = 2 + MIN_TABLE_ROWS + (1 if self.fleet_view else 0)
        yield GpuCards(shown or self.gpu_count, rest, id="cards")
        yield ProcessTable(id="processes")
        yield Input(
            placeholder="filter processes (user, command, pid; job:ID for a job); enter keeps, esc clears",
            id="filter",
        )
        yield Footer()

    def on_mount(self) -> None:
        self._update_subtitle()
        self._relayout()
        self.call_after_refresh(self.query_one(ProcessTable).focus)
        self.start_sampling()
        close_on_signals(self._closed_by_signal)

    def _closed_by_signal(self, signum: int) -> None:
        self.signalled = signum
        self.exit()

    def on_resize(self, event: events.Resize) -> None:
        self._relayout(event.size.width, event.size.height)

    def _relayout(self, width: int | None = None, height: int | None = None) -> None:
        if width is None or height is None:
            width, height = self.size
        layout = self.query_one(GpuCards).relayout(width, height)
        if layout != self._layout:
            self._layout = layout
            self.call_after_refresh(self.draw_snapshot)  # graphs shown again get their data now
        self.compact = layout.compact
        # NB: the footer's command-palette hint would push "? Help" off an 80-column footer;
        # ctrl+p still opens the palette, and the help screen says so.
        self.query_one(Footer).show_command_palette = width >= WIDE_FOOTER
        self._update_subtitle(width)

    def on_sampling_app_snapshot_ready(self, message: SamplingApp.SnapshotReady) -> None:
        if not self.paused:
            self.samples_taken += 1
            self.record_snapshot(message.snapshot)
            self.draw_snapshot()

    def record_snapshot(self, snap: Snapshot) -> None:
        """Keep ``snap`` as the latest and add it to the 5-minute histories."""
        self.snapshot = snap
        self.history.add(snap)

    def draw_snapshot(self) -> None:
        """Draw the latest snapshot on the main screen, current under a modal (help, kill, stack)
        so it is right when the modal closes; nothing while the app shuts down."""
        snap = self.snapshot
        if snap is None:
            return
        try:  # the app's queries look at the main screen, whatever modal is on top
            cards = [(g, self.query_one(f"#gpu-{g.index}", GpuCard)) for g in snap.gpus]
            table = self.query_one(ProcessTable)
        except NoMatches:
            return
        for g, card in cards:
            card.show(g, self.history.of(g.index))
        problems = [
            f"GPU {g.index}: {g.problem}" for g in snap.gpus if g.problem and "process" in g.problem
        ]
        table.show(snap.processes, held_idle_notes(snap) + problems)
        if self.fleet_view:
            self.query_one(FleetLine).fleet = fleet(snap.gpus, self.sampler_idle_below)
        self._say_no_gpm(snap)
        if snap.problem != self._driver_problem:
            self._driver_problem = snap.problem
            if snap.problem:
                self.notify(snap.problem, title="NVML", severity="error", timeout=30)
        self._update_subtitle()  # the sample's time

    @property
    def sampler_idle_below(self) -> float:
        return self.sampler.activity.policy.below_pct if self.sampler else IdlePolicy().below_pct

    def _say_no_gpm(self, snap: Snapshot) -> None:
        without = [str(g.index) for g in snap.gpus if g.gpm is False]
        if without and not self._said_no_gpm:
            self._said_no_gpm = True  # NB: once per run: it will not change
            self.notify(
                f"GPU {', '.join(without)}: no GPM (Hopper and later), so SM activity is not "
                "known there; utilisation is what those cards show",
                title="SM activity",
                timeout=10,
            )

    def on_unmount(self) -> None:
        self.stop_sampling()

    def watch_paused(self, paused: bool) -> None:
        self.hold_sampling(paused)
        self._update_subtitle()

    def _update_subtitle(self, width: int | None = None) -> None:
        driver = (self.sampler.driver_version if self.sampler else None) or "N/A"
        states = [
            *(["read-only"] if self.readonly else []),
            *(["PAUSED"] if self.paused else []),
            *(["DRIVER PROBLEM (see notice)"] if self._driver_problem else []),
        ]
        # The longest form that fits the title line; the states always show.
        room = (width or self.size.width) - len(self.title) - 5
        label, gpus = self.backend.label, f"{self.gpu_count} GPUs"
        every = f"every {self.interval_s:g} s"
        at = f" · {self.snapshot.time:%H:%M:%S}" if self.snapshot is not None else ""
        for parts in (
            [label, f"driver {driver}", gpus, every],
            [label, gpus, every],
            [label, gpus, f"{self.interval_s:g} s"],
        ):
            text = " · ".join(parts + states)
            if len(text + at) <= room:
                break
        # NB: App.sub_title repaints the whole screen when set: only when more than the time
        # changes; the title line repaints alone.
        if text != self.sub_title:
            self.sub_title = text
        # NB: not there yet while the screen mounts (a resize can come first): the next tick
        for bar in self.query(TitleBar):
            bar.text = f"{self.title} — {text}{at}"

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused

    def action_help(self) -> None:
        about = (
            f"gpuwatch top: {self.backend.label}, {self.gpu_count} GPUs, a sample every "
            f"{self.interval_s:g} s. Click a column header to sort by it; ctrl+p opens the "
            "command palette (themes, screenshots, quit)."
        )
        self.push_screen(
            HelpScreen(
                [("gpuwatch top", self.BINDINGS), ("Process table", ProcessTable.BINDINGS)],
                about=about,
            )
        )

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        if box.has_focus:  # a "/" typed in the filter (a path) is text, not this key
            box.insert_text_at_cursor("/")
            return
        box.add_class("-visible")
        # NB: focused now, not at the next idle (Widget.focus defers it): the keys typed right
        # after "/" are next in the app's queue.
        self.screen.set_focus(box)

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_one(ProcessTable).set_filter(event.value)

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.query_one("#filter", Input).remove_class("-visible")
        self.query_one(ProcessTable).focus()

    def action_clear_filter(self) -> None:
        self.query_one("#filter", Input).value = ""
        self.query_one(ProcessTable).set_filter("")
        self._filter_done()

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
                # NB: the pid is checked against the process's start time: between opening
                # the dialog and the answer the process may have ended and its pid been reused.
                self.backend.send_signal(proc.pid, signum, proc.start_time)
            except ProcessLookupError:
                self.notify(
                    f"process {proc.pid} has already exited; nothing was sent", severity="warning"
                )
            except PermissionError:
                self.notify(f"no permission to send {name} to process {proc.pid}", severity="error")
            else:
                self.notify(f"sent {name} to process {proc.pid}")
            self.sample_now()

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
        dumper = self.stack_dumper
        if self.backend.simulated and dumper is dump_stack:

            def dumper(pid: int) -> str:
                raise StackDumpError(
                    f"process {pid} is simulated by --demo: it has no stack to read"
                )

        self.push_screen(StackScreen(proc.pid, proc.command or proc.name or "", dumper))


def held_idle_notes(snap: Snapshot) -> list[str]:
    """``GPU 1 HELD IDLE since 14:02 (12m) by alice (slurm 4242)``: for the process table's
    title."""
    from gpuwatch import _format as fmt

    notes = []
    for g in snap.gpus:
        since = held_idle_since(g, snap.time)
        if g.held_idle and since is not None:
            owners = sorted(
                {f"{p.user or fmt.NA}" + (f" ({p.job.label})" if p.job and p.job.label else "")
                 for p in g.processes}
            )  # fmt: skip
            notes.append(
                f"GPU {g.index} HELD IDLE since {since:%H:%M} ({fmt.span(g.held_idle_s)}) "
                f"by {', '.join(owners)}"
            )
    return notes
