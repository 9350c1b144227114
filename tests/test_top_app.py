"""gpuwatch top driven through Textual's Pilot with the FakeBackend."""

from __future__ import annotations

import signal

import pytest
from textual.widgets import Input

from gpuwatch.monitor.nvml import FakeBackend
from gpuwatch.monitor.nvml.sampler import Sampler
from gpuwatch.monitor.nvml.samples import GpuSample
from gpuwatch.monitor.pyspy import StackDumpError
from gpuwatch.ui.screens import HelpScreen, KillScreen, StackScreen
from gpuwatch.ui.top.app import TopApp
from gpuwatch.ui.widgets import GpuCard, ProcessTable
from gpuwatch.ui.widgets.gpu_card import CardBody
from tests.conftest import plain, wait_until


def make_app(clock, gpus: int = 2, **kw) -> tuple[TopApp, FakeBackend]:
    backend = FakeBackend(gpu_count=gpus, clock=clock)
    return TopApp(backend, interval_s=0.1, **kw), backend


async def started(app: TopApp, pilot) -> None:
    await wait_until(lambda: app.samples_taken >= 1)
    await pilot.pause()


async def test_cards_show_the_backend_values(clock):
    app, backend = make_app(clock)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        expected = backend.sample(1)  # the clock is frozen: same values as the app's sample
        card = app.query_one("#gpu-1", GpuCard)
        assert not card.compact
        rows = [line.plain for line in card.query_one(CardBody).lines()]
        sm = f"SM {expected.sm_active_pct:>3.0f}%"  # GPM's SM activity beside NVML's busy
        assert rows[0].startswith("GPU  █") and rows[0].endswith(f" {expected.gpu_util_pct}% {sm}")
        used = f"{expected.memory_used_bytes / 1024**3:.1f} GiB / 80.0 GiB"
        assert rows[1].startswith("MEM  ") and rows[1].endswith(used)
        stats = "\n".join(rows[2:5])
        assert f"TEMP {expected.temperature_c}C" in stats
        assert f"POWER {expected.power_w:.0f}W / 700W" in stats
        assert "FAN N/A" in stats  # the fake H100 reports no fan, like the real board
        assert card.border_title == "GPU 1 · NVIDIA H100 80GB HBM3 (demo)"


async def test_values_move_with_time_and_history_grows(clock):
    app, backend = make_app(clock, gpus=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        first = app.query_one("#gpu-0", GpuCard).sample
        clock.advance(7.0)
        n = app.samples_taken
        await wait_until(lambda: app.samples_taken >= n + 2)
        # NB: a sample is taken on the sampling thread and drawn later on the event loop: wait
        # for the card to show the backend's value now, then check that it moved
        now = backend.sample(0).gpu_util_pct
        await wait_until(lambda: app.query_one("#gpu-0", GpuCard).sample.gpu_util_pct == now)
        assert now != first.gpu_util_pct
        assert len(app.history.of(0).util_pct) >= 3


@pytest.mark.slow
async def test_process_table_sorts_by_gpu_memory_then_cycles(clock):
    app, backend = make_app(clock)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        table = app.query_one(ProcessTable)
        mems = [p.gpu_memory_bytes for p in table.shown_processes]
        assert len(mems) == 4 and mems == sorted(mems, reverse=True)
        await pilot.press("s")  # next column: SM%, largest first
        sms = [p.sm_util_pct for p in table.shown_processes]
        assert sms == sorted(sms, reverse=True)
        await pilot.press("r")
        assert [p.sm_util_pct for p in table.shown_processes] == sorted(sms)
        for _ in range(5):  # CPU%, HOST MEM, JOB, COMMAND, then wraps to GPU
            await pilot.press("s")
        assert [p.gpu_index for p in table.shown_processes] == [1, 1, 0, 0]


@pytest.mark.slow
async def test_clicking_a_header_sorts_by_that_column(clock):
    app, _ = make_app(clock)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        table = app.query_one(ProcessTable)
        table.sort_by(1)  # PID, through the same path a header click takes
        await pilot.pause()
        pids = [p.pid for p in table.shown_processes]
        assert pids == sorted(pids, reverse=True)


@pytest.mark.slow
async def test_filter_narrows_the_table_and_escape_clears(clock):
    app, _ = make_app(clock)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        table = app.query_one(ProcessTable)
        await pilot.press("slash")
        await wait_until(lambda: app.focused is app.query_one("#filter", Input))
        await pilot.press(*"bob")
        # NB: waits rather than asserting at once: the Input's Changed messages reach the app
        # a moment after the keys on a loaded machine.
        await wait_until(lambda: table.filter_text == "bob")
        assert {p.user for p in table.shown_processes} == {"bob"} and len(
            table.shown_processes
        ) == 2
        assert "filter: 'bob'" in table.border_title
        await pilot.press("enter")  # keeps the filter, back to the table
        await wait_until(lambda: app.focused is table)
        assert len(table.shown_processes) == 2
        clock.advance(1)
        n = app.samples_taken
        await wait_until(lambda: app.samples_taken > n)
        assert {p.user for p in table.shown_processes} == {"bob"}  # still filtered after a tick
        await pilot.press("escape")
        await wait_until(lambda: table.filter_text == "")
        assert len(table.shown_processes) == 4


async def test_pause_stops_updates(clock):
    app, backend = make_app(clock, gpus=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        await pilot.press("space")
        assert app.paused and "PAUSED" in app.sub_title
        frozen = app.query_one("#gpu-0", GpuCard).sample
        taken = app.samples_taken
        clock.advance(5.0)
        app.sample_now()  # a wake-up while paused must not sample
        await wait_until(app.sampling_held.is_set)  # the thread waits at the closed gate
        await pilot.pause()  # anything already posted is handled (and dropped: paused)
        assert app.samples_taken == taken
        assert app.query_one("#gpu-0", GpuCard).sample == frozen
        await pilot.press("space")
        await wait_until(lambda: app.samples_taken > taken)
        assert app.query_one("#gpu-0", GpuCard).sample != frozen


@pytest.mark.slow
async def test_help_lists_every_binding(clock):
    app, _ = make_app(clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = plain(app.screen.query_one("#help-table"))
        for words in ("Quit", "Pause", "Filter", "SIGTERM", "py-spy", "Sort by the next column"):
            assert words in text
        await pilot.pause()
        # On screen, not only in the widget: the box once collapsed to its border (width: auto
        # around a Static that defaulted to 1fr).
        shown = app.screen.query_one("#help-table").region
        longest = max(len(line.rstrip()) for line in text.splitlines())
        assert shown.width >= longest and shown.height >= 10
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.slow
async def test_kill_asks_first_then_sends_the_chosen_signal(clock):
    app, backend = make_app(clock)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        target = app.query_one(ProcessTable).selected
        await pilot.press("k")
        assert isinstance(app.screen, KillScreen)
        assert backend.signals == []  # nothing sent before the answer
        await pilot.press("escape")
        assert backend.signals == [] and not isinstance(app.screen, KillScreen)
        await pilot.press("k")
        await pilot.press("t")
        assert backend.signals == [(target.pid, signal.SIGTERM)]
        await wait_until(
            lambda: target.pid not in {p.pid for p in app.query_one(ProcessTable).shown_processes}
        )


@pytest.mark.slow
async def test_kill_is_refused_when_readonly(clock):
    app, backend = make_app(clock, readonly=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        await pilot.press("k")
        await pilot.pause()
        assert not isinstance(app.screen, KillScreen)
        assert backend.signals == []
        assert any("read-only" in n.message for n in app._notifications)


@pytest.mark.slow
async def test_kill_of_a_process_that_already_exited_says_so(clock):
    app, backend = make_app(clock)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        await pilot.press("space")  # paused: the table keeps showing the process after it dies
        target = app.query_one(ProcessTable).selected
        backend.send_signal(target.pid, signal.SIGKILL)
        await pilot.press("k", "t")
        assert app.query_one(ProcessTable).selected == target
        assert any(
            f"process {target.pid} has already exited" in n.message for n in app._notifications
        )


@pytest.mark.parametrize("key", ["d", "enter"])
async def test_stack_view_shows_the_dump(clock, key):
    seen = []

    def dumper(pid: int) -> str:
        seen.append(pid)
        return f'Thread {pid} (active): "MainThread"\n    train_step (train.py:42)'

    app, _ = make_app(clock, stack_dumper=dumper)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        target = app.query_one(ProcessTable).selected
        await pilot.press(key)
        assert isinstance(app.screen, StackScreen)
        await wait_until(lambda: seen == [target.pid])
        stack = app.screen.query_one("#stack")
        await wait_until(lambda: "train_step (train.py:42)" in str(stack.render()))


@pytest.mark.slow
async def test_stack_view_shows_a_clear_error(clock):
    def dumper(pid: int) -> str:
        raise StackDumpError(f"process {pid} is not a Python process")

    app, _ = make_app(clock, stack_dumper=dumper)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        await pilot.press("d")
        stack = app.screen.query_one("#stack")
        await wait_until(lambda: stack.has_class("-error"))
        assert "is not a Python process" in str(stack.render())


async def test_small_terminal_uses_compact_cards_and_resizes_live(clock):
    app, _ = make_app(clock, gpus=4)  # four brief cards would take 28 rows
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        cards = list(app.query(GpuCard))
        assert app.compact and all(c.compact for c in cards)
        assert all(c.region.height == 1 for c in cards)
        assert app.query_one(ProcessTable).region.height >= 6
        await pilot.resize_terminal(160, 48)
        await wait_until(lambda: not app.compact and all(c.region.height == 11 for c in cards))


async def test_eight_gpus_fit_at_80x24(clock):
    app, _ = make_app(clock, gpus=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.pause(0.1)
        cards = list(app.query(GpuCard))
        assert len(cards) == 8
        for card in cards:
            assert card.region.bottom <= 24 and card.region.height == 1
            line = str(card.query_one("#compact").render())
            assert line.lstrip().startswith(str(card.index)) and "%" in line
        assert app.query_one(ProcessTable).region.height >= 4


async def test_a_sample_that_lands_while_widgets_go_is_kept_not_fatal(clock):
    # On shutdown Textual removes widgets one by one; a sample already queued must not crash
    # the app (CI once saw NoMatches for the process table here).
    app, backend = make_app(clock, gpus=2)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        app.paused = True  # the worker waits at its gate from here on
        app.sample_now()
        await wait_until(app.sampling_held.is_set)  # the thread waits at the closed gate
        await pilot.pause()  # a sample already posted is handled (and dropped: paused)
        await app.query_one(ProcessTable).remove()
        app.set_reactive(TopApp.paused, False)  # unpaused, without waking the worker
        before = len(app.history.of(0).util_pct)
        snap = Sampler(backend, background_pcie=False).snapshot()
        app.on_sampling_app_snapshot_ready(TopApp.SnapshotReady(snap))
        assert len(app.history.of(0).util_pct) == before + 1  # recorded, just not drawn
        assert app.query_one("#gpu-0", GpuCard).sample is not snap.gpus[0]


@pytest.mark.slow
async def test_cards_stay_current_under_the_help_screen(clock):
    app, backend = make_app(clock, gpus=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        card = app.query_one("#gpu-0", GpuCard)
        first = card.sample
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        clock.advance(7.0)
        n = app.samples_taken
        await wait_until(lambda: app.samples_taken >= n + 2)
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert card.sample.gpu_util_pct == backend.sample(0).gpu_util_pct != first.gpu_util_pct


class LosingBackend(FakeBackend):
    """A FakeBackend whose GPUs in ``lost`` answer like NVML's GpuIsLost handling does."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.lost: set[int] = set()

    def sample(self, index: int) -> GpuSample:
        g = super().sample(index)
        if index in self.lost:
            return GpuSample(
                index=index, name=g.name, uuid=g.uuid, pci_bus_id=g.pci_bus_id, lost=True
            )
        return g


async def test_a_gpu_lost_mid_run_is_shown_not_fatal(clock):
    backend = LosingBackend(gpu_count=2, clock=clock)
    app = TopApp(backend, interval_s=0.1)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        backend.lost.add(0)
        card = app.query_one("#gpu-0", GpuCard)
        await wait_until(lambda: card.has_class("-lost"))
        await pilot.pause()
        assert "GPU LOST" in plain(card.query_one(CardBody))
        assert not app.query_one("#gpu-1", GpuCard).has_class("-lost")
        assert {p.gpu_index for p in app.query_one(ProcessTable).shown_processes} == {1}


@pytest.mark.slow
async def test_stack_of_a_simulated_process_says_so(clock):
    app, _ = make_app(clock)  # the default dumper is py-spy; demo processes are not real
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        pid = app.query_one(ProcessTable).selected.pid
        await pilot.press("d")
        stack = app.screen.query_one("#stack")
        await wait_until(lambda: stack.has_class("-error"))
        assert f"process {pid} is simulated by --demo" in plain(stack)


@pytest.mark.slow
async def test_the_mouse_sorts_by_header_and_selects_rows(clock):
    app, _ = make_app(clock)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        table = app.query_one(ProcessTable)
        await pilot.click(ProcessTable, offset=(10, 1))  # the PID header (row 1, inside the border)
        await pilot.pause()
        assert (table.sort_column, table.sort_reverse) == (1, True)
        pids = [p.pid for p in table.shown_processes]
        assert pids == sorted(pids, reverse=True)
        await pilot.click(ProcessTable, offset=(10, 1))  # again: reversed
        await pilot.pause()
        assert [p.pid for p in table.shown_processes] == sorted(pids)
        await pilot.click(ProcessTable, offset=(10, 4))  # the third row
        await pilot.pause()
        assert table.selected == table.shown_processes[2]


def test_one_history_store_keeps_five_minutes_at_any_interval():
    from gpuwatch.monitor.nvml.history import History
    from gpuwatch.monitor.nvml.samples import GpuSample, Snapshot

    history = History(interval_s=2.0)  # 300 s / 2 s = 150 values per series
    g = GpuSample(
        0, "GPU", None, None, gpu_util_pct=None, pcie_rx_bytes_per_s=5, pcie_tx_bytes_per_s=7
    )
    for _ in range(200):
        history.add(Snapshot(time=None, driver_version=None, gpus=(g,)))  # type: ignore[arg-type]
    series = history.of(0)
    assert len(series.util_pct) == 150 and set(series.util_pct) == {0.0}  # unreported: drawn as 0
    assert set(series.pcie_bytes_per_s) == {12.0}  # both directions together


def test_a_card_says_why_the_clocks_are_held_down():
    from gpuwatch.ui.widgets.gpu_card import stats_text

    def gpu(reasons: int) -> GpuSample:
        return GpuSample(
            index=0, name="x", uuid=None, pci_bus_id=None, pstate=0, throttle_reasons=reasons
        )

    assert "SLOW" not in stats_text(gpu(0x1)).plain  # idle: clocks down, nothing holding them
    held = stats_text(gpu(0x4 | 0x40)).plain
    assert "P0  SLOW power cap, HW thermal" in held
