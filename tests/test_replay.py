"""The replay of a step (profilers/timing/replay.py) on hand-built timelines, with exact answers
worked out in the comments (all times in ns, host clock from 0)."""

from __future__ import annotations

import pytest

from profilers.timing.idle import END_OF_STEP, GpuInterval, charge
from profilers.timing.replay import (
    D2D,
    D2H,
    DEVICE,
    H2D,
    INPUT,
    KERNEL,
    RECORD,
    SYNC,
    WAIT,
    ReplayOp,
    replay,
)
from profilers.timing.timeline import HostInterval


def kernel(line: str, host_ns: int, gpu_ns: int, stream: int = 0, **kw: object) -> ReplayOp:
    return ReplayOp(KERNEL, line, host_ns, gpu_ns=gpu_ns, stream=stream, **kw)  # type: ignore[arg-type]


def test_a_gpu_bound_step_is_as_long_as_its_gpu_work_and_its_launch():
    # 10 kernels of 10,000 queued every 1,000: the first starts at 1,000, the GPU never idles
    # after: 1,000 + 10 x 10,000 = 101,000; .item() queued at 11,000 runs 101,000..102,000.
    ops = [kernel("t.py:5", 1_000, 10_000) for _ in range(10)]
    ops.append(ReplayOp(D2H, "t.py:6", 1_000, gpu_ns=1_000, sync="item"))
    r = replay(ops)
    assert (r.wall_ns, r.host_end_ns, r.busy_ns, r.idle_ns) == (102_000, 102_000, 101_000, 1_000)
    # The host waited in .item() from 11,000 to 102,000; the GPU idled only before the first op.
    assert r.host_by_cause == {"input": 0, "sync": 91_000, "copy": 0, "comm": 0, "launch": 11_000}
    assert r.idle_by_line == {("launch", "t.py:5", None): 1_000}
    assert r.spans[0] == (1_000, 11_000, 0, "t.py:5")
    assert r.spans[-1] == (101_000, 102_000, 0, "t.py:6")


def test_a_sync_makes_the_gpu_wait_for_the_host_to_refill_the_queue():
    # Launch-bound: a kernel of 2,000 queued every 10,000; synchronize() after the 5th.
    # k4 queued at 50,000 ends 52,000; the sync's host work ends 51,000, it waits 1,000 (to
    # 52,000); k5 queued 62,000 ... k9 at 102,000, ending 104,000.
    ops = [kernel("t.py:1", 10_000, 2_000) for _ in range(5)]
    ops.append(ReplayOp(SYNC, "t.py:2", 1_000, stream=DEVICE, sync="synchronize"))
    ops += [kernel("t.py:3", 10_000, 2_000) for _ in range(5)]
    r = replay(ops)
    assert (r.wall_ns, r.host_end_ns, r.busy_ns) == (104_000, 102_000, 20_000)
    assert r.host_by_cause["sync"] == 1_000
    # Idle: 10,000 before each of k0..k4 (launch at t.py:1, 42,000 with the gaps between them:
    # 10,000 + 4 x 8,000); the refill after the drain (52,000..62,000): the sync's up to the
    # 1,000 of k4 it waited for (without it the host would have been 1,000 ahead), the rest
    # the host's own Python before k5 (t.py:3); then 8,000 before each of k6..k9 to t.py:3.
    assert r.idle_by_line == {
        ("launch", "t.py:1", None): 42_000,
        ("sync", "t.py:2", "synchronize"): 1_000,
        ("launch", "t.py:3", None): 9_000 + 32_000,
    }
    assert sum(r.idle_by_cause.values()) == r.idle_ns == 84_000


def test_replayed_as_recorded_the_step_time_is_the_recorded_one_and_without_overhead_less():
    # A recorded step: the host spent 3,000 before each of 4 kernels (1,000 of it the
    # profiler's), each ran 2,500 on the GPU; then loss.item() (1,000 host, 500 on the GPU).
    # Recorded: k3 queued at 12,000 ends 14,500; the item queued 13,000 runs 14,500..15,000.
    ops = [kernel("t.py:1", 3_000, 2_500, overhead_ns=1_000) for _ in range(4)]
    ops.append(ReplayOp(D2H, "t.py:2", 1_000, gpu_ns=500, sync="item"))
    assert replay(ops).wall_ns == 15_000
    # Unprofiled: launches every 2,000, each kernel 2,500 (GPU-bound from the first):
    # 2,000 + 4 x 2,500 = 12,000, then the item 12,000..12,500.
    unprofiled = replay(ops, drop_overhead=True)
    assert unprofiled.wall_ns == 12_500
    assert unprofiled.host_by_cause["launch"] == 9_000


def test_a_pinned_non_blocking_copy_on_a_side_stream_overlaps_compute():
    # k0 (stream 0) 1,000..51,000; the copy (stream 1, pinned, non_blocking) queued at 2,000
    # runs 2,000..42,000 meanwhile; stream 0 waits for it through an event, then k1 runs
    # 51,000..61,000. The host never waits: it is done at 4,000.
    ops = [
        kernel("t.py:1", 1_000, 50_000),
        ReplayOp(H2D, "t.py:2", 1_000, stream=1, gpu_ns=40_000, pinned=True, non_blocking=True),
        ReplayOp(RECORD, "t.py:2", 500, stream=1, event=7),
        ReplayOp(WAIT, "t.py:3", 500, stream=0, event=7),
        kernel("t.py:4", 1_000, 10_000),
    ]
    r = replay(ops)
    assert (r.wall_ns, r.host_end_ns, r.busy_ns) == (61_000, 4_000, 60_000)
    assert [s[:2] for s in r.spans] == [(1_000, 51_000), (2_000, 42_000), (51_000, 61_000)]
    # From pageable memory, the host blocks in it until 42,000 (a copy wait at its line).
    blocking = [ops[0], ops[1].changed(pinned=False), *ops[2:]]
    b = replay(blocking)
    assert b.host_by_cause["copy"] == 40_000 and b.host_end_ns == 44_000
    assert b.wall_ns == 61_000  # GPU-bound: the blocked host cost the step nothing


def test_an_event_orders_two_streams_and_a_kernel_waits_for_the_other_stream():
    # s1: 30,000 of work from 1,000; s0's kernel waits for the event recorded after it.
    ops = [
        kernel("t.py:1", 1_000, 30_000, stream=1),
        ReplayOp(RECORD, "t.py:2", 1_000, stream=1, event=1),
        ReplayOp(WAIT, "t.py:3", 1_000, stream=0, event=1),
        kernel("t.py:4", 1_000, 5_000, stream=0),
    ]
    r = replay(ops)
    assert r.spans[1][:2] == (31_000, 36_000) and r.wall_ns == 36_000
    # Without the wait the two streams overlap: s0's kernel runs as soon as it is queued.
    free = replay([ops[0], ops[1], ops[3].changed(host_ns=2_000)])
    assert free.spans[1][:2] == (4_000, 9_000) and free.wall_ns == 31_000


def test_copies_in_one_direction_share_a_copy_engine_and_d2d_never_blocks_the_host():
    ops = [
        ReplayOp(H2D, "t.py:1", 1_000, stream=1, gpu_ns=10_000, pinned=True, non_blocking=True),
        ReplayOp(H2D, "t.py:2", 1_000, stream=2, gpu_ns=10_000, pinned=True, non_blocking=True),
        ReplayOp(D2D, "t.py:3", 1_000, stream=3, gpu_ns=10_000),
    ]
    r = replay(ops)
    # Second H2D waits for the engine (11,000..21,000); the d2d runs on the SMs at once.
    assert [s[:2] for s in r.spans] == [(1_000, 11_000), (11_000, 21_000), (3_000, 13_000)]
    assert r.host_end_ns == 3_000 and r.busy_ns == 20_000


def test_an_input_wait_charges_the_idle_gpu_to_the_line_that_pulls_the_batch():
    ops = [
        ReplayOp(INPUT, "t.py:9", 1_000, wait_ns=50_000),
        kernel("t.py:10", 1_000, 20_000),
        ReplayOp(D2H, "t.py:11", 1_000, gpu_ns=1_000, sync="item"),
    ]
    r = replay(ops)
    # Host: 1,000, the loader 1,000..51,000, k queued 52,000 runs to 72,000, item to 73,000.
    assert r.wall_ns == 73_000 and r.busy_ns == 21_000
    # Idle 0..52,000: 1,000 of Python before the wait (launch of the op that ends the gap),
    # the wait itself, then the 1,000 after it: launch too (the GPU idled through the wait,
    # so a batch ready at once would still have needed that Python first).
    assert r.idle_by_line == {("launch", "t.py:10", None): 2_000, ("input", "t.py:9", None): 50_000}


def test_chained_steps_overlap_the_work_one_step_leaves_queued():
    # No sync: the host queues a 10,000 kernel every 1,000; per step the GPU's 10,000 rules.
    ops = [kernel("t.py:1", 1_000, 10_000)]
    r = replay(ops, steps=5)
    assert r.wall_ns == 51_000 and r.step_ns == 10_200
    # A device sync every 2nd step only (every=2): steps 2 and 4 wait for the GPU.
    ops.append(ReplayOp(SYNC, "t.py:2", 0, stream=DEVICE, sync="synchronize", every=2))
    waited = replay(ops, steps=4)
    assert waited.host_by_cause["sync"] == (21_000 - 2_000) + (42_000 - 23_000)


def test_the_replays_idle_charging_agrees_with_the_measured_steps_rule():
    ops = [
        ReplayOp(INPUT, "t.py:1", 2_000, wait_ns=7_000),
        kernel("t.py:2", 3_000, 4_000),
        kernel("t.py:3", 500, 9_000, stream=1),
        ReplayOp(H2D, "t.py:4", 1_500, gpu_ns=3_000),
        kernel("t.py:5", 6_000, 1_000),
        ReplayOp(SYNC, "t.py:6", 700, stream=1, sync="synchronize"),
        kernel("t.py:7", 4_000, 2_000),
    ]
    r = replay(ops)
    intervals = [GpuInterval(a, b, s, line) for a, b, s, line in r.spans]
    waits = [HostInterval(INPUT, None, "t.py:1", 2_000, 9_000)]
    for a, b in _host_waits(ops):
        waits.append(HostInterval(*a, *b))
    measured = charge(0, r.wall_ns, intervals, waits)
    assert measured["idle_lines"] == r.to_dict()["idle_lines"]
    assert measured["busy_ms"] == r.to_dict()["busy_ms"]


def _host_waits(ops: list[ReplayOp]) -> list[tuple[tuple[str, str | None, str], tuple[int, int]]]:
    # The waits of the timeline above, worked out by hand: the H2D (pageable, blocking) queued
    # at 14,000 waits for stream 0's k2 (12,000..16,000): 16,000..19,000; the sync on stream 1
    # (k3 runs 12,500..21,500) from 25,700 has nothing left to wait for.
    return [(("copy", None, "t.py:4"), (14_000, 19_000))]


def test_end_of_step_idle_and_bad_input():
    r = replay([kernel("t.py:1", 1_000, 1_000), ReplayOp(INPUT, "t.py:2", 0, wait_ns=5_000)])
    # The GPU drained at 2,000; the host waits for input from 1,000 to 6,000.
    assert r.idle_by_line == {("launch", "t.py:1", None): 1_000, ("input", "t.py:2", None): 4_000}
    assert END_OF_STEP not in {line for _, line, _ in r.idle_by_line}
    with pytest.raises(ValueError, match="unknown op kind 'knl'"):
        ReplayOp("knl", "t.py:1")
    with pytest.raises(TypeError, match="no field"):
        kernel("t.py:1", 0, 0).changed(colour=1)
    with pytest.raises(ValueError):
        replay([], steps=0)


def test_the_replay_charges_an_op_of_a_backward_the_backwards_cost_outside_the_hot_path():
    # as the step clock does (profilers/counting/calibrate.py: backward_outside_ns)
    from time import perf_counter_ns

    from profilers.timing.oplog import OpLog

    log = OpLog(outside_ns=100)
    log.outside_backward_ns = 10**9  # a second an op: nothing else comes near it
    backward = [False]
    log.in_backward = lambda: backward[0]
    t = perf_counter_ns()
    log.op("train.py:3", None, t, t + 10, t + 20, None, None)  # no GPU work: host time carried
    forward = log.carry_ns
    backward[0] = True
    t = perf_counter_ns()
    log.op("train.py:3", None, t, t + 10, t + 20, None, None)
    assert forward < 10**8 and log.carry_ns - forward >= 10**9
