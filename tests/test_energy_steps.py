"""Energy per step and per run, from NVML's total-energy counter joined with the time
view's steps (gpuwatch/analysis/energy.py): exact on injected counters and clocks; the counter read
alone by the real backend (stub NVML) and the fake one; a GPU without the counter says "not
measured"; joules while idle only where the GPU half is measured; the join on the profile's clock
through the one run path; the summary, the HTML, the schema."""

from __future__ import annotations

import json
import time
from typing import Any

import pynvml
import pytest

import profilers
from gpuwatch.analysis import analyze
from gpuwatch.analysis.energy import (
    IDLE_NOT_MEASURED,
    NOT_COVERED,
    NOT_SUPPORTED,
    Counter,
    points_from_rows,
    with_energy,
)
from gpuwatch.monitor.gpu_timeline import GpuTimeline, TimelineSamples
from gpuwatch.monitor.nvml import FakeBackend, Sampler
from gpuwatch.monitor.nvml._real import RealBackend
from gpuwatch.output.load import problem
from gpuwatch.profile.finish import finish
from tests.stub_nvml import StubNvml, default_device


def _ramp(watts: float, every_ms: float, until_ms: float, start_mj: int = 0) -> list[Any]:
    """A counter rising ``watts`` (= mJ per ms), seen moving every ``every_ms``."""
    n = int(until_ms / every_ms)
    return [(k * every_ms, start_mj + round(watts * k * every_ms)) for k in range(n + 1)]


def test_a_counter_rising_300_w_gives_0_6_j_over_2_ms_and_says_how_uncertain():
    c = Counter(_ramp(300, 10, 100))
    # 300 J/s for 2 ms = 0.6 J; both ends inside the 10 ms interval [0, 10): 3 J that
    # interpolation cannot place, at most
    assert c.joules(3.0, 5.0) == pytest.approx((0.6, 3.0), abs=1e-12)
    # 5..25 ms: 6 J; the ends in two intervals of 3 J each
    assert c.joules(5.0, 25.0) == pytest.approx((6.0, 6.0), abs=1e-12)
    # on the counter's own changes: exact, nothing uncertain
    assert c.joules(10.0, 90.0) == pytest.approx((24.0, 0.0), abs=1e-12)
    assert c.update_ms() == 10.0
    assert c.joules(-1.0, 5.0) is None and c.joules(50.0, 101.0) is None  # not covered


def test_power_that_changes_is_placed_between_the_counters_changes():
    # 100 W for 100 ms (10 J), then 300 W for 100 ms (30 J), seen every 50 ms
    c = Counter([(0.0, 0), (50.0, 5_000), (100.0, 10_000), (150.0, 25_000), (200.0, 40_000)])
    assert c.joules(50.0, 150.0) == (20.0, 0.0)  # 5 J + 15 J
    assert c.joules(75.0, 125.0) == (10.0, 20.0)  # 2.5 J + 7.5 J; ends in 5 J and 15 J
    # the driver reloaded (the counter restarts): no interval spans the reset
    reset = Counter([(0.0, 900), (10.0, 1_900), (20.0, 100), (30.0, 1_100)])
    assert reset.joules(0.0, 10.0) == (1.0, 0.0) and reset.joules(20.0, 30.0) == (1.0, 0.0)
    assert reset.joules(5.0, 25.0) is None


def _time(*steps: dict[str, Any], wall_ms: float = 200.0) -> dict[str, Any]:
    return {"run": {"wall_ms": wall_ms}, "steps": list(steps), "steps_closed": len(steps)}


def test_steps_get_joules_and_idle_joules_only_where_the_gpu_half_is_measured():
    host_only = {"step": 0, "start_ms": 0.0, "end_ms": 100.0, "gpu": None}
    measured = {
        "step": 1,
        "start_ms": 100.0,
        "end_ms": 200.0,
        "gpu": {"measured": "measured", "busy_ms": 60.0, "idle_total_ms": 40.0},
    }
    spans = {**measured, "gpu": {**measured["gpu"], "busy_spans_ms": [[100, 130], [150, 180]]}}
    points = {0: [(0.0, 0), (50.0, 5_000), (100.0, 10_000), (150.0, 25_000), (200.0, 40_000)]}
    t = _time(host_only, measured, json.loads(json.dumps(spans)))
    t = with_energy(t, points, {0}, read_interval_ms=20.0)
    first, second, third = (s["energy"] for s in t["steps"])
    # 100 W for 100 ms; the GPU half not measured: no idle joules, and why
    assert first == {
        "j": 10.0,
        "uncertainty_j": 0.0,
        "by_gpu_j": {"0": 10.0},
        "shorter_than_counter": False,
        "idle_j": None,
        "idle_basis": IDLE_NOT_MEASURED,
    }
    # 300 W for 100 ms = 30 J; idle 40 ms of it: 12 J at the step's mean power ...
    assert (second["j"], second["idle_j"]) == (30.0, 12.0)
    assert second["idle_basis"] == "the step's idle share at its mean power"
    # ... or over the idle intervals themselves: 130..150 and 180..200, both at 300 W:
    # 40 ms x 300 W = 12 J
    assert (third["j"], third["idle_j"]) == (30.0, 12.0)
    assert third["idle_basis"] == "interpolated over the idle intervals"
    run = t["energy"]
    assert (run["run_j"], run["step_j_median"], run["steps_idle_j"]) == (40.0, 30.0, 24.0)
    assert (run["gpus"], run["not_measured"], run["counter_update_ms"]) == ([0], {}, 50.0)
    assert run["read_interval_ms"] == 20.0 and run["steps_measured"] == 3


def test_idle_joules_over_the_idle_intervals_differ_from_the_mean_when_power_does():
    # 100 W while idle (100..150), 300 W while busy (150..200): the idle 50 ms cost 5 J, not
    # half of the step's 20 J
    step = {
        "step": 0,
        "start_ms": 100.0,
        "end_ms": 200.0,
        "gpu": {"measured": "measured", "idle_total_ms": 50.0, "busy_spans_ms": [[150, 200]]},
    }
    t = _time(step)
    t = with_energy(t, {0: [(100.0, 0), (150.0, 5_000), (200.0, 20_000)]}, {0}, 20.0)
    assert (t["steps"][0]["energy"]["j"], t["steps"][0]["energy"]["idle_j"]) == (20.0, 5.0)


def test_a_gpu_without_the_counter_is_not_measured_and_a_short_step_says_so():
    step = {"step": 0, "start_ms": 10.0, "end_ms": 12.0, "gpu": None}
    t = _time(dict(step))
    t = with_energy(t, {}, {0}, 20.0)
    assert t["energy"]["not_measured"] == {"0": NOT_SUPPORTED} and t["energy"]["run_j"] is None
    assert t["steps"][0]["energy"] == {"j": None, "note": NOT_SUPPORTED}
    # two GPUs used, one without the counter: the other's joules, the first listed
    t = _time(dict(step))
    t = with_energy(t, {1: _ramp(300, 10, 200)}, {0, 1}, 20.0)
    e = t["steps"][0]["energy"]
    assert (e["j"], e["by_gpu_j"], e["shorter_than_counter"]) == (0.6, {"1": 0.6}, True)
    assert t["energy"]["not_measured"] == {"0": NOT_SUPPORTED}
    # a step past the counter's last change: not measured, not guessed
    t = _time({"step": 0, "start_ms": 150.0, "end_ms": 250.0, "gpu": None}, wall_ms=250.0)
    t = with_energy(t, {0: _ramp(300, 10, 200)}, {0}, 20.0)
    assert t["steps"][0]["energy"] == {"j": None, "note": NOT_COVERED}
    assert t["energy"]["run_j"] is None and t["energy"]["steps_measured"] == 0


def test_the_backends_read_the_counter_alone_and_not_supported_is_none(clock):
    nvml = StubNvml([default_device(0), default_device(1)])
    nvml.devices[1]["energy_mj"] = pynvml.NVMLError_NotSupported
    real = RealBackend(nvml=nvml, clock=clock)
    assert (real.energy_mj(0), real.energy_mj(1), real.energy_mj(1)) == (5_000_000, None, None)
    assert nvml.calls["energy"] == 2  # NotSupported is remembered, not asked again
    real.close()
    t = [50.0]
    fake = FakeBackend(gpu_count=1, clock=lambda: t[0])
    t[0] += 0.002
    # a steady 350 W: 0.7 J in 2 ms, exactly
    assert fake.energy_mj(0) == 350_000_000_000 + 700


def test_the_timeline_keeps_the_counters_changes_on_its_clock():
    t = [1000.0]
    backend = FakeBackend(gpu_count=2, clock=lambda: t[0])
    timeline = GpuTimeline(Sampler(backend, background_pcie=False), clock=lambda: t[0])
    for _ in range(3):
        timeline.read_energy()
        timeline.read_energy()  # unchanged: not kept twice
        t[0] += 0.01
    taken = timeline.stop()  # never started: no thread; the counter settles on reads
    start = 1_000_000 * 350_000
    assert taken.t0 == 1000.0 and taken.energy_read_ms == 20.0
    for gpu in (0, 1):
        assert [(round(s, 6), mj) for s, mj in taken.energy[gpu][:3]] == [
            (0.0, start),
            (0.01, start + 3_500),  # 350 W for 10 ms = 3.5 J
            (0.02, start + 7_000),
        ]
    rows = [{"t": 0.5, "gpu": 0, "energy_total_mj": 7}, {"t": 1.0, "gpu": 0, "energy_total_mj": 7}]
    assert points_from_rows([*rows, {"t": 1.5, "gpu": 0, "energy_total_mj": 9}]) == {
        0: [(500.0, 7), (1500.0, 9)]
    }


def _profiled_steps(n: int) -> Any:
    from gpuwatch.profile.options import ProfileOptions
    from gpuwatch.profile.run import ProfiledRun
    from gpuwatch.profile.runner import Target

    run = ProfiledRun(Target("x.py", []), ProfileOptions(), lambda r: None, None, None, "NVML")
    t0 = time.perf_counter()
    with run.prof:
        for _ in range(n):
            end = time.perf_counter() + 0.005
            while time.perf_counter() < end:
                pass
            profilers.step()
    return run, run.prof.report(), t0


def test_the_run_path_joins_the_counter_with_the_steps_on_the_profiles_clock():
    run, report, t0 = _profiled_steps(4)
    report = report.replace(devices=[{"device": "cuda:0", "name": "GPU"}])
    origin_ms = run.prof.time_origin_ns / 1e6
    steps = report.time["steps"]
    # A counter that draws (k + 1) x 100 W in step k, with a change at every step's bounds
    # (on perf_counter, seconds since the timeline's start t0): each step's joules are exact,
    # and a join off by a fraction of a step would mix two steps' powers.
    changes, mj = [(0.0, 0)], 0.0
    for k, s in enumerate(steps):
        a, b = (origin_ms + s["start_ms"]) / 1000 - t0, (origin_ms + s["end_ms"]) / 1000 - t0
        changes.append((a, round(mj)))
        mj += (k + 1) * 100 * (s["end_ms"] - s["start_ms"])
        changes.append((b, round(mj)))
    changes.append((changes[-1][0] + 1.0, round(mj) + 1))
    report = finish(report, run._measures(TimelineSamples([], {}, {0: changes}, t0, 20.0)))
    steps = report.time["steps"]
    for k, s in enumerate(steps):
        expected = (k + 1) * 100 * (s["end_ms"] - s["start_ms"]) / 1000
        assert s["energy"]["j"] == pytest.approx(expected, abs=0.002)
        assert s["energy"]["idle_basis"] == IDLE_NOT_MEASURED  # a CPU run: no GPU half
    assert report.time["energy"]["gpus"] == [0]
    assert problem(report.to_dict()) is None  # the schema takes it
    # the script used no GPU: no energy of its own (the node's is someone else's)
    _, cpu, t0 = _profiled_steps(1)
    cpu = finish(cpu, run._measures(TimelineSamples([], {}, {0: changes}, t0, 20.0)))
    assert "energy" not in cpu.time


def test_the_summary_and_the_html_show_joules_per_step():
    from gpuwatch.output.html import render_html
    from gpuwatch.output.timeview import energy_line

    run, report, t0 = _profiled_steps(3)
    report = report.replace(devices=[{"device": "cuda:0", "name": "GPU"}])
    origin_s = run.prof.time_origin_ns / 1e9
    # 250 W throughout, seen every 1 ms from before the profile to after it
    span = report.time["run"]["wall_ms"] / 1000 + 0.01
    changes = [(k / 1000, round(250 * k)) for k in range(int(span * 1000) + 20)]
    taken = TimelineSamples([], {}, {0: changes}, origin_s - 0.005, 1.0)
    report = finish(report, run._measures(taken))
    line = energy_line(report)
    per_step = report.time["energy"]["step_j_median"]
    assert per_step == pytest.approx(0.25 * statistics_median_ms(report), abs=0.01)
    assert line is not None and line.startswith(f"energy: {per_step:.3g} J per step")
    assert "idle: not measured (GPU busy and idle not measured)" in line
    html = render_html(report, analyze(report))
    assert "energy (J)" in html


def statistics_median_ms(report: Any) -> float:
    import statistics

    return statistics.median(s["end_ms"] - s["start_ms"] for s in report.time["steps"])


def test_the_live_view_shows_the_newest_step_its_samples_cover(clock: Any) -> None:
    from gpuwatch.analysis.energy import points_from_rows, rows_read_interval_ms
    from gpuwatch.profile.live.model import LiveRun
    from gpuwatch.profile.live.protocol import LiveSnapshot
    from gpuwatch.profile.live.session import ChildSession
    from gpuwatch.profile.options import ProfileOptions
    from gpuwatch.profile.runner import Target
    from gpuwatch.ui.widgets.status_line import status_text

    run = LiveRun(ChildSession(Target("train.py", []), ProfileOptions()), clock=clock)
    backend = FakeBackend(gpu_count=2, clock=clock)  # a steady 350 W on each
    step = {"step": 3, "verdict": "input-bound", "shares_pct": {"input": 90.0, "launch": 10.0}}
    step.update(wall_unprofiled_ms=100.0, start_ms=200.0, end_ms=300.0)
    devices = [{"device": "cuda:1", "name": "H100"}]
    totals = {"ops": 0}
    run.take([LiveSnapshot(0.0, totals, devices, [], 0, 0, "every_op", time=step)])
    run.record_gpus([backend.sample(i) for i in range(2)])
    assert run.step_energy() is None  # the samples do not reach past the step's end yet
    for _ in range(2):
        clock.advance(0.25)
        run.record_gpus([backend.sample(i) for i in range(2)])
    # GPU 1 only (the script's): 350 W x 100 ms = 35 J, from samples 250 ms apart: the mean
    # power around the step times its length (≈)
    got = run.step_energy()
    assert got is not None and got[0] == 3 and got[1] == pytest.approx(35.0) and got[2] is True
    snap = run.last_snapshot
    assert status_text("running", 1.0, 42, snap, got).endswith(" · step 3: ≈35 J")
    # the report's energy, from the same rows: 350 W over the 500 ms they cover
    t = _time({**step, "gpu": None}, wall_ms=500.0)
    rows = [r for r in run.gpu_samples if r["gpu"] == 1]
    t = with_energy(t, points_from_rows(rows), {1}, rows_read_interval_ms(rows))
    assert t["energy"]["read_interval_ms"] == 250.0
    assert t["energy"]["run_j"] == pytest.approx(175.0) and t["steps"][0]["energy"]["j"] == 35.0


@pytest.mark.gpu
@pytest.mark.skipif(
    not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU with NVML"
)
def test_energy_per_step_agrees_with_the_counter_read_directly_on_a_gpu():
    """``.ci/check_energy.py``: steps of known GPU work (``torch.cuda._sleep``, ~1 s each)
    under ``gpuwatch profile``, each step's joules against NVML's counter read directly at
    its bounds (its docstring states the tolerance: 10% a step, 5% the median)."""
    import sys
    from pathlib import Path

    from tests.helpers import run

    root = Path(__file__).resolve().parent.parent
    done = run([sys.executable, ".ci/check_energy.py"], root, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_timelines_thread_reads_the_counter_between_snapshots_and_stops_promptly():
    timeline = GpuTimeline(Sampler(FakeBackend(gpu_count=1), background_pcie=False), 0.5)
    timeline.start()
    deadline = time.monotonic() + 10
    while len(timeline._energy.get(0, ())) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)  # NB: polls a condition, bounded: the thread's reads are the evidence
    began = time.monotonic()
    taken = timeline.stop()
    assert time.monotonic() - began < 2.0  # the settling reads are bounded
    points = taken.energy[0]
    # several reads of the counter alone for one snapshot (0.5 s apart), each a change
    assert len(points) >= 5 and len(points) > len(taken.rows)
    assert all(b[0] > a[0] and b[1] > a[1] for a, b in zip(points, points[1:], strict=False))
    assert taken.rows[0]["energy_total_mj"] is not None
