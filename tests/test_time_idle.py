"""The GPU half of the time view on synthetic timelines, with exact answers: busy time is the
union of the ops on all streams, and every idle nanosecond goes to one cause and one line
(profilers/timing/idle.py)."""

from __future__ import annotations

from profilers.timing.idle import (
    END_OF_STEP,
    GpuInterval,
    busy_intervals,
    charge,
    follow_named,
    name_slices,
)
from profilers.timing.line_time import LineTime
from profilers.timing.timeline import HostInterval, StepTime
from profilers.timing.verdict import breakdown


def _lines(result: dict[str, object]) -> dict[tuple[str, str], float]:
    return {(d["cause"], d["site"]): d["ms"] for d in result["idle_lines"]}  # type: ignore[attr-defined]


def test_busy_is_the_union_of_every_streams_ops_within_the_step():
    ops = [GpuInterval(0, 50, 0, "a"), GpuInterval(20, 80, 1, "b"), GpuInterval(90, 130, 0, "c")]
    assert busy_intervals(ops, 0, 120) == [(0, 80), (90, 120)]
    r = charge(0, 120, ops, [])
    # 80 + 30 busy; the 10 ns between are launch, at the line of the op that ends them (c).
    assert r["busy_ms"] == 110e-6 and r["idle_total_ms"] == 10e-6
    assert _lines(r) == {("launch", "c"): 10e-6}


def test_a_sync_charges_the_drain_and_the_refill_to_its_line():
    # Op A runs 0..400; the host blocks in .item() (train.py:9) from 100 until the GPU drains
    # at 400, runs Python until 700 and launches B (train.py:12), which runs 700..1000.
    ops = [GpuInterval(0, 400, 0, "train.py:8"), GpuInterval(700, 1000, 0, "train.py:12")]
    waits = [HostInterval("sync", "item", "train.py:9", 100, 400)]
    r = charge(0, 1000, ops, waits)
    assert r["busy_ms"] == 700e-6
    assert r["idle_ms"] == {"input": 0.0, "sync": 300e-6, "copy": 0.0, "comm": 0.0, "launch": 0.0}
    assert r["idle_lines"] == [
        {"site": "train.py:9", "cause": "sync", "sync_cause": "item", "ms": 300e-6}
    ]


def test_a_sync_that_returned_just_before_the_gap_counts_within_the_slack():
    ops = [GpuInterval(0, 400, 0, "a"), GpuInterval(700, 1000, 0, "b")]
    waits = [HostInterval("sync", "item", "s", 100, 395)]  # host clock 5 ns ahead of the GPU's
    assert _lines(charge(0, 1000, ops, waits)) == {("launch", "b"): 300e-6}
    assert _lines(charge(0, 1000, ops, waits, slack_ns=10)) == {("sync", "s"): 300e-6}


def test_input_wait_goes_to_the_for_line_and_the_python_after_it_is_launch():
    # The GPU is idle from the step's start; the host waits for the batch (train.py:5) until
    # 500, moves it and launches until 600, when the forward's first op starts. The GPU idled
    # through the wait: a batch ready at once would still have needed that Python first.
    ops = [GpuInterval(600, 1000, 0, "train.py:6")]
    waits = [HostInterval("input", None, "train.py:5", 0, 500)]
    r = charge(0, 1000, ops, waits)
    assert _lines(r) == {("input", "train.py:5"): 500e-6, ("launch", "train.py:6"): 100e-6}
    gpu = {**r}
    step = StepTime(0, 0, 1000, {}, 0, 1, waits)
    d = breakdown(step, gpu)
    assert d["verdict"] == "input-bound" and d["shares_pct"] == {
        "busy": 40.0,
        "input": 50.0,
        "sync": 0.0,
        "copy": 0.0,
        "comm": 0.0,
        "launch": 10.0,
    }


def test_small_kernels_launched_slower_than_they_run_are_launch_bound_per_line():
    ops = [GpuInterval(0, 10, 0, "x"), GpuInterval(30, 40, 0, "y"), GpuInterval(60, 70, 0, "z")]
    r = charge(0, 100, ops, [])
    assert r["busy_ms"] == 30e-6
    assert _lines(r) == {
        ("launch", "y"): 20e-6,
        ("launch", "z"): 20e-6,
        ("launch", END_OF_STEP): 30e-6,
    }
    d = breakdown(StepTime(0, 0, 100, {}, 0, 3, []), r)
    assert d["verdict"] == "launch-bound" and d["shares_pct"]["launch"] == 70.0


def test_python_before_a_wait_is_launch_and_the_parts_add_up_to_the_idle_time():
    # Idle 100..900: Python 100..200 (launch, the next op's line), a blocking copy 200..500
    # (train.py:3: the host is held in it), Python after it 500..600 (the copy's refill: had
    # the copy not held the host, this Python would have run beside it), a collective 600..800
    # (train.py:4) with nothing on this GPU meanwhile, then Python 800..900: no work was
    # waited for, so the GPU would have idled through it all the same: launch.
    ops = [
        GpuInterval(0, 100, 0, "p"),
        GpuInterval(200, 500, 0, "train.py:3", held=True),
        GpuInterval(900, 1000, 0, "n"),
    ]
    waits = [HostInterval("comm", None, "train.py:4", 600, 800)]
    r = charge(0, 1000, ops, waits)
    assert r["busy_ms"] == 200e-6 and r["idle_total_ms"] == 800e-6
    assert _lines(r) == {
        ("launch", "n"): 200e-6,
        ("copy", "train.py:3"): 400e-6,
        ("comm", "train.py:4"): 200e-6,
    }
    assert abs(sum(r["idle_ms"].values()) - r["idle_total_ms"]) < 1e-12
    d = breakdown(StepTime(0, 0, 1000, {}, 0, 2, waits), r)
    assert d["verdict"] == "copy-bound"


def test_a_long_python_stretch_after_a_short_sync_is_launch_not_the_syncs():
    # Op A runs 0..100; .item() (train.py:9) waits 50..100 for it to drain, then the host runs
    # 150 of Python (a metric in NumPy) before B (train.py:12): removing the sync would have
    # let 50 of that Python run beside A, no more. So 50 of the idle is the sync's and 100 is
    # the host's own work, launch at B's line.
    ops = [GpuInterval(0, 100, 0, "train.py:8"), GpuInterval(250, 300, 0, "train.py:12")]
    waits = [HostInterval("sync", "item", "train.py:9", 50, 100)]
    r = charge(0, 300, ops, waits)
    assert _lines(r) == {("sync", "train.py:9"): 50e-6, ("launch", "train.py:12"): 100e-6}
    d = breakdown(StepTime(0, 0, 300, {}, 0, 2, waits), r)
    assert d["verdict"] != "sync-bound"


def test_a_gpu_bound_step():
    ops = [GpuInterval(0, 950, 0, "m")]
    r = charge(0, 1000, ops, [])
    d = breakdown(StepTime(0, 0, 1000, {}, 0, 1, []), r)
    assert d["verdict"] == "GPU-bound" and d["shares_pct"]["busy"] == 95.0


def _named(launch_ms: int, out_ms: dict[str, int] | None = None) -> LineTime:
    rec = LineTime()
    rec.launch_ns = launch_ms * 1_000_000
    rec.named_out = {k: v * 1_000_000 for k, v in (out_ms or {}).items()}
    return rec


def test_launch_idle_follows_the_lines_the_sampler_named_in_its_host_work():
    # Line 7's op came after a 9 ms sleep at line 6 (named by the sampler: moved there on the
    # host) and 1 ms of its own Python; the GPU idled 10 ms before the op, charged to line 7.
    lines = {"a.py:7": _named(1, {"a.py:6": 9})}
    idle = [
        {"site": "a.py:7", "cause": "launch", "sync_cause": None, "ms": 10.0},
        {"site": "a.py:9", "cause": "sync", "sync_cause": "item", "ms": 2.0},
    ]
    assert follow_named(idle, lines) == [
        {"site": "a.py:6", "cause": "launch", "sync_cause": None, "ms": 9.0},
        {"site": "a.py:9", "cause": "sync", "sync_cause": "item", "ms": 2.0},
        {"site": "a.py:7", "cause": "launch", "sync_cause": None, "ms": 1.0},
    ]
    # GPU-bound: the queue ran dry 3 ms before the op, inside the sleep: all of it is line 6's
    three = [{"site": "a.py:7", "cause": "launch", "sync_cause": None, "ms": 3.0}]
    assert follow_named(three, lines) == [
        {"site": "a.py:6", "cause": "launch", "sync_cause": None, "ms": 3.0}
    ]
    # two named lines share in their proportions; lines summed over 3 steps, one step's idle
    lines = {"a.py:7": _named(3, {"a.py:5": 9, "a.py:6": 18})}
    assert follow_named(idle[:1], lines, steps=3) == [
        {"site": "a.py:6", "cause": "launch", "sync_cause": None, "ms": 6.0},
        {"site": "a.py:5", "cause": "launch", "sync_cause": None, "ms": 3.0},
        {"site": "a.py:7", "cause": "launch", "sync_cause": None, "ms": 1.0},
    ]
    # nothing named, or not launch idle: unchanged
    assert follow_named(idle, {"a.py:7": _named(10)}) == idle


def test_a_launch_slice_inside_a_named_gap_takes_that_gaps_line():
    # Idle 100..400 charged to line 7 (the op after it); the sampler named 150..350 as line 6's
    # (a sleep); a sync's slice and another line's launch slice stay as they were.
    slices = [
        (100, 400, "launch", None, "a.py:7"),
        (500, 600, "sync", "item", "a.py:7"),
        (700, 800, "launch", None, "a.py:9"),
    ]
    named = [(150, 350, "a.py:7", "a.py:6"), (650, 900, "a.py:8", "a.py:5")]
    assert name_slices(slices, named) == [
        (100, 150, "launch", None, "a.py:7"),
        (150, 350, "launch", None, "a.py:6"),
        (350, 400, "launch", None, "a.py:7"),
        (500, 600, "sync", "item", "a.py:7"),
        (700, 800, "launch", None, "a.py:9"),
    ]
    # a gap covering the whole slice renames all of it
    assert name_slices(slices[:1], [(0, 1000, "a.py:7", "a.py:6")]) == [
        (100, 400, "launch", None, "a.py:6")
    ]


def test_a_gap_whose_op_was_queued_before_it_began_waited_on_other_gpu_work():
    # Op A (stream 0) runs 0..300. B (stream 1, train.py:12) was queued at 100, while A ran,
    # but starts only at 900: it waited on an event, not on the host, which sat in an input
    # wait 300..900 meanwhile. The 600 ns gap is dependency at B's line, none of it input.
    ops = [
        GpuInterval(0, 300, 0, "train.py:8", queued_ns=0),
        GpuInterval(900, 1000, 1, "train.py:12", queued_ns=100),
    ]
    waits = [HostInterval("input", None, "train.py:5", 300, 900)]
    r = charge(0, 1000, ops, waits)
    assert r["idle_ms"]["dependency"] == 600e-6 and r["idle_ms"]["input"] == 0.0
    assert _lines(r) == {("dependency", "train.py:12"): 600e-6}
    assert breakdown(StepTime(0, 0, 1000, {}, 0, 0, []), r)["verdict"] == "dependency-bound"


def test_a_gap_is_the_hosts_until_its_op_was_queued_then_a_dependency():
    # B was queued at 600, inside the gap 400..900 after A: 400..600 the host was late (its
    # Python: launch at B's line); 600..900 B waited on other work (dependency). With a slack
    # of 300 ns (the clocks' agreement), the 300 ns between queueing and start is B's launch.
    ops = [
        GpuInterval(0, 400, 0, "train.py:8"),
        GpuInterval(900, 1000, 1, "train.py:12", queued_ns=600),
    ]
    r = charge(0, 1000, ops, [])
    assert _lines(r) == {("launch", "train.py:12"): 200e-6, ("dependency", "train.py:12"): 300e-6}
    assert _lines(charge(0, 1000, ops, [], slack_ns=300)) == {("launch", "train.py:12"): 500e-6}
    # an op queued after the gap began with no other work to wait on: all the host's
    late = [GpuInterval(0, 400, 0, "a"), GpuInterval(900, 1000, 0, "b", queued_ns=890)]
    assert _lines(charge(0, 1000, late, [], slack_ns=20)) == {("launch", "b"): 500e-6}
