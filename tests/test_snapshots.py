"""Whole-screen snapshots: ``gpuwatch top --demo`` and the ``--live`` view at 80x24 and 160x48
(pytest-textual-snapshot: SVG files under ``tests/__snapshots__/test_snapshots/``), and the text
summary of a fixed report (a golden text file beside them).

Every frame is deterministic: the fake GPUs and the sampler run on a fixed clock and take one
sample, the live view is fed by a script in memory that says fixed things (no process), and
nothing shows a wall clock, a host name, a pid or a path of this machine. After a change that is meant to alter what
users see, look at the report pytest writes for a failing snapshot, then accept the new frames
with ``pytest tests/test_snapshots.py --snapshot-update`` and commit them.
"""

from __future__ import annotations

import datetime as _dt
import io
from collections.abc import Iterator

import pytest
from rich.console import Console
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from textual.pilot import Pilot

from gpuwatch.analysis import analyze
from gpuwatch.monitor.nvml import FakeBackend, Sampler
from gpuwatch.output.text import summary
from gpuwatch.profile.live.model import LiveRun
from gpuwatch.profile.live.protocol import Hello, LiveSnapshot
from gpuwatch.profile.live.session import InMemorySource
from gpuwatch.profile.runner import Target
from gpuwatch.ui.live.app import LiveApp
from gpuwatch.ui.top.app import TopApp
from profilers import Line, LineStats, OpCount, Report
from tests.conftest import FakeClock, wait_until

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]
#: The time every sample says it was taken (shown by top's title line).
SAMPLED_AT = _dt.datetime(2026, 11, 24, 14, 2, 9, tzinfo=_dt.UTC)


def fixed_sampler(gpu_count: int, interval_s: float) -> Sampler:
    """Fake GPUs 42 s into their waves, sampled at :data:`SAMPLED_AT`, PCIe measured inline (no
    thread racing the first sample)."""
    clock = FakeClock(42.0)
    backend = FakeBackend(gpu_count=gpu_count, clock=clock)
    clock.advance(42.0)
    return Sampler(backend, interval_s, background_pcie=False, now=lambda: SAMPLED_AT)


@pytest.mark.parametrize("size", SIZES)
def test_top_demo(snap_compare, size: tuple[int, int]) -> None:
    sampler = fixed_sampler(4, interval_s=60.0)
    app = TopApp(sampler.backend, interval_s=60.0, sampler=sampler)

    async def two_samples(pilot: Pilot[None]) -> None:
        # NB: the first sample, and the one that un-pausing at mount asks for; the next one
        # is a minute away.
        await wait_until(lambda: app.samples_taken == 2, 30)

    assert snap_compare(app, terminal_size=size, run_before=two_samples)


# -- the live view --------------------------------------------------------------------------


def line(line: int, source: str, h2d: int, item: int, kernel_ms: float) -> dict[str, object]:
    s = LineStats("train.py", line, "train")
    s.source = source
    for _ in range(h2d):
        s.h2d.add(4 << 20, True, False)  # a 4 MiB batch from pageable memory
        s.syncs.add("copy_to_device")
    for _ in range(item):
        s.d2h.add(4, True, False)
        s.syncs.add("item")
    s.op_breakdown["mm.default"] = OpCount(2 * (h2d + item), kernel_ms)
    s.settle()
    return Line.of(s).to_dict(top_ops=3)


def totals(steps: int) -> dict[str, object]:
    """``steps`` steps of one 4 MiB batch to the GPU and one loss.item() each."""
    copies = {"pageable": steps, "non_blocking": 0}
    return {
        "h2d": {"count": steps, "bytes": steps * (4 << 20), **copies},
        "d2h": {"count": steps, "bytes": 4 * steps, **copies},
        "d2d": {"count": 0, "bytes": 0, "pageable": 0, "non_blocking": 0},
        "p2p": {"count": 0, "bytes": 0, "pageable": 0, "non_blocking": 0},
        "syncs": {"count": 2 * steps, "by_cause": {"copy_to_device": steps, "item": steps}},
        "kernel_time_ms": 3.5 * steps,
        "ops": 60 * steps,
    }


def live_snapshot(elapsed_s: float, steps: int) -> LiveSnapshot:
    lines = [
        line(31, "x = batch.to('cuda:1')", steps, 0, 1.5 * steps),
        line(36, "losses.append(loss.item())", 0, steps, 2.0 * steps),
    ]
    devices = [{"device": "cuda:1", "name": "NVIDIA H100 80GB HBM3 (demo)"}]
    return LiveSnapshot(
        elapsed_s, totals(steps), devices, lines, 2, 61 * steps, "every_op", memory=memory()
    )


def memory() -> dict[str, object]:
    """The model's 420 MiB of parameters, a step's activations and its batch, on cuda:1."""

    def row(line: int, source: str, now: int, most: int) -> dict[str, object]:
        return {
            "file": "train.py",
            "line": line,
            "function": "train",
            "source": source,
            "live_bytes": now,
            "max_bytes": most,
        }

    lines = [
        row(24, "model = Net().to('cuda:1')", 420 << 20, 420 << 20),
        row(33, "loss = model(x).square().mean()", 96 << 20, 192 << 20),
        row(31, "x = batch.to('cuda:1')", 4 << 20, 8 << 20),
    ]
    device = {
        "device": "cuda:1",
        "live_bytes": 520 << 20,
        "peak_bytes": 1224 << 20,
        "capacity_bytes": 80 << 30,
    }
    return {
        "tracked": True,
        "source": "measured",
        "devices": [device],
        "lines": lines,
        "line_count": 5,
        "failure": None,
    }


@pytest.fixture
def speaking_child() -> Iterator[InMemorySource]:
    """A script (in memory: no process) that says hello, sends two snapshots, prints two lines
    and a progress bar, then runs until the view closes."""
    source = InMemorySource(Target("train.py", ["--epochs", "3"]))
    source.send(Hello(4242, ["train.py", "--epochs", "3"]))
    source.send(live_snapshot(1.0, 20), live_snapshot(2.0, 40))
    source.print("epoch 1 loss 0.931")
    source.print("epoch 2 loss 0.877")
    source.show_progress(" 40%|####      | 4/10")
    yield source
    source.kill()
    assert source.returncode is not None


@pytest.mark.parametrize("size", SIZES)
def test_live_view(snap_compare, speaking_child: InMemorySource, size: tuple[int, int]) -> None:
    run = LiveRun(speaking_child, gpu_stats="demo", clock=FakeClock(), stop_grace_s=0.5)
    app = LiveApp(run, fixed_sampler(2, interval_s=60.0), gpu_interval_s=60.0, header_clock=False)

    async def everything_in(pilot: Pilot[None]) -> None:
        log = app.query_one("#log")
        await wait_until(
            lambda: (
                run.snapshots_seen == 2
                and len(log.lines) == 2  # type: ignore[attr-defined]
                and "40%" in app.query_one("#progress").text  # type: ignore[attr-defined]
                and len(app.history.of(1).util_pct) == 1
            ),
            30,
        )

    assert snap_compare(app, terminal_size=size, run_before=everything_in)


@pytest.mark.parametrize("size", SIZES)
def test_live_view_memory_by_line(
    snap_compare, speaking_child: InMemorySource, size: tuple[int, int]
) -> None:
    """Key m: the lines holding the most GPU memory now, in place of the hottest lines."""
    run = LiveRun(speaking_child, gpu_stats="demo", clock=FakeClock(), stop_grace_s=0.5)
    app = LiveApp(run, fixed_sampler(2, interval_s=60.0), gpu_interval_s=60.0, header_clock=False)

    async def memory_shown(pilot: Pilot[None]) -> None:
        log = app.query_one("#log")
        await wait_until(
            lambda: (
                run.snapshots_seen == 2
                and len(log.lines) == 2  # type: ignore[attr-defined]
                and "40%" in app.query_one("#progress").text  # type: ignore[attr-defined]
                and len(app.history.of(1).util_pct) == 1
            ),
            30,
        )
        await pilot.press("m")
        await wait_until(lambda: app.query_one("#memory").display, 30)

    assert snap_compare(app, terminal_size=size, run_before=memory_shown)


# -- the text summary -----------------------------------------------------------------------


class TextFile(SingleFileSnapshotExtension):
    """A golden text file (``.txt``), diffable in review."""

    _file_extension = "txt"
    _write_mode = WriteMode.TEXT


def fixed_report() -> Report:
    """A finished 12.5 s run on cuda:0: pageable batches, a loss.item() per step, a
    data-dependent shape, 200 steps."""
    loader = LineStats("train.py", 31, "train", ["train.py:80 main"])
    loader.source = "x, y = x.to('cuda:0'), y.to('cuda:0')"
    for _ in range(400):
        loader.h2d.add(2 << 20, True, False)  # 2 MiB, pageable
        loader.syncs.add("copy_to_device")
    loader.op_breakdown["_to_copy.default"] = OpCount(400, 120.0)
    logging = LineStats("train.py", 36, "train", ["train.py:80 main"])
    logging.source = "losses.append(loss.item())"
    for _ in range(200):
        logging.d2h.add(4, True, False)
        logging.syncs.add("item")
    logging.op_breakdown["_local_scalar_dense.default"] = OpCount(200, 1.0)
    masks = LineStats("model.py", 12, "forward", ["train.py:33 train", "train.py:80 main"])
    masks.source = "keep = scores[scores > 0.5]"
    for _ in range(200):
        masks.syncs.add("data_dependent_shape")
    masks.op_breakdown["index.Tensor"] = OpCount(200, 40.0)
    masks.op_breakdown["mm.default"] = OpCount(600, 2400.0)
    lines = []
    for s in (loader, logging, masks):
        s.steps_active = 200
        s.settle()
        lines.append(Line.of(s))
    r = Report(command=["train.py", "--epochs", "3"], duration_s=12.5).with_lines(lines)
    r = r.replace(devices=[{"device": "cuda:0", "name": "NVIDIA H100 80GB HBM3"}])
    r = r.replace(steps={"count": 200, "source": "optimizer"})
    return r


def test_text_summary(snapshot) -> None:
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(
        summary(fixed_report(), analyze(fixed_report()))
    )
    assert out.getvalue() == snapshot(extension_class=TextFile)
