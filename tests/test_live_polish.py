"""What a first run of ``--live`` and the reports shows a user, at 80x24 and 160x45: each rough
edge of the issue, driven with Pilot or rendered, as a user would see it."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from gpuwatch.analysis import analyze
from gpuwatch.cli import main as cli
from gpuwatch.monitor.nvml import FakeBackend, Sampler
from gpuwatch.output.write import Output
from gpuwatch.profile.live.model import LiveRun
from gpuwatch.profile.live.protocol import Hello
from gpuwatch.profile.live.session import ChildSession, InMemorySource
from gpuwatch.profile.run import ProfileOptions
from gpuwatch.profile.runner import Target
from gpuwatch.ui.live.app import LiveApp
from gpuwatch.ui.screens import HelpScreen
from gpuwatch.ui.widgets import GpuCard, HotLinesTable, RatesPanel, StatusLine
from gpuwatch.ui.widgets.hot_lines import layout, short_path
from tests.conftest import plain, wait_until
from tests.live_helpers import copies_report, finished, snapshot_of

# Copies from a deep folder, so the line column has a long path to shorten.
SCRIPT = textwrap.dedent("""
    import sys, time, torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    time.sleep(float(sys.argv[1]))  # before any GPU is used
    with FakeTensorMode(shape_env=ShapeEnv()):
        for i in range(int(sys.argv[2])):
            torch.randn(1536).to("cuda:1")  # 6.0 KiB each, on the second GPU
            torch.randn(4).to("cuda:1").sum().item()
            time.sleep(0.01)
""")


def make_app(tmp_path: Path, *args: str, options: ProfileOptions | None = None) -> LiveApp:
    folder = tmp_path / "experiments" / "2026" / "resnet_baseline"
    folder.mkdir(parents=True)
    (folder / "train_loop.py").write_text(SCRIPT)
    session = ChildSession(
        Target("experiments/2026/resnet_baseline/train_loop.py", list(args)),
        options or ProfileOptions(),
        interval_s=0.1,
        cwd=str(tmp_path),
    )
    outputs = [Output("json", str(tmp_path / "r.json"))]
    return LiveApp(
        LiveRun(session, outputs, gpu_stats="demo"),
        Sampler(FakeBackend(gpu_count=2), interval_s=0.2),
        gpu_interval_s=0.2,
    )


LOOP_PATH = "experiments/2026/resnet_baseline/train_loop.py"


def in_memory_app(script: InMemorySource) -> LiveApp:
    """The live view over a script held in memory (what SCRIPT's child sends, without one)."""
    return LiveApp(
        LiveRun(script, [], gpu_stats="demo"),
        Sampler(FakeBackend(gpu_count=2), interval_s=0.2),
        gpu_interval_s=0.2,
    )


def shown_cards(app: LiveApp) -> list[int]:
    return [c.index for c in app.query(GpuCard) if c.display and app.query_one("#cards").display]


async def test_at_80x24_cards_follow_the_gpus_used_lines_fit_and_rates_stop():
    script = InMemorySource(Target(LOOP_PATH, ["0.8", "20"]))
    script.send(
        Hello(7, [LOOP_PATH, "0.8", "20"]), snapshot_of(copies_report(LOOP_PATH, 0, None), 0.5)
    )
    app = in_memory_app(script)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(lambda: app.model.snapshots_seen >= 1, 30)
        # Before the script touches a GPU: no card is the script's, a line says so.
        assert shown_cards(app) == [] and app.query_one("#gpu-note").display
        await pilot.press("a")  # every GPU on request
        await pilot.pause()
        assert shown_cards(app) == [0, 1]
        await pilot.press("a")
        for i, steps in enumerate((5, 10, 20)):  # then its copies to cuda:1, step by step
            script.send(snapshot_of(copies_report(LOOP_PATH, steps, "cuda:1"), 1.0 + 0.2 * i))
        await wait_until(lambda: shown_cards(app) == [1], 30)  # it used cuda:1 only
        table = app.query_one(HotLinesTable)
        await wait_until(lambda: len(table.lines) >= 2, 30)
        # 42 columns for the table at 80x24 (the rates panel narrows): the figures that matter
        # stay whole, the path is short, and the source is what goes.
        assert table.shown_columns == ["line", "syncs", "bytes"]
        labels = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert labels and all(label.startswith("…/train_loop.py:") for label in labels), labels
        col = table.shown_columns.index("bytes")
        assert any(str(table.get_row_at(i)[col]).endswith("KiB") for i in range(table.row_count))
        script.send(finished(copies_report(LOOP_PATH, 20, "cuda:1")))
        script.exit(0)
        await wait_until(lambda: app.ended is not None, 30)
        await pilot.press("escape")  # the summary screen the run ends on
        rates = app.query_one(RatesPanel)
        await wait_until(lambda: rates.border_title == "Rates (script ended)", 30)
        text = plain(rates)
        assert "the script has ended" in text and "/s" in text
        assert "MiB/s" not in text and "KiB/s" not in text  # no rate left standing


@pytest.mark.slow
async def test_live_on_the_fast_path_counts_copies_and_says_ops_are_not_counted(tmp_path):
    app = make_app(tmp_path, "0", "30", options=ProfileOptions(kernel_timing=False))
    async with app.run_test(size=(120, 40)):
        await wait_until(lambda: app.model.snapshots_seen >= 2, 30)
        assert app.model.last_snapshot is not None and app.model.last_snapshot.counting == "copies"
        await wait_until(
            lambda: (
                "ops not counted, not timed (--no-kernel-timing)"
                in plain(app.query_one(RatesPanel))
            ),
            30,
        )
        await wait_until(lambda: " lines" in plain(app.query_one(StatusLine)), 30)
        assert " ops" not in plain(app.query_one(StatusLine))
        table = app.query_one(HotLinesTable)  # no time columns of 0 µs: it says why instead
        await wait_until(lambda: len(table.lines) >= 1, 30)
        assert table.shown_columns == ["line", "syncs", "bytes", "copies", "source"]
        assert str(table.border_title).endswith("; kernel time not measured)")
        await wait_until(lambda: app.ended is not None, 60)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["options"]["counting"] == "copies" and doc["totals"]["ops"] == 0
    # 30 steps, two copies each (6 KiB and 16 bytes), one .item() (4 bytes back)
    h2d = doc["totals"]["h2d"]
    assert (h2d["count"], h2d["bytes"]) == (60, 30 * (6144 + 16))
    assert doc["totals"]["syncs"]["by_cause"] == {"copy_to_device": 60, "item": 30}


async def test_at_160x45_the_source_gets_the_room_the_path_gave_back():
    script = InMemorySource(Target(LOOP_PATH, ["0", "30"]))
    script.send(Hello(7, [LOOP_PATH, "0", "30"]), snapshot_of(copies_report(LOOP_PATH, 30), 0.5))
    app = in_memory_app(script)
    async with app.run_test(size=(160, 45)):
        table = app.query_one(HotLinesTable)
        await wait_until(lambda: len(table.lines) >= 2, 60)
        assert table.shown_columns == [
            "line",
            "syncs",
            "bytes",
            "copies",
            "kernel",
            "its bwd",
            "ops",
            "source",
        ]
        line, source = table.columns["line"], table.columns["source"]  # type: ignore[index]
        # The line holds "…/train_loop.py:9" (17), not the 47-character path: the source gets
        # 34 columns where it had about 25.
        assert line.width == 17 and source.width == 34


def test_the_line_column_shortens_paths_and_the_source_goes_first():
    assert short_path("experiments/2026/resnet/train.py", 40) == "experiments/2026/resnet/train.py"
    assert short_path("experiments/2026/resnet/train.py", 17) == "…/resnet/train.py"
    assert short_path("experiments/2026/resnet/train.py", 12) == "…/train.py"
    assert short_path("experiments/2026/resnet/train.py", 8) == "train.py"
    assert short_path("experiments/2026/resnet/train.py", 5) == "…n.py"  # the number stays whole
    # 20 + 2 for the line, 6 figures with their padding (8 + 11 + 10 + 8 + 10 + 8 = 55): 81 left
    assert layout(160, 20) == (["syncs", "bytes", "copies", "kernel", "its bwd", "ops"], 81)
    # Narrower: ops, its bwd, copies go (last first) while the source has under 16 columns...
    # 16 + 2, then syncs 8, bytes 11, kernel 10: 47 used, 2 for the scrollbar: 21 left
    assert layout(70, 16) == (["syncs", "bytes", "kernel"], 21)
    # ...then the source itself: syncs and bytes stay at any width.
    assert layout(40, 16) == (["syncs", "bytes"], 0)
    # Kernel time not measured: no time columns (8 + 11 + 8 + 8 = 35 for the figures): 101 left
    assert layout(160, 20, timed=False) == (["syncs", "bytes", "copies", "ops"], 101)


def test_hints_wrap_and_are_never_cut_at_any_width():
    from gpuwatch.analysis.hints import hints
    from gpuwatch.output.text import summary
    from tests.test_report_render import report

    r = report()
    messages = [h.message for h in hints(r)]
    assert messages
    for width in (60, 80, 100):
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(summary(r, analyze(r)))
        # the hints, right under the header, up to the tables after them
        text = out.getvalue().split("Hints", 1)[1].split("Copies", 1)[0]
        assert "…" not in text
        flowing = " ".join(text.split())
        for message in messages:
            assert " ".join(message.split()) in flowing, (width, message)


def test_html_header_shows_local_time_to_the_second_with_its_zone(monkeypatch):
    import time as _time

    from gpuwatch._format import local_time

    monkeypatch.setenv("TZ", "Europe/Paris")
    _time.tzset()
    try:
        assert local_time("2026-11-23T19:20:09.223341+00:00") == "2026-11-23 20:20:09 CET"
        assert local_time("not a time") == "not a time" and local_time(None) == "?"
    finally:
        monkeypatch.undo()
        _time.tzset()


def test_report_help_describes_top(capsys):
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])
    out = capsys.readouterr().out
    words = " ".join(out.split())  # NB: argparse wraps the help at the terminal's width
    assert "--top N" in out and "lines per top list (default 5; a saved diff's lines: 20)" in words


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
async def test_the_live_help_wraps_inside_the_screen(size):
    from textual.app import App

    class Host(App[None]):
        def on_mount(self) -> None:
            about = "The script runs in its own process under the profiler. " * 4
            self.push_screen(HelpScreen([("gpuwatch profile --live", LiveApp.BINDINGS)], about))

    app = Host()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        about = app.screen.query_one("#help-about")
        box = app.screen.query_one("VerticalScroll")
        assert box.region.right <= size[0] and about.region.right <= box.region.right
        assert about.size.height >= 2  # the paragraph wraps inside the box, nothing runs off
        table = app.screen.query_one("#help-table")
        assert table.region.right <= box.region.right


def test_live_honours_gpu_interval(tmp_path, monkeypatch):
    from gpuwatch.profile.live.result import LiveResult

    seen = {}

    def run_guarded(self: LiveApp) -> LiveResult:
        seen["app"] = self.interval_s
        seen["sampler"] = self.sampler.interval_s if self.sampler else None
        return LiveResult(0, None, [], None, None)

    monkeypatch.setattr(LiveApp, "run_guarded", run_guarded)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.py").write_text("pass\n")
    assert cli.main(["profile", "--live", "--demo", "--gpu-interval", "2.5", "s.py"]) == 0
    assert seen == {"app": 2.5, "sampler": 2.5}
