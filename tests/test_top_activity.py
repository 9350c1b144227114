"""What ``gpuwatch top`` says about real activity: SM activity beside utilisation, HELD IDLE and
LOW SM ACTIVITY on the cards and in the process table, jobs and the ``job:`` filter, "no GPM"
said once, the fleet line of ``--remote``, and ``--once`` / ``--json``."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from textual.widgets import Input

from gpuwatch.cli.main import main
from gpuwatch.monitor.export import GpuCollector
from gpuwatch.monitor.nvml import FakeBackend, Sampler
from gpuwatch.monitor.nvml.activity import Activity, Fleet, IdlePolicy, fleet, held_idle_since
from gpuwatch.monitor.nvml.remote import HostsBackend, RemoteHost, parse_metrics
from gpuwatch.output.snapshot import snapshot_text
from gpuwatch.ui.top.app import TopApp
from gpuwatch.ui.widgets import GpuCard, ProcessTable
from gpuwatch.ui.widgets.fleet_line import FleetLine
from gpuwatch.ui.widgets.gpu_card import CardBody
from tests.conftest import wait_until
from tests.test_export import scrape
from tests.test_remote import exporter


async def started(app: TopApp, pilot) -> None:
    await wait_until(lambda: app.samples_taken >= 1)
    await pilot.pause()


@pytest.mark.slow
async def test_held_idle_and_low_sm_activity_show_on_cards_and_table(clock):
    backend = FakeBackend(gpu_count=3, clock=clock, idle_gpus={1}, stuck_gpus={2})
    app = TopApp(backend, interval_s=0.1, idle=IdlePolicy(after_s=0))
    async with app.run_test(size=(160, 60)) as pilot:
        await started(app, pilot)
        c0, c1, c2 = (app.query_one(f"#gpu-{i}", GpuCard) for i in range(3))
        # NB: the app samples on in real time: the spell is some seconds long by now
        assert re.fullmatch(r"HELD IDLE \d+s · 00000000:28:00.0", c1.border_subtitle)
        assert c2.border_subtitle.startswith("LOW SM ACTIVITY · ")
        assert c0.border_subtitle == c0.sample.pci_bus_id  # a busy GPU: nothing flagged
        body = [line.plain for line in c2.query_one(CardBody).lines()]
        assert body[0].endswith("100% SM  12%")
        assert body[5].startswith("LOW SM ACTIVITY  SM ACT 12%  OCC 5%  TENSOR 7%  DRAM ")
        table = app.query_one(ProcessTable)
        # the owners of the held GPU and their jobs, in the table's title
        since = held_idle_since(app.snapshot.gpus[1], app.snapshot.time)
        assert since is not None
        assert re.search(
            rf"GPU 1 HELD IDLE since {since:%H:%M} \(\d+s\) by bob \(slurm 4317 r1\), "
            r"carol \(research/carol-notebook-0\)",
            table.border_title,
        )


async def test_the_job_filter_and_column(clock):
    app = TopApp(FakeBackend(gpu_count=2, clock=clock), interval_s=0.1)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        table = app.query_one(ProcessTable)
        await pilot.press("slash")
        app.query_one("#filter", Input).value = "job:4317"
        await pilot.pause()
        assert sorted((p.gpu_index, p.pid) for p in table.shown_processes) == [(0, 4101), (1, 4110)]
        row = [c.plain for c in table.get_row_at(0)]
        assert "slurm 4317 r0" in row or "slurm 4317 r1" in row
        app.query_one("#filter", Input).value = "job:431"  # a whole id, not a prefix of one
        await pilot.pause()
        assert table.shown_processes == []
        app.query_one("#filter", Input).value = "job:research"
        await pilot.pause()
        assert [p.user for p in table.shown_processes] == ["carol"]


async def test_no_gpm_is_said_once(clock):
    app = TopApp(FakeBackend(gpu_count=2, clock=clock, gpm=False), interval_s=0.1)
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app, pilot)
        n = app.samples_taken
        await wait_until(lambda: app.samples_taken >= n + 3)
        said = [m for m in app._notifications if "no GPM" in m.message]
        assert len(said) == 1 and said[0].message.startswith("GPU 0, 1: no GPM")
        body = [line.plain for line in app.query_one(CardBody).lines()]
        assert body[5].startswith("SM ACT N/A (no GPM)  E ")


def test_fleet_counts_each_gpu_once(clock):
    snap = Sampler(
        FakeBackend(gpu_count=4, clock=clock, idle_gpus={1, 2}),
        background_pcie=False,
        idle=IdlePolicy(after_s=0),
    ).snapshot()
    g = list(snap.gpus)
    g[2] = dataclasses.replace(g[2], gpu_util_pct=None, memory_used_bytes=None)  # no answer
    g[3] = dataclasses.replace(g[3], processes=(), gpu_util_pct=1, sm_active_pct=1.0)  # free
    assert fleet(g, 5.0) == Fleet(busy=1, idle=1, held_idle=1, unreachable=1)
    assert str(Fleet(8, 2, 1, 1)) == (
        "fleet: 12 GPUs · 8 busy · 2 idle · 1 held idle · 1 unreachable"
    )


async def test_remote_top_opens_with_the_fleet_line(clock):
    url, server, _ = exporter(2, clock)
    dead = "http://127.0.0.1:9"  # nothing listens on the discard port
    hosts = [RemoteHost(url, interval_s=60), RemoteHost(dead, interval_s=60, timeout_s=0.5)]
    app = TopApp(HostsBackend(hosts), interval_s=0.1)
    try:
        async with app.run_test(size=(160, 60)) as pilot:
            await started(app, pilot)
            line = app.query_one(FleetLine)
            assert line.region.y == 1  # right under the title
            assert line.lines()[0].plain == (
                "fleet: 3 GPUs · 2 busy · 0 idle · 0 held idle · 1 unreachable"
            )
    finally:
        server.shutdown()


def test_remote_reads_gpm_energy_and_held_idle_back(clock):
    sampler = Sampler(
        FakeBackend(gpu_count=2, clock=clock, idle_gpus={1}),
        background_pcie=False,
        idle=IdlePolicy(after_s=0),
    )
    c = GpuCollector("node")
    c.snapshot = snap = sampler.snapshot()
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(c)
    g0, g1 = parse_metrics(generate_latest(registry).decode(), "node")
    assert g0.sm_active_pct == snap.gpus[0].sm_active_pct
    assert g0.energy_total_mj == snap.gpus[0].energy_total_mj
    assert (g1.held_idle, g1.held_idle_s, g0.held_idle, g0.held_idle_s) == (True, 0.0, False, None)
    assert scrape(c)["gpuwatch_gpu_held_idle"][1].value == 1.0
    # the remote's verdict stands through this side's Activity, whatever its own policy
    again = Activity(IdlePolicy(after_s=3600)).apply(g1, snap.time)
    assert (again.held_idle, again.held_idle_s) == (True, 0.0)


def test_once_text_shows_activity_state_and_jobs(clock):
    snap = Sampler(
        FakeBackend(gpu_count=3, clock=clock, idle_gpus={1}, stuck_gpus={2}),
        background_pcie=False,
        idle=IdlePolicy(after_s=0),
    ).snapshot()
    text = snapshot_text(snap, width=200)
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if "%" in line}
    assert f"HELD IDLE since {snap.time:%H:%M} (0s) by bob, carol" in text
    assert "LOW SM ACTIVITY (busy by utilisation only)" in text
    assert "│ slurm 4242 r0 " in text and "│ research/carol-notebook-0 " in text
    assert rows  # the tables have rows
    narrow = snapshot_text(snap, width=80)
    assert "slurm 4242" not in narrow and max(len(x) for x in narrow.splitlines()) <= 80


def test_json_has_the_new_fields_measured(capsys):
    assert main(["top", "--demo", "--json", "--idle-after", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    g = doc["gpus"][0]
    assert g["gpm"] is True and 0 <= g["sm_active_pct"] <= 100
    assert 300 < g["power_avg_w"] < 400  # the fake draws a steady 350 W
    assert g["held_idle"] is False and g["low_sm_activity"] is False
    assert doc["gpus"][0]["processes"][0]["job"]["slurm_job_id"] == "4242"


def test_bad_idle_options_are_one_line(capsys):
    try:
        main(["top", "--demo", "--json", "--idle-below", "101"])
    except SystemExit as exc:
        assert exc.code == 2
    err = capsys.readouterr().err
    assert "argument --idle-below: 101 is not between 0 and 100" in err


def test_the_compact_line_keeps_its_flags_within_the_narrowest_width(clock):
    from gpuwatch.ui.sampling import COMPACT_CARD_MIN_WIDTH
    from gpuwatch.ui.widgets.gpu_card import compact_line

    snap = Sampler(
        FakeBackend(gpu_count=3, clock=clock, idle_gpus={1}, stuck_gpus={2}),
        background_pcie=False,
        idle=IdlePolicy(after_s=0),
    ).snapshot()
    lines = [compact_line(g, COMPACT_CARD_MIN_WIDTH) for g in snap.gpus]
    assert all(line.cell_len <= COMPACT_CARD_MIN_WIDTH for line in lines)
    assert lines[1].plain.endswith("SM 0% HELD IDLE 0s")
    assert lines[2].plain.endswith("SM 12% LOW SM ACTIVITY")
