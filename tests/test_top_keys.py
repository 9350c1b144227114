"""gpuwatch top at its edges: keys typed right after ``/`` go to the filter, and 64 GPUs at 80x24
open at the first GPU with the process table reachable."""

from __future__ import annotations

import pytest
from textual import events
from textual.widgets import Input

from gpuwatch.ui.widgets import GpuCards, ProcessTable
from tests.conftest import wait_until
from tests.test_top_app import make_app, started


async def test_keys_typed_at_once_after_slash_go_to_the_filter(clock):
    app, _ = make_app(clock)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        table = app.query_one(ProcessTable)
        before = (table.sort_column, table.sort_reverse)
        # NB: posted together, as a fast typist's keys arrive in one read from the terminal:
        # "r" would reverse the sort if it reached the table before the filter had focus.
        for key in "/car":
            app.post_message(events.Key("slash" if key == "/" else key, key))
        await wait_until(lambda: app.query_one("#filter", Input).value == "car")
        assert (table.sort_column, table.sort_reverse) == before
        await pilot.press("slash", "b", "i", "n")  # in the filter, "/" is text (a path)
        assert app.query_one("#filter", Input).value == "car/bin"


@pytest.mark.slow
async def test_64_gpus_at_80x24_open_at_gpu_0_with_the_processes_reachable(clock):
    app, _ = make_app(clock, gpus=64)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot.pause(0.2)
        # the screen itself no longer scrolls (it opened scrolled by 47 rows, to GPUs 47-63)
        assert app.screen.scroll_y == 0 and app.screen.max_scroll_y == 0
        cards = app.query_one(GpuCards)
        # 24 rows - 10 kept for the title, the table and the footer: the cards scroll in 14
        assert (cards.region.y, cards.region.height, cards.scroll_y) == (1, 14, 0)
        assert app.query_one("#gpu-0").region.y == 1  # GPU 0 first, on screen
        table = app.query_one(ProcessTable)
        assert table.row_count >= 1 and table.region.height == 8 and table.region.bottom <= 23
        table.focus()
        await pilot.press("down")  # the process rows are reachable from the keyboard
        assert table.cursor_row == 1 and app.screen.scroll_y == 0
