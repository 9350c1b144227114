"""What ``gpuwatch top`` puts on the screen and what a tick redraws: the sort arrow on every
column, a small terminal's layout, units, and cells updated in place rather than the table rebuilt."""

from __future__ import annotations

import dataclasses

import pytest

from gpuwatch.monitor.nvml import FakeBackend
from gpuwatch.ui.widgets import GpuCard, ProcessTable
from gpuwatch.ui.widgets.gpu_card import CardBody, stats_text, transfer_text
from gpuwatch.ui.widgets.process_table import COLUMNS
from tests.conftest import screen_lines, wait_until
from tests.test_top_app import make_app, started


@pytest.mark.slow
async def test_the_sorted_column_shows_its_arrow_whichever_it_is(clock):
    app, _ = make_app(clock)
    async with app.run_test(size=(100, 30)) as pilot:
        await started(app, pilot)
        table = app.query_one(ProcessTable)
        for i, col in enumerate(COLUMNS):
            for reverse, arrow in ((True, "▼"), (False, "▲")):
                table.sort_by(i, reverse)
                await pilot.pause()
                header = table.render_line(0).text
                assert f"{col.title}{arrow}" in header, (col.title, header)
                others = [c.title for j, c in enumerate(COLUMNS) if j != i]
                assert all(f"{t}▼" not in header and f"{t}▲" not in header for t in others)


async def test_a_tick_updates_cells_in_place_and_rebuilds_only_when_rows_change(clock):
    app, backend = make_app(clock)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        table = app.query_one(ProcessTable)
        table.sort_by(1, True)  # by PID: the order cannot change as the values move
        await pilot.pause()
        rebuilds = table.rebuilds
        cpu = [p.cpu_pct for p in table.shown_processes]
        clock.advance(13.0)
        n = app.samples_taken
        await wait_until(lambda: app.samples_taken >= n + 2)
        await pilot.pause()
        now = {p.pid: p for p in app.snapshot.processes}  # the latest sample
        shown = table.shown_processes
        assert [p.cpu_pct for p in shown] != cpu  # the values moved...
        assert table.rebuilds == rebuilds  # ...and no row was laid out again
        for row, p in enumerate(shown):  # every cell shows the latest value
            cells = [str(table.get_cell_at((row, i))) for i in range(len(COLUMNS))]
            assert cells == [c.cell(now[p.pid]) for c in COLUMNS]
        table.set_filter("bob")  # rows go: laid out again, once
        assert table.rebuilds == rebuilds + 1
        assert {p.user for p in table.shown_processes} == {"bob"}


@pytest.mark.slow
async def test_80x24_keeps_title_and_footer_whole_and_fills_its_rows(clock):
    app, _ = make_app(clock, gpus=2)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await wait_until(lambda: screen_lines(app)[-1].rstrip().endswith("? Help"))
        lines = screen_lines(app)
        assert len(lines) == 24
        assert "gpuwatch top — demo · 2 GPUs · every 0.1 s" in lines[0]
        assert "…" not in lines[0]
        # when the figures were sampled (the title follows each new sample, so wait for it to
        # catch up with the latest one: samples come every 0.1 s, faster than a loaded repaint)
        await wait_until(lambda: f"· {app.snapshot.time:%H:%M:%S}" in screen_lines(app)[0])
        assert lines[-1].rstrip().endswith("? Help")  # the palette hint gave way, not Help
        cards = list(app.query(GpuCard))
        # Two brief cards (meters and stats, no graphs) rather than two one-line ones.
        assert [c.region.height for c in cards] == [7, 7]
        assert not any("max" in line for line in lines)  # no graph, nor its peak
        assert any("TEMP" in line for line in lines) and any("PCIe RX" in line for line in lines)
        table = app.query_one(ProcessTable)
        assert table.region.bottom == 23  # the table runs down to the footer
        assert sum("compute" in line for line in lines) == 4  # and shows every process
        await pilot.resize_terminal(160, 48)
        await wait_until(lambda: [c.region.height for c in cards] == [11, 11])
        graphs = [c.query_one(CardBody).lines()[6:] for c in cards]
        assert [[line.plain[:5] for line in g] for g in graphs] == [["util ", "mem  ", "pcie "]] * 2
        assert "driver" in screen_lines(app)[0]  # room again for the driver version


async def test_one_gpu_at_80x24_keeps_its_graphs(clock):
    app, _ = make_app(clock, gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        card = app.query_one(GpuCard)
        assert card.region.height == 11 and card.graphs


def test_transfers_use_binary_units_and_fit_the_narrowest_card(clock):
    g = dataclasses.replace(
        FakeBackend(gpu_count=1, clock=clock).sample(0),
        pcie_rx_bytes_per_s=660 * 1024**2,
        pcie_tx_bytes_per_s=1.5 * 1024**3,
        nvlink_rx_bytes_per_s=12 * 1024**3,
        nvlink_tx_bytes_per_s=None,
    )
    wide = transfer_text(g, 74).plain
    assert wide == "PCIe RX 660MiB/s TX 1.5GiB/s  NVLink RX 12GiB/s TX N/A"
    narrow = transfer_text(g, 52).plain
    assert narrow == "PCIe ↓660MiB/s ↑1.5GiB/s  NVLink ↓12GiB/s ↑N/A"
    assert all(len(line) <= 52 for line in stats_text(g, 52).plain.splitlines()[1:])


async def test_help_wraps_its_text_in_a_narrow_terminal(clock):
    app, _ = make_app(clock)
    async with app.run_test(size=(60, 30)) as pilot:
        await started(app, pilot)
        await pilot.press("question_mark")
        await wait_until(lambda: "ctrl+p" in "\n".join(screen_lines(app)))
        text = "\n".join(screen_lines(app))
        words = ["command", "palette", "SIGTERM/SIGINT/SIGKILL", "py-spy", "column"]
        assert all(w in text for w in words), text
        assert "ctrl+p" in text


async def test_a_new_value_repaints_only_the_rows_it_changed(clock):
    app, _ = make_app(clock, gpus=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        app.action_toggle_pause()  # no sample lands while the rows are counted
        await wait_until(lambda: app.paused)
        await pilot.pause()  # what was posted before the pause is handled (and dropped)
        body = app.query_one(CardBody)
        assert body.sample is not None
        painted: list[int] = []
        draw = body.render_line
        body.render_line = lambda y: painted.append(y) or draw(y)  # type: ignore[method-assign]
        slower = dataclasses.replace(body.sample, sm_clock_mhz=1)
        body.show(slower, body.history, graphs=True)
        await wait_until(lambda: bool(painted))
        await pilot.pause()  # the repaint is done: every row it paints is painted by now
        assert painted == [3]  # the clocks' row only (meters 0-1, stats 2-4, graphs 5-7)
        assert body.lines()[3].plain.startswith("SM 1 MHz  MEM")
