"""``gpuwatch profile --live``: GPU cards, the script's live counters, its hottest lines and its
output, on one screen. The app only draws: the run (gpuwatch/profile/live/model.py) posts its
events, which arrive here as :class:`LiveApp.RunChanged` messages."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import Footer, Header, RichLog, Static

from gpuwatch.monitor.nvml.history import History
from gpuwatch.monitor.nvml.sampler import Sampler
from gpuwatch.monitor.pyspy import dump_stack, users_dumper
from gpuwatch.profile.live.model import Ended, LiveRun, Update
from gpuwatch.profile.live.result import LiveResult
from gpuwatch.ui.live.memory_table import NOT_TRACKED, MemoryLinesTable, memory_words
from gpuwatch.ui.sampling import SamplingApp
from gpuwatch.ui.screens import ConfirmScreen, HelpScreen, StackScreen, SummaryScreen
from gpuwatch.ui.signals import ShutdownGuard, close_on_signals, run_restoring_signals
from gpuwatch.ui.widgets import (
    GpuCard,
    GpuCards,
    HotLinesTable,
    ProgressLine,
    RatesPanel,
    RateWindow,
    StatusLine,
)

#: Rows the middle, the log and the status line need before GPU cards fold to one line each.
ROWS_FOR_THE_REST = 2 + 10 + 8 + 1
#: How often the status line's clock moves while nothing else does.
CLOCK_S = 1.0


class LiveApp(SamplingApp[int | None]):
    """The live view of a profiled child: ``run`` starts on mount; without a ``sampler`` the
    cards' place says ``no_gpu_reason``; ``top``: lines per list of the summary screen."""

    TITLE = "gpuwatch profile --live"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding(
            "q",
            "quit_or_stop",
            "Quit/stop",
            tooltip="Stop the script (asks first) or quit once it ended",
        ),
        Binding(
            "d", "stack", "Stack", tooltip="Where the script is now (py-spy dump of the child)"
        ),
        Binding(
            "p", "toggle_pause", "Pause", tooltip="Pause the display (the script keeps running)"
        ),
        Binding(
            "s", "summary", "Summary", tooltip="The final summary and hints (once the script ended)"
        ),
        Binding(
            "a", "toggle_all_gpus", "All GPUs", tooltip="Every GPU's card, or only the script's"
        ),
        Binding(
            "m",
            "toggle_memory",
            "Memory",
            tooltip="GPU memory by line (the lines holding the most now), or the hottest lines",
            show=False,  # NB: the footer has no room left at 80 columns: the table's border says m
        ),
        Binding("question_mark", "help", "Help", key_display="?"),
    ]

    class RunChanged(Message):
        """The run posted ``event`` (from its pump thread)."""

        def __init__(self, event: Update) -> None:
            super().__init__()
            self.event = event

    def __init__(
        self,
        run: LiveRun,
        sampler: Sampler | None,
        no_gpu_reason: str = "",
        gpu_interval_s: float = 1.0,
        top: int = 5,
        stack_dumper: Callable[[int], str] = dump_stack,
        header_clock: bool = True,
    ) -> None:
        super().__init__(sampler, gpu_interval_s)
        self.model = run
        self.no_gpu_reason = no_gpu_reason
        self.top = top
        self.stack_dumper = stack_dumper
        self.header_clock = header_clock
        self.gpu_count = sampler.gpu_count if sampler else 0
        self.show_all_gpus = False
        """Every GPU's card (key a), not only those the script uses."""
        self.paused = False
        """The display is paused (key p): output is held, counters stay; the script runs on."""
        self.memory_shown = False
        """GPU memory by line in place of the hottest lines (key m)."""
        self.ended: Ended | None = None
        """The run's end, once drawn (its summary shown, or why it could not start)."""
        self._devices: list[dict[str, object]] = []
        self._rates = RateWindow()
        self.held_lines: deque[tuple[str, str]] = deque(maxlen=2000)
        """Output that came while the display was paused, shown when it resumes."""
        self.history = History(gpu_interval_s)  # the cards' graphs, one store as in gpuwatch top
        self.guard = ShutdownGuard(lambda: self.model.result().exit_code)

    def compose(self) -> ComposeResult:
        yield Header(show_clock=self.header_clock)
        if self.sampler is not None:
            yield GpuCards(self.gpu_count, ROWS_FOR_THE_REST, id="cards")
            yield Static(
                "The script has used no GPU yet: its cards appear when it does (a: every GPU).",
                id="gpu-note",
            )
        else:
            yield Static(f"no GPU stats: {self.no_gpu_reason}", id="no-gpu")
        with Horizontal(id="middle"):
            yield RatesPanel(id="rates")
            yield HotLinesTable(id="lines", timed=not self.model.session.options.untimed)
            yield MemoryLinesTable(id="memory")
        yield RichLog(id="log", max_lines=2000, wrap=False, markup=False, highlight=False)
        yield ProgressLine(id="progress")
        yield StatusLine(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#log", RichLog).border_title = "Script output"
        self.query_one(MemoryLinesTable).display = False
        self.query_one(RatesPanel).show(None, None)
        sim = " — SIMULATED GPU (--fake-cuda)" if self.model.session.options.fake_cuda else ""
        self.sub_title = self.model.command + sim
        close_on_signals(self._closed_by_signal)
        self._show_used_gpus([])
        self._relayout()
        self.start_sampling()
        self.model.start(self._post_run_event)
        self.set_interval(CLOCK_S, self._show_status)
        self._show_status()

    def on_resize(self, event: events.Resize) -> None:
        self._relayout(event.size.width, event.size.height)
        self.call_after_refresh(self._show_memory_words)

    def _relayout(self, width: int | None = None, height: int | None = None) -> None:
        if width is None or height is None:
            width, height = self.size
        # NB: below 120 columns the rates panel gives the hot lines ten more columns.
        self.query_one(RatesPanel).set_class(width < 120, "-narrow")
        if self.sampler is not None:
            self.query_one(GpuCards).relayout(width, height)

    def on_sampling_app_snapshot_ready(self, message: SamplingApp.SnapshotReady) -> None:
        gpus = message.snapshot.gpus
        self.model.record_gpus(gpus)
        for g in gpus:
            self.history.of(g.index).add(g)
            if not self.paused:
                try:
                    card = self.query_one(f"#gpu-{g.index}", GpuCard)
                except NoMatches:  # a sample that arrived while the app shuts down
                    return
                card.show(g, self.history.of(g.index))

    def _show_used_gpus(self, devices: list[dict[str, object]] | None = None) -> None:
        """Cards for the GPUs the script uses (every card with ``a``, or when there is no
        telling which: MIG slices); none until it uses one, and a line says so."""
        if self.sampler is None:
            return
        if devices is not None:
            self._devices = devices
        self.model.mig_gpus = self.mig_gpus
        used = self.model.used_gpus(self._devices)
        shown = None if self.show_all_gpus or used is None else used
        cards = self.query_one(GpuCards)
        changed = cards.show_only(shown)
        cards.display = shown is None or bool(shown)
        self.query_one("#gpu-note", Static).display = not cards.display
        if changed:
            self._relayout()

    def action_toggle_all_gpus(self) -> None:
        self.show_all_gpus = not self.show_all_gpus
        self._show_used_gpus()

    def _post_run_event(self, event: Update) -> None:
        """From the run's pump thread (Textual's post_message is thread-safe)."""
        self.post_message(self.RunChanged(event))

    def on_live_app_run_changed(self, message: RunChanged) -> None:
        if not self.is_running:  # shutting down: the run ends itself (LiveRun.close)
            return
        update = message.event
        self._draw_update(update)
        if update.final:  # the child is gone and all it said is drawn: the run ends here
            self.model.mig_gpus = self.mig_gpus
            ended = self.model.end()
            if ended is not None:
                self._draw_end(ended)
        self._show_status()

    def _draw_update(self, update: Update) -> None:
        for problem in update.problems:
            self.notify(problem, severity="warning", timeout=4)
        for snap in update.snapshots:
            self._rates.add(snap.elapsed_s, snap.totals)
        if self.paused and not update.final:
            self.held_lines.extend(update.lines)
        else:
            self._write_log([*self.held_lines, *update.lines])
            self.held_lines.clear()
            if update.snapshots and not self.paused:
                # redraw only what changed: a quiet screen costs the terminal nothing
                self._refresh_counters()
        self.query_one(ProgressLine).show(update.progress)

    def _draw_end(self, ended: Ended) -> None:
        self.ended = ended
        self.query_one(ProgressLine).show("")
        if ended.fatal is not None:
            self.notify(ended.fatal, severity="error", timeout=10)
            return
        for ok, message in ended.written:
            self.notify(message, severity="information" if ok else "error", timeout=6)
        self._refresh_counters()
        self.action_summary()

    def _write_log(self, lines: list[tuple[str, str]]) -> None:
        log = self.query_one("#log", RichLog)
        for stream, text in lines:
            log.write(Text(text, style="red" if stream == "stderr" else ""))

    def _refresh_counters(self) -> None:
        snap, panel = self.model.last_snapshot, self.query_one(RatesPanel)
        panel.counting = snap.counting if snap else panel.counting
        panel.show(self._rates.rates(), snap.totals if snap else None, self.model.ended)
        if snap is not None:
            self.query_one(HotLinesTable).show(snap.lines, snap.line_count, snap.counting)
            self.call_after_refresh(self._show_memory_words)  # the table's width laid out
            self.query_one(MemoryLinesTable).show(snap.memory)
            self._show_used_gpus(snap.devices)

    def _show_memory_words(self) -> None:
        """Each GPU's memory now and peak so far on the hottest lines' lower border (no row
        taken), with the key that shows it by line when there is room."""
        snap = self.model.last_snapshot
        try:
            lines = self.query_one(HotLinesTable)
        except NoMatches:  # the app shuts down
            return
        if snap is None:
            return
        # NB: before the first layout the table has no width yet: half the screen's, as laid out
        room = (lines.size.width or self.size.width // 2) - 6
        words = memory_words(snap.memory, room)
        hint = next((h for h in (" · m: by line", " (m)") if len(words + h) <= room), "")
        lines.border_subtitle = words + hint if words else ""

    def _show_status(self) -> None:
        run = self.model
        state = run.state()
        if self.paused and not run.ended:
            state += " (display paused: p resumes)"
        try:
            line = self.query_one(StatusLine)
        except NoMatches:  # the clock ticked while the app shuts down: its widgets are going
            return
        line.show(
            state, run.elapsed_s(), run.pid, run.last_snapshot, run.exit_code, run.step_energy()
        )

    def _closed_by_signal(self, signum: int) -> None:
        self.model.note_signal(signum)
        self.action_quit_or_stop() if self.model.ended else self.exit()

    def run_guarded(self) -> LiveResult:
        """Runs the app; SIGTERM/SIGHUP end it with the report written (gpuwatch/ui/signals.py)."""
        run_restoring_signals(self, self.guard)
        return self.model.result()

    def action_quit_or_stop(self) -> None:
        if self.model.ended:  # the report is out: the exit is bounded from here
            self.guard.arm()
            return self.exit(self.model.exit_code)

        def answer(yes: bool | None) -> None:
            if yes:
                self.model.stop()
                self._show_status()

        self.push_screen(
            ConfirmScreen("The script is still running.\nStop it? Its report is kept."), answer
        )

    def action_stack(self) -> None:
        pid = self.model.pid
        if self.model.ended or pid is None:
            self.notify("the script has ended", severity="warning")
            return
        command = self.model.command
        dumper = users_dumper(self.stack_dumper, command)
        self.push_screen(StackScreen(pid, command, dumper))

    def action_toggle_memory(self) -> None:
        snap = self.model.last_snapshot
        if snap is not None and not snap.memory.get("tracked"):
            self.notify(NOT_TRACKED, severity="information", timeout=6)
            return
        self.memory_shown = not self.memory_shown
        self.query_one(MemoryLinesTable).display = self.memory_shown
        self.query_one(HotLinesTable).display = not self.memory_shown

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused:
            self._write_log(list(self.held_lines))
            self.held_lines.clear()
            self._refresh_counters()
        self._show_status()

    def action_summary(self) -> None:
        report = self.model.report
        if report is None:
            self.notify("the summary comes when the script ends", severity="information")
            return
        from gpuwatch.output.text import summary

        title = f"Summary: {self.model.how_it_ended()}"
        try:
            if self.model.findings is None:
                raise ValueError("the run could not be analysed")
            shown = summary(report, self.model.findings, top=self.top)
        except Exception as exc:  # a bug of ours: the report is written, the app stays up
            self.notify(
                f"could not show the summary ({type(exc).__name__}: {exc}); the report's files "
                "are written",
                severity="error",
                timeout=10,
            )
            return
        self.push_screen(SummaryScreen(shown, title))

    def action_help(self) -> None:
        about = (
            "The script runs in its own process under the profiler; its counters arrive "
            "several times a second. Closing the app stops the script and keeps the report."
        )
        self.push_screen(HelpScreen([("gpuwatch profile --live", self.BINDINGS)], about=about))

    def on_unmount(self) -> None:
        self.stop_sampling()
        # Closed while the script runs: it is stopped, and whatever report it sends is kept.
        self.model.close()
        self.guard.arm()  # the report is out: what is left of the exit is bounded
