"""Every op kind the profiler classifies (profilers/counting/ops.py) that runs on a CPU-only torch, counted exactly.

Fake tensors report cuda:0/cuda:1 devices without a GPU; pinned memory is injected."""

from __future__ import annotations

import pytest
import torch

import profilers
from tests.profiler_helpers import (
    always_pinned,
    copies,
    fake_mode,
    line_at,
    line_of,
    never_pinned,
)

N = 256  # a 256x256 float32 tensor: 256*256*4 = 262144 bytes
NBYTES = N * N * 4


def run(fn, is_pinned=never_pinned, **kw) -> profilers.Report:
    with profilers.profile(is_pinned=is_pinned, **kw) as prof, fake_mode():
        fn()
    return prof.report()


@pytest.mark.usefixtures("both_paths")
def test_to_cuda_blocking_from_pageable_is_a_copy_and_a_sync():
    def work():
        x = torch.randn(N, N)
        x.to("cuda:0")  # @h2d

    r = run(work)
    assert r.totals.h2d.counts() == copies(count=1, bytes=NBYTES, pageable=1)  # 262144 bytes
    assert r.totals.syncs.to_dict() == {"count": 1, "by_cause": {"copy_to_device": 1}}
    line = line_at(r, line_of("h2d"))
    assert line.h2d.count == 1 and line.syncs.by_cause == {"copy_to_device": 1}
    assert line.source == 'x.to("cuda:0")  # @h2d'
    assert line.file == "tests/test_profiler_ops.py" and line.function == "work"


@pytest.mark.usefixtures("both_paths")
def test_non_blocking_h2d_from_pinned_memory_is_async():
    def work():
        torch.randn(N, N).to("cuda:0", non_blocking=True)

    r = run(work, is_pinned=always_pinned)
    assert r.totals.h2d.counts() == copies(count=1, bytes=NBYTES, non_blocking=1)
    assert r.totals.syncs.count == 0


@pytest.mark.usefixtures("both_paths")
def test_non_blocking_h2d_from_pageable_memory_is_flagged_pageable_not_a_sync():
    def work():
        torch.randn(N, N).to("cuda:0", non_blocking=True)

    r = run(work)
    assert r.totals.h2d.counts() == copies(count=1, bytes=NBYTES, pageable=1, non_blocking=1)
    assert r.totals.syncs.count == 0


@pytest.mark.usefixtures("both_paths")
def test_cpu_is_a_blocking_d2h_copy():
    def work():
        y = torch.randn(N, N).to("cuda:0", non_blocking=True)
        y.cpu()  # @d2h

    r = run(work)
    assert r.totals.d2h.counts() == copies(count=1, bytes=NBYTES, pageable=1)
    line = line_at(r, line_of("d2h"))
    assert line.syncs.to_dict() == {"count": 1, "by_cause": {"copy_to_host": 1}}


@pytest.mark.usefixtures("both_paths")
def test_non_blocking_to_cpu_lands_in_pinned_memory_and_does_not_sync():
    def work():
        y = torch.randn(N, N).to("cuda:0", non_blocking=True)
        y.to("cpu", non_blocking=True)

    # _to_copy pins its output when non_blocking: decided from the op, not from is_pinned()
    r = run(work, is_pinned=never_pinned)
    assert r.totals.d2h.counts() == copies(count=1, bytes=NBYTES, non_blocking=1)
    assert r.totals.syncs.count == 0


@pytest.mark.usefixtures("both_paths")
def test_copy_into_pageable_host_tensor_waits_even_when_non_blocking():
    def work():
        host = torch.empty(N, N)
        dev = torch.randn(N, N).to("cuda:0", non_blocking=True)
        host.copy_(dev)  # @blocking
        host.copy_(dev, non_blocking=True)  # @pageable_nb

    r = run(work)
    assert r.totals.d2h.counts() == copies(count=2, bytes=2 * NBYTES, pageable=2, non_blocking=1)
    assert line_at(r, line_of("blocking")).syncs.by_cause == {"copy_to_host": 1}
    assert line_at(r, line_of("pageable_nb")).syncs.by_cause == {"copy_to_host": 1}


@pytest.mark.usefixtures("both_paths")
def test_copy_into_pinned_host_tensor_non_blocking_does_not_wait():
    def work():
        host = torch.empty(N, N)
        dev = torch.randn(N, N).to("cuda:0", non_blocking=True)
        host.copy_(dev, non_blocking=True)

    r = run(work, is_pinned=always_pinned)
    assert r.totals.d2h.counts() == copies(count=1, bytes=NBYTES, non_blocking=1)
    assert r.totals.syncs.count == 0


@pytest.mark.usefixtures("both_paths")
def test_a_copy_of_no_elements_moves_nothing_and_waits_for_nothing():
    # NB: copy_impl (aten/src/ATen/native/Copy.cpp) returns before CUDA's copy kernel when the
    # copy has no elements: no cudaMemcpy, no stream sync; _to_copy copies through copy_.
    def work():
        empty = torch.empty(0).to("cuda:0")  # @none_h2d
        empty.cpu()  # @none_d2h
        torch.empty(0, 3).to("cuda:0", non_blocking=True)
        torch.empty(0).copy_(empty)  # @none_copy_
        empty.to("cuda:1")
        torch.randn(2).to("cuda:0")  # @two_floats

    r = run(work)
    assert r.totals.h2d.counts() == copies(count=1, bytes=8, pageable=1)  # 2 floats: 8 bytes
    assert r.totals.d2h.counts() == copies() and r.totals.p2p.counts() == copies()
    assert r.totals.syncs.to_dict() == {"count": 1, "by_cause": {"copy_to_device": 1}}
    assert line_at(r, line_of("two_floats")).syncs.count == 1
    for marker in ("none_h2d", "none_d2h", "none_copy_"):
        assert not [s for s in r.lines if s.line == line_of(marker) and s.syncs.count]


@pytest.mark.usefixtures("both_paths")
def test_gpu_to_gpu_is_p2p_and_same_gpu_copy_is_d2d_but_a_cast_is_neither():
    def work():
        y = torch.randn(N, N).to("cuda:0", non_blocking=True)
        y.to("cuda:1")  # @p2p
        y.to("cuda:0", copy=True)  # @d2d
        y.half()  # a cast on one GPU: no copy

    r = run(work, is_pinned=always_pinned)
    assert r.totals.p2p.counts() == copies(count=1, bytes=NBYTES)
    assert r.totals.d2d.counts() == copies(count=1, bytes=NBYTES)
    assert r.totals.syncs.count == 0
    assert line_at(r, line_of("p2p")).p2p.count == 1
    assert line_at(r, line_of("d2d")).d2d.count == 1
    assert {d["device"] for d in r.devices} == {"cpu", "cuda:0", "cuda:1"}


def test_item_copies_one_element_and_syncs(both_paths):
    def work():
        y = torch.randn(N, N).to("cuda:0", non_blocking=True)
        y.sum().item()  # @item

    r = run(work, is_pinned=always_pinned)
    line = line_at(r, line_of("item"))
    assert line.d2h.counts() == copies(count=1, bytes=4, pageable=1)  # one float32 = 4 bytes
    assert line.syncs.to_dict() == {"count": 1, "by_cause": {"item": 1}}
    if both_paths == "every_op":  # the fast path counts no ops
        assert line.ops == 2  # sum + _local_scalar_dense


def test_item_on_a_cpu_tensor_is_free(both_paths):
    def work():
        torch.randn(4).sum().item()

    r = run(work)
    assert r.totals.syncs.count == 0 and r.totals.d2h.count == 0
    assert r.totals.ops == (3 if both_paths == "every_op" else 0)  # the fast path counts none


@pytest.mark.usefixtures("both_paths")
def test_data_dependent_shapes_sync():
    def work():
        y = torch.randn(N, N).to("cuda:0", non_blocking=True)
        mask = torch.ones(N, N, dtype=torch.bool).to("cuda:0", non_blocking=True)
        torch.unique(y)  # @unique
        torch.masked_select(y, mask)  # @masked_select
        torch.where(y > 0)  # @where
        repeats = torch.ones(N, dtype=torch.long).to("cuda:0", non_blocking=True)
        torch.repeat_interleave(y, repeats, dim=0)  # @repeat

    r = run(work, is_pinned=always_pinned)
    for marker in ("unique", "masked_select", "where", "repeat"):
        line = line_at(r, line_of(marker))
        assert line.syncs.to_dict() == {"count": 1, "by_cause": {"data_dependent_shape": 1}}, marker
    assert r.totals.syncs.count == 4
    # bytes: 262144 (y) + 65536 (bool mask: 1 byte each) + 2048 (256 int64)
    assert r.totals.h2d.counts() == copies(count=3, bytes=NBYTES + N * N + N * 8, non_blocking=3)


def test_metadata_is_not_counted(both_paths):
    def work():
        y = torch.randn(2, 2).to("cuda:0", non_blocking=True)
        _ = (y.size(), y.shape, y.device, y.stride(), y.dim(), y.numel(), y.is_pinned())

    r = run(work, is_pinned=always_pinned)
    assert r.totals.ops == (2 if both_paths == "every_op" else 0)  # randn, _to_copy


def test_cpu_ops_get_host_time_and_no_copies():
    def work():
        a = torch.randn(64, 64)
        for _ in range(10):
            a = a @ a  # @mm
            a = a / a.norm()

    r = run(work)
    line = line_at(r, line_of("mm"))
    assert line.ops == 10 and line.kernel_time_ms > 0
    assert dict((k, int(v.count)) for k, v in line.op_breakdown.items()) == {"mm.default": 10}
    assert r.totals.bytes_moved == 0 and r.totals.syncs.count == 0
    assert r.options.kernel_timing_source == "host"


def test_kernel_timing_can_be_turned_off():
    def work():
        torch.randn(64, 64) @ torch.randn(64, 64)

    r = run(work, kernel_timing=False)  # the fast path: only the ops that copy or sync
    assert r.totals.ops == 0 and r.totals.kernel_time_ms == 0 and not r.counts_ops
    assert r.options.kernel_timing_source == "off" and r.options.counting == "copies"
    r = run(work, kernel_timing=False, count_ops=True)  # every op, through the mode
    assert r.totals.ops == 3 and r.totals.kernel_time_ms == 0 and r.counts_ops
    assert r.options.counting == "every_op"


def test_profiler_entered_inside_the_fake_mode_sees_the_same():
    with fake_mode():
        x = torch.randn(N, N)
        with profilers.profile(is_pinned=never_pinned) as prof:
            x.to("cuda:0")
            x.to("cuda:0").cpu()
    r = prof.report()
    assert r.totals.h2d.count == 2 and r.totals.d2h.count == 1 and r.totals.syncs.count == 3


def test_copies_record_their_time_and_dtype():
    def work():
        for dtype in (torch.float32, torch.float16):
            torch.randn(N, N, dtype=dtype).to("cuda:0")  # @dtypes

    r = run(work)
    assert r.totals.h2d.time_ms > 0  # host time of the two copy ops (no CUDA here)
    line = line_at(r, line_of("dtypes"))
    assert line.copy_dtypes == {"float32": NBYTES, "float16": NBYTES // 2}
