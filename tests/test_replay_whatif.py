"""What each fix saves (profilers/timing/whatif.py), on hand-built steps with exact answers
(ns; the timelines are worked out in the comments)."""

from __future__ import annotations

import pytest

from profilers.timing.gpu_model import gpu_spec
from profilers.timing.gpu_model.rates import copy_ns
from profilers.timing.replay import D2H, DEVICE, H2D, INPUT, KERNEL, SYNC, ReplayOp, replay
from profilers.timing.whatif import (
    BFLOAT16,
    DECIDES,
    DEFER_SYNC,
    HINT_WHATIFS,
    ON_DEVICE,
    OVERLAP_INPUT,
    PINNED,
    WhatIf,
    apply,
    candidates,
    rank,
    saving,
)


def kernel(line: str, host_ns: int, gpu_ns: int, stream: int = 0) -> ReplayOp:
    return ReplayOp(KERNEL, line, host_ns, gpu_ns=gpu_ns, stream=stream)


def sync(line: str, host_ns: int) -> ReplayOp:
    return ReplayOp(SYNC, line, host_ns, stream=DEVICE, sync="synchronize")


def test_a_sync_in_a_gpu_bound_step_saves_nothing():
    # 10 kernels of 10,000 queued every 1,000: the GPU ends at 101,000 with or without the
    # synchronize() after them (the host is far ahead).
    ops = [kernel("t.py:1", 1_000, 10_000) for _ in range(10)] + [sync("t.py:2", 1_000)]
    s = saving(ops, WhatIf(DEFER_SYNC, "t.py:2"))
    assert (s.base_ns, s.new_ns, s.saving_ns, s.share, s.ops) == (101_000, 101_000, 0, 0.0, 1)
    # An .item() there saves only its own copy (1,000 on the GPU): the value stays on the GPU.
    ops[-1] = ReplayOp(D2H, "t.py:2", 1_000, gpu_ns=1_000, sync="item")
    assert saving(ops, WhatIf(DEFER_SYNC, "t.py:2")).saving_ns == 1_000


def test_the_same_sync_in_a_launch_bound_step_saves_its_whole_wait():
    # A kernel of 2,000 queued every 10,000; the sync after the 5th waits 1,000 (51,000 to
    # 52,000, see tests/test_replay.py); without it everything after moves 1,000 earlier.
    ops = [kernel("t.py:1", 10_000, 2_000) for _ in range(5)] + [sync("t.py:2", 1_000)]
    ops += [kernel("t.py:3", 10_000, 2_000) for _ in range(5)]
    wait = replay(ops).host_by_cause["sync"]
    s = saving(ops, WhatIf(DEFER_SYNC, "t.py:2"))
    assert wait == 1_000 and s.saving_ns == wait and s.new_ns == 103_000
    # Read once per 2 steps: over 2 chained steps (206,000 as recorded), one waits: 205,000.
    half = saving(ops, WhatIf(DEFER_SYNC, "t.py:2", every=2))
    assert (half.base_ns, half.new_ns, half.saving_ns) == (103_000, 102_500, 500)


def test_a_read_that_decides_what_the_script_does_is_never_deferred():
    # `if not torch.isfinite(loss):` reads every step to decide: reading it once per 10 steps
    # would change the script, whatever it would save
    ops = [kernel("t.py:1", 10_000, 2_000) for _ in range(5)] + [sync("t.py:2", 1_000)]
    assert DEFER_SYNC in {w.kind for w in candidates(ops)}
    assert DEFER_SYNC not in {w.kind for w in candidates(ops, decides=["t.py:2"])}
    assert rank(ops, decides=["t.py:2"]).savings == []
    assert DECIDES.match("    if not torch.isfinite(loss):") and DECIDES.match("assert x")
    assert not DECIDES.match("    print(loss.item())") and not DECIDES.match("iffy = t.item()")


def _blocking_copy_step(**copy: object) -> list[ReplayOp]:
    # k0 10,000..12,000; the pageable copy queued at 11,000 runs 12,000..17,000 and holds the
    # host until then (6,000); k1 queued 27,000 runs to 29,000.
    fields: dict[str, object] = {"gpu_ns": 5_000, "nbytes": 4 << 20, "dtype": "float32"}
    fields.update(copy)
    return [
        kernel("t.py:1", 10_000, 2_000),
        ReplayOp(H2D, "t.py:2", 1_000, **fields),  # type: ignore[arg-type]
        kernel("t.py:3", 10_000, 2_000),
    ]


def test_a_pinned_non_blocking_copy_gives_back_the_hosts_wait():
    ops = _blocking_copy_step()
    assert replay(ops).wall_ns == 29_000 and replay(ops).host_by_cause["copy"] == 6_000
    # Pinned: the copy still runs 12,000..17,000, the host goes on: k1 runs 21,000..23,000.
    s = saving(ops, WhatIf(PINNED, "t.py:2"))
    assert (s.new_ns, s.saving_ns) == (23_000, 6_000)
    assert round(s.share, 4) == round(6_000 / 29_000, 4)
    # With a model of the GPU the copy also gets the pinned rate: its recorded time scaled by
    # the model's pinned/pageable ratio (a T4's PCIe 3).
    t4 = gpu_spec("T4")
    fixed, changed = apply(ops, WhatIf(PINNED, "t.py:2"), gpu=t4)
    pinned, pageable = copy_ns(t4, "h2d", 4 << 20, True), copy_ns(t4, "h2d", 4 << 20, False)
    assert changed == 1 and fixed[1].gpu_ns == round(5_000 * pinned / pageable)
    assert fixed[1].pinned and fixed[1].non_blocking and ops[1].pinned is False


def test_a_tensor_made_on_the_device_is_one_short_kernel_and_no_wait():
    ops = _blocking_copy_step()
    s = saving(ops, WhatIf(ON_DEVICE, "t.py:2"))
    # The copy becomes a 2,000 kernel (12,000..14,000), the host does not wait: k1 at 21,000.
    assert (s.new_ns, s.saving_ns) == (23_000, 6_000)
    # Only a line whose tensor a factory made on the host may be made on the device instead.
    assert ON_DEVICE not in {w.kind for w in candidates(ops)}
    assert ON_DEVICE in {w.kind for w in candidates(ops, on_device=["t.py:2"])}


def test_float32_copies_sent_as_bfloat16_halve_a_copy_on_the_critical_path():
    # Pinned and non_blocking: k0 1,000..3,000, the copy 3,000..11,000, k1 (needs it, same
    # stream) 11,000..13,000. Half the bytes: the copy 3,000..7,000, k1 to 9,000.
    ops = [
        kernel("t.py:1", 1_000, 2_000),
        ReplayOp(H2D, "t.py:2", 1_000, gpu_ns=8_000, nbytes=10**6, dtype="float32", pinned=True),
        kernel("t.py:3", 1_000, 2_000),
    ]
    ops[1] = ops[1].changed(non_blocking=True)
    s = saving(ops, WhatIf(BFLOAT16, "t.py:2"))
    assert (s.base_ns, s.new_ns, s.saving_ns) == (13_000, 9_000, 4_000)
    fixed, _ = apply(ops, WhatIf(BFLOAT16, "t.py:2"))
    assert (fixed[1].nbytes, fixed[1].dtype) == (500_000, "bfloat16")


def test_input_overlapped_with_compute_leaves_only_what_the_step_does_not_cover():
    # The loader blocks 50,000; the rest of the step (1,000 + ten 2,000 kernels queued every
    # 1,000 + an .item()) takes 23,000 on its own: 73,000 in all.
    ops = [ReplayOp(INPUT, "t.py:9", 1_000, wait_ns=50_000)]
    ops += [kernel("t.py:10", 1_000, 2_000) for _ in range(10)]
    ops.append(ReplayOp(D2H, "t.py:11", 1_000, gpu_ns=1_000, sync="item"))
    assert replay(ops).wall_ns == 73_000
    # One worker prefetching: it loads while the step runs, the host waits 50,000 - 23,000.
    one = saving(ops, WhatIf(OVERLAP_INPUT, "t.py:9"))
    assert (one.new_ns, one.saving_ns) == (50_000, 23_000)
    # Four workers: 12,500 a batch, covered by the step: the wait is gone.
    four = saving(ops, WhatIf(OVERLAP_INPUT, "t.py:9", workers=4))
    assert (four.new_ns, four.saving_ns) == (23_000, 50_000)


def test_ranking_orders_by_saving_and_shows_how_the_fixes_interact():
    # k0 1,000..21,000; sync A (t.py:2) waits 2,000..21,000; sync B (t.py:3) then finds the GPU
    # idle; k1 queued 23,000 runs to 43,000.
    ops = [kernel("t.py:1", 1_000, 20_000), sync("t.py:2", 1_000), sync("t.py:3", 1_000)]
    ops.append(kernel("t.py:4", 1_000, 20_000))
    r = rank(ops, every=0)
    assert r.base_ns == 43_000
    # Without A, B waits in its place (3,000..21,000): k1 runs 22,000..42,000, saves 1,000.
    # Without B, A still drains the GPU: saves nothing. Without both, k1 is queued at 4,000
    # and runs right after k0: 41,000, saving 2,000, more than the sum of the two.
    assert [(s.whatif.line, s.saving_ns) for s in r.savings] == [("t.py:2", 1_000), ("t.py:3", 0)]
    assert (r.sum_ns, r.combined_ns, r.interaction_ns) == (1_000, 2_000, -1_000)


def test_ranking_applies_one_fix_per_copy_and_overlaps_input_last():
    ops = [ReplayOp(INPUT, "t.py:9", 1_000, wait_ns=30_000), *_blocking_copy_step()]
    r = rank(ops, on_device=["t.py:2"])
    kinds = {(s.whatif.kind, s.whatif.line) for s in r.savings}
    assert kinds == {
        (OVERLAP_INPUT, "t.py:9"),
        (PINNED, "t.py:2"),
        (ON_DEVICE, "t.py:2"),
        (BFLOAT16, "t.py:2"),
    }
    copy_fixes = [w for w in r.combined if w.line == "t.py:2"]
    assert len(copy_fixes) == 1 and r.combined[-1].kind == OVERLAP_INPUT
    # As recorded: the loader to 31,000, k0 41,000..43,000, the copy holds the host to 48,000,
    # k1 58,000..60,000. All applied: the copy no longer blocks and the rest of the step takes
    # 24,000 (22,000 of host, then k1's 2,000), so the loader leaves 30,000 - 24,000 = 6,000.
    assert r.base_ns == 60_000 and r.base_ns - r.combined_ns == 24_000 + 6_000


def test_every_hint_that_names_a_fix_maps_to_a_what_if_that_exists():
    from gpuwatch.analysis.hints import KINDS

    # the one map of hint -> what-if (profilers) names registered hints, which read it
    assert set(HINT_WHATIFS) <= set(KINDS)
    assert {k.name for k in KINDS.values() if k.whatif} == set(HINT_WHATIFS)
    assert {"item_in_loop", "blocking_h2d", "created_on_cpu", "float32_copies"} <= set(HINT_WHATIFS)
    with pytest.raises(ValueError, match="unknown what-if"):
        WhatIf("faster_gpu")
    assert WhatIf(DEFER_SYNC, "t.py:1", every=10).describe() == "read the value once per 10 steps"


def test_the_typical_step_waits_for_input_as_long_as_the_steps_did_on_average():
    from profilers.timing.oplog import LoggedStep
    from profilers.timing.replayed import typical

    def step(n: int, wait_ms: float) -> LoggedStep:
        # a loader's wait, then a kernel: the fields of profilers/timing/oplog.py's records
        wait = ["t.py:4", INPUT, 0, 0, 0, 0, 0, False, False, None, None, int(wait_ms * 1e6)]
        kernel = ["t.py:5", KERNEL, 100_000, 0, 0, 50_000, 0, False, False, None, None, 0]
        return LoggedStep(n, [wait, kernel], 0)

    # a loader with workers that keeps pace every other step: 8, 0, 8, 0 ms of waiting
    found = typical([step(n, 8.0 if n % 2 else 0.0) for n in range(1, 5)])
    assert found is not None
    _, ops, over = found
    assert over == 4 and ops[0].kind == INPUT and ops[0].wait_ns == 4_000_000
    assert ops[1].host_ns == 100_000
