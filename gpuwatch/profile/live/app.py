"""``gpuwatch profile --live``: GPU cards, the script's live counters, its hottest lines and its
output, on one screen."""

from __future__ import annotations

import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.widgets import Footer, Header, RichLog, Static

from gpuwatch.app.sampling import SamplingApp
from gpuwatch.app.screens import ConfirmScreen, HelpScreen, StackScreen, SummaryScreen
from gpuwatch.app.signals import ShutdownGuard, close_on_signals, run_restoring_signals
from gpuwatch.app.widgets import (
    GpuCard,
    GpuCards,
    HotLinesTable,
    ProgressLine,
    RatesPanel,
    RateWindow,
    StatusLine,
)
from gpuwatch.monitor.gpu_timeline import sample_row, samples_of_used_gpus, used_gpu_indices
from gpuwatch.monitor.nvml.history import History
from gpuwatch.monitor.nvml.sampler import Sampler
from gpuwatch.monitor.pyspy import dump_stack, users_dumper
from gpuwatch.profile.live.protocol import (
    Done,
    Fatal,
    Hello,
    LiveSnapshot,
    Message,
    report_from_snapshot,
)
from gpuwatch.profile.live.result import LiveResult
from gpuwatch.profile.live.session import ChildSession
from gpuwatch.report.write import Output, write_reports
from profilers import Report
from profilers.report import printable

#: Rows the middle, the log and the status line need before GPU cards fold to one line each.
ROWS_FOR_THE_REST = 2 + 10 + 8 + 1
PUMP_S = 0.1  # how often the app reads what the child sent
#: Seconds the script gets to stop (and send its report) after Ctrl-C before it is killed.
STOP_GRACE_S = 5.0


class LiveApp(SamplingApp):
    """The live view of a profiled child.

    Args:
        session: the child (started on mount unless already started).
        sampler: GPU stats for the cards; None shows ``no_gpu_reason`` instead.
        outputs: reports to write when the run ends (or is stopped, or dies).
        stack_dumper: ``pid -> text`` for ``d``; py-spy by default.
    """

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
        Binding("question_mark", "help", "Help", key_display="?"),
    ]

    def __init__(
        self,
        session: ChildSession,
        sampler: Sampler | None,
        no_gpu_reason: str = "",
        gpu_interval_s: float = 1.0,
        outputs: Sequence[Output] = (),
        top: int = 5,
        stack_dumper: Callable[[int], str] = dump_stack,
    ) -> None:
        super().__init__(sampler, gpu_interval_s)
        self.session = session
        self.no_gpu_reason = no_gpu_reason
        self.outputs = list(outputs)
        self.show_all_gpus = False  # every GPU's card (key a), not only those the script uses
        self._devices: list[dict[str, Any]] = []
        self.signalled: int | None = None
        """SIGTERM or SIGHUP that closed the app (the exit code is then 128 + it)."""
        self.top = top
        self.stack_dumper = stack_dumper
        self.gpu_count = sampler.gpu_count if sampler else 0
        self.paused = False
        self.last_snapshot: LiveSnapshot | None = None
        self.snapshots_seen = 0
        self.done: Done | None = None
        self.profile_t0: float | None = None  # the child's profile start, on our monotonic clock
        self.fatal: str | None = None
        self.report: Report | None = None
        self.exit_code: int | None = None
        self.written: list[tuple[bool, str]] = []
        self.problems: list[str] = []
        self.gpu_samples: deque[dict[str, Any]] = deque(maxlen=172_800)
        self._rates = RateWindow()
        self._held_lines: deque[tuple[str, str]] = deque(maxlen=2000)
        self.history = History(gpu_interval_s)  # the cards' graphs, one store as in gpuwatch top
        self.guard = ShutdownGuard(lambda: self.result().exit_code)

    # -- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=True)
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
            yield HotLinesTable(id="lines", timed=not self.session.options.untimed)
        yield RichLog(id="log", max_lines=2000, wrap=False, markup=False, highlight=False)
        yield ProgressLine(id="progress")
        yield StatusLine(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#log", RichLog).border_title = "Script output"
        self.query_one(RatesPanel).show(None, None)
        if self.session.process is None:
            self.session.start()
        sim = " — SIMULATED GPU (--fake-cuda)" if self.session.options.fake_cuda else ""
        self.sub_title = printable(" ".join(self.session.target.command)) + sim
        close_on_signals(self._closed_by_signal)
        self._show_used_gpus([])
        self._relayout()
        self.start_sampling()
        self.set_interval(PUMP_S, self._pump)
        self._show_status()

    def on_resize(self, event: events.Resize) -> None:
        self._relayout(event.size.width, event.size.height)

    def _relayout(self, width: int | None = None, height: int | None = None) -> None:
        if width is None or height is None:
            width, height = self.size
        # NB: below 120 columns the rates panel gives the hot lines ten more columns.
        self.query_one(RatesPanel).set_class(width < 120, "-narrow")
        if self.sampler is None:
            return
        self.query_one(GpuCards).relayout(width, height)

    # -- GPU stats ----------------------------------------------------------------------------

    def on_sampling_app_snapshot_ready(self, message: SamplingApp.SnapshotReady) -> None:
        # NB: the report's GPU samples share the profile's clock (its events' t is seconds
        # since the profile started, not since the child was spawned) and stop with the script.
        t0 = self.profile_t0
        pids = (self.session.pid,) if self.session.pid is not None else ()
        for g in message.snapshot.gpus:
            if t0 is not None and self.done is None and self.exit_code is None:
                self.gpu_samples.append(sample_row(round(time.monotonic() - t0, 3), g, pids))
            self.history.of(g.index).add(g)
            if not self.paused:
                try:
                    card = self.query_one(f"#gpu-{g.index}", GpuCard)
                except NoMatches:  # a sample that arrived while the app shuts down
                    return
                card.show(g, self.history.of(g.index))

    def _show_used_gpus(self, devices: list[dict[str, Any]] | None = None) -> None:
        """Cards for the GPUs the script uses (every card with ``a``, or when there is no
        telling which: MIG slices); none until it uses one, and a line says so."""
        if self.sampler is None:
            return
        if devices is not None:
            self._devices = devices
        used = used_gpu_indices(self._devices, self.gpu_samples, self.mig_gpus)
        shown = None if self.show_all_gpus or used is None else used
        cards = self.query_one(GpuCards)
        changed = cards.show_only(shown)
        cards.display = shown is None or bool(shown)
        note = self.query_one("#gpu-note", Static)
        note.display = not cards.display
        if changed:
            self._relayout()

    def action_toggle_all_gpus(self) -> None:
        self.show_all_gpus = not self.show_all_gpus
        self._show_used_gpus()

    # -- the child ----------------------------------------------------------------------------

    def _pump(self) -> None:
        if not self.is_running:  # shutting down: on_unmount drains what is left
            return
        drained = self.session.drain()
        fresh = self._take(drained.messages)
        log = self.query_one("#log", RichLog)
        for problem in drained.problems:
            self.problems.append(problem)
            self.notify(problem, severity="warning", timeout=4)
        lines = drained.lines
        if self.paused:
            self._held_lines.extend(lines)
        else:
            for stream, text in lines:
                log.write(Text(text, style="red" if stream == "stderr" else ""))
            if fresh:  # redraw only what changed: a quiet screen costs the terminal nothing
                self._refresh_counters()
        self.query_one(ProgressLine).show(
            "" if self.exit_code is not None else self.session.progress()
        )
        if self.exit_code is None and self.session.finished_reading:
            self._pump_rest()
            self._ended()
        self._show_status()

    def _take(self, messages: list[Message]) -> bool:
        """Keeps what the child said; True if a new snapshot came."""
        fresh = False
        for msg in messages:
            if isinstance(msg, Hello):
                self.profile_t0 = time.monotonic()  # the profile starts right after
            elif isinstance(msg, LiveSnapshot):
                fresh = True
                if self.last_snapshot is None:  # the child's own clock: elapsed since the start
                    self.profile_t0 = time.monotonic() - msg.elapsed_s
                self.last_snapshot = msg
                self.snapshots_seen += 1
                self._rates.add(msg.elapsed_s, msg.totals)
            elif isinstance(msg, Done):
                self.done = msg
            elif isinstance(msg, Fatal):
                self.fatal = msg.error
        return fresh

    def _pump_rest(self) -> None:
        """After the child exited: whatever is still queued (the done message, the last lines)."""
        drained = self.session.drain(max_lines=10_000)
        self._take(drained.messages)
        if not self.is_running:
            return
        log = self.query_one("#log", RichLog)
        for stream, text in [*self._held_lines, *drained.lines]:
            log.write(Text(text, style="red" if stream == "stderr" else ""))
        self._held_lines.clear()

    def _refresh_counters(self) -> None:
        snap, panel = self.last_snapshot, self.query_one(RatesPanel)
        panel.counting = snap.counting if snap else panel.counting
        panel.show(self._rates.rates(), snap.totals if snap else None, self.exit_code is not None)
        if snap is not None:
            self.query_one(HotLinesTable).show(snap.sites, snap.site_count, snap.counting)
            self._show_used_gpus(snap.devices)

    def _ended(self, interactive: bool = True) -> None:
        code = self.session.exit_code
        how = ChildSession.describe_exit(self.session.returncode)
        if self.done is not None:
            self.exit_code = self.done.exit_code
            self.report = Report.from_dict(self.done.report)
        elif self.fatal is not None:
            self.exit_code = 2
            if interactive:
                self.notify(self.fatal, severity="error", timeout=10)
            return
        else:
            self.exit_code = code if code is not None else 1
            self.report = report_from_snapshot(
                self.last_snapshot,
                [printable(c) for c in self.session.target.command],
                self.exit_code,
                f"the script's process ended without a report: {how}",
            )
        if self.signalled is not None and self.report.partial:
            name = signal.Signals(self.signalled).name
            self.report.error = f"stopped: gpuwatch received {name} ({self.report.error})"
        samples_of_used_gpus(self.report, self.gpu_samples, self.mig_gpus)
        self.report.options = self.report.options.replace(
            gpu_stats=self.sampler.source if self.sampler is not None else self.no_gpu_reason
        )
        self.written = write_reports(self.report, self.outputs)
        if not interactive:
            return
        for ok, message in self.written:
            self.notify(message, severity="information" if ok else "error", timeout=6)
        self._refresh_counters()
        self.action_summary()

    # -- signals ------------------------------------------------------------------------------

    def _closed_by_signal(self, signum: int) -> None:
        self.signalled = signum if self.signalled is None else self.signalled
        self.action_quit_or_stop() if self.exit_code is not None else self.exit()

    def result(self) -> LiveResult:
        """What the run left, once the app has exited."""
        code = self.exit_code if self.exit_code is not None else 1
        if self.signalled is not None:
            code = 128 + self.signalled  # gpuwatch itself was stopped: say so, as a shell expects
        return LiveResult(code, self.report, list(self.written), self.fatal, self.signalled)

    def run_guarded(self) -> LiveResult:
        """Runs the app; SIGTERM/SIGHUP end it with the report written (gpuwatch/app/signals.py)."""
        run_restoring_signals(self, self.guard)
        return self.result()

    def _show_status(self) -> None:
        if self.exit_code is None:
            state = "stopping…" if self.session.stop_requested else "running"
            if self.paused:
                state += " (display paused: p resumes)"
        elif self.fatal is not None:
            state = f"could not start: {self.fatal}"
        else:
            state = f"ended: {ChildSession.describe_exit(self.session.returncode)}"
            if self.report is not None and self.report.partial:
                state += " (partial report)"
        self.query_one(StatusLine).show(
            state, self.session.started_at, self.session.pid, self.last_snapshot, self.exit_code
        )

    # -- actions ------------------------------------------------------------------------------

    def action_quit_or_stop(self) -> None:
        if self.exit_code is not None:  # the report is out: the exit is bounded from here
            self.guard.arm()
            return self.exit(self.exit_code)

        def answer(yes: bool | None) -> None:
            if yes:
                self.session.interrupt()
                self.set_timer(STOP_GRACE_S, self._kill_if_still_running)

        self.push_screen(
            ConfirmScreen("The script is still running.\nStop it? Its report is kept."), answer
        )

    def _kill_if_still_running(self) -> None:
        if self.session.returncode is None:
            self.session.kill()

    def action_stack(self) -> None:
        if self.exit_code is not None or self.session.pid is None:
            self.notify("the script has ended", severity="warning")
            return
        command = printable(" ".join(self.session.target.command))
        dumper = users_dumper(self.stack_dumper, command)
        self.push_screen(StackScreen(self.session.pid, command, dumper))

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused:
            log = self.query_one("#log", RichLog)
            for stream, text in self._held_lines:
                log.write(Text(text, style="red" if stream == "stderr" else ""))
            self._held_lines.clear()
            self._refresh_counters()
        self._show_status()

    def action_summary(self) -> None:
        if self.report is None:
            self.notify("the summary comes when the script ends", severity="information")
            return
        from gpuwatch.report.text import summary

        title = f"Summary: {ChildSession.describe_exit(self.session.returncode)}"
        self.push_screen(SummaryScreen(summary(self.report, top=self.top), title))

    def action_help(self) -> None:
        about = (
            "The script runs in its own process under the profiler; its counters arrive "
            "several times a second. Closing the app stops the script and keeps the report."
        )
        self.push_screen(HelpScreen([("gpuwatch profile --live", self.BINDINGS)], about=about))

    def on_unmount(self) -> None:
        self.stop_sampling()
        if self.exit_code is None:
            # Closed while the script runs: stop it, and keep whatever report it sends.
            self.session.stop(grace_s=STOP_GRACE_S)
            self._pump_rest()
            self._ended(interactive=False)
        self.guard.arm()  # the report is out: what is left of the exit is bounded
