"""The profiler on real CUDA tensors, and its cross-checks against PyTorch's own tools.

Marked ``gpu``; skipped without CUDA. Run them where a GPU is lent: ``pytest -m gpu``."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

import profilers
from tests.profiler_helpers import copies, line_at, line_of

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

N = 256
NBYTES = N * N * 4  # 262144


def test_every_dispatcher_table_row_on_a_real_gpu(capsys):
    x = torch.randn(N, N)
    pinned = torch.randn(N, N).pin_memory()
    with profilers.profile() as prof:
        y = x.to("cuda:0")  # @h2d
        pinned.to("cuda:0", non_blocking=True)  # @h2d_pinned
        x.to("cuda:0", non_blocking=True)  # @h2d_pageable_nb
        y.cpu()  # @d2h
        y.to("cpu", non_blocking=True)  # @d2h_nb
        torch.empty(N, N).copy_(y, non_blocking=True)  # @d2h_pageable_nb
        y.sum().item()  # @item
        y[y > 0]  # @mask
        torch.nonzero(y)  # @nonzero
        y[0, :4].tolist()  # @tolist
        print(y[:1, :1])  # @print
        torch.cuda.synchronize()  # @synchronize
        torch.cuda.current_stream().synchronize()  # @stream
        ev = torch.cuda.Event()
        ev.record()
        ev.synchronize()  # @event
    r = prof.report()
    capsys.readouterr()
    assert line_at(r, line_of("h2d")).h2d.counts() == copies(count=1, bytes=NBYTES, pageable=1)
    assert line_at(r, line_of("h2d")).syncs.by_cause == {"copy_to_device": 1}
    assert line_at(r, line_of("h2d_pinned")).h2d.counts() == copies(
        count=1, bytes=NBYTES, non_blocking=1
    )
    assert line_at(r, line_of("h2d_pinned")).syncs.count == 0
    assert line_at(r, line_of("h2d_pageable_nb")).h2d.counts() == copies(
        count=1, bytes=NBYTES, pageable=1, non_blocking=1
    )
    assert line_at(r, line_of("h2d_pageable_nb")).syncs.count == 0
    assert line_at(r, line_of("d2h")).syncs.by_cause == {"copy_to_host": 1}
    assert line_at(r, line_of("d2h_nb")).d2h.counts() == copies(
        count=1, bytes=NBYTES, non_blocking=1
    )
    assert line_at(r, line_of("d2h_nb")).syncs.count == 0
    assert line_at(r, line_of("d2h_pageable_nb")).syncs.by_cause == {"copy_to_host": 1}
    assert line_at(r, line_of("item")).syncs.by_cause == {"item": 1}
    assert line_at(r, line_of("item")).d2h.counts() == copies(count=1, bytes=4, pageable=1)
    assert line_at(r, line_of("mask")).syncs.by_cause == {"data_dependent_shape": 1}
    assert line_at(r, line_of("nonzero")).syncs.by_cause == {"data_dependent_shape": 1}
    tolist = line_at(r, line_of("tolist"))
    assert tolist.d2h.count == 1 and tolist.syncs.by_cause == {"copy_to_host": 1}
    assert line_at(r, line_of("print")).syncs.by_cause.get("copy_to_host", 0) >= 1
    for marker in ("synchronize", "stream", "event"):
        assert line_at(r, line_of(marker)).syncs.by_cause == {"synchronize": 1}, marker
    assert r.options.kernel_timing_source == "cuda_events"
    assert {d["device"] for d in r.devices} == {"cpu", "cuda:0"}
    assert r.devices[1]["name"]


def test_kernel_time_comes_from_cuda_events():
    a = torch.randn(4096, 4096, device="cuda:0")
    with profilers.profile() as prof:
        for _ in range(5):
            a @ a  # @matmul
    line = line_at(prof.report(), line_of("matmul"))
    # 5 products of 2*4096^3 = 687 GFLOP: more than a millisecond on any GPU
    assert line.kernel_time_ms > 1.0
    assert line.op_breakdown["mm.default"].count == 5


def test_copies_to_the_gpu_and_side_streams_are_timed_on_their_own_stream():
    from profilers.timing.cuda_events import TorchCuda

    cuda = TorchCuda()
    host = torch.randn(2048, 2048).pin_memory()  # 2048*2048*4 = 16 MiB
    side = torch.cuda.Stream()
    on_gpu = torch.ones(4, device="cuda:0")
    assert cuda.stream_for((on_gpu,), {}) == (torch.cuda.current_stream(0), 0)
    assert cuda.stream_for((host,), {"device": torch.device("cuda:0")})[1] == 0
    with torch.cuda.stream(side):
        assert cuda.stream_for((on_gpu,), {})[0] == side
    with profilers.profile() as prof:
        y = host.to("cuda:0", non_blocking=True)  # @h2d
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y @ y  # @side
    r = prof.report()
    assert line_at(r, line_of("h2d")).h2d.time_ms > 0  # 16 MiB over PCIe: well above 0
    assert line_at(r, line_of("side")).kernel_time_ms > 0


def _workload() -> None:
    x = torch.randn(1024, 1024)  # 4 MiB
    xp = torch.randn(512, 512).pin_memory()  # 1 MiB
    for _ in range(5):
        y = x.to("cuda:0")
        y2 = xp.to("cuda:0", non_blocking=True)
        (y @ y).cpu()
        (y2 * 2).sum().item()


def test_copies_match_torch_profiler_memcpy_events(tmp_path):
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as tp, profilers.profile() as gp:
        _workload()
        torch.cuda.synchronize()
    trace = tmp_path / "trace.json"
    tp.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    memcpy = [e for e in events if e.get("cat") == "gpu_memcpy"]
    seen = {"h2d": [0, 0], "d2h": [0, 0], "p2p": [0, 0]}
    for e in memcpy:
        way = (
            "h2d"
            if "HtoD" in e["name"]
            else "d2h"
            if "DtoH" in e["name"]
            else "p2p"
            if "PtoP" in e["name"]
            else None
        )
        if way:
            seen[way][0] += 1
            seen[way][1] += int(e["args"]["bytes"])
    r = gp.report()
    for way, (count, nbytes) in seen.items():
        assert (r.totals.copies(way).count, r.totals.copies(way).bytes) == (count, nbytes), way
    assert seen["h2d"] == [10, 5 * (4 * 2**20 + 2**20)]


def test_syncs_match_set_sync_debug_mode_warnings():
    x = torch.randn(1024, 1024)
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with profilers.profile() as gp:
                for _ in range(4):
                    y = x.to("cuda:0")  # flagged
                    y.sum().item()  # flagged
                    y[y > 0]  # flagged
                    torch.empty(8).copy_(
                        y[0, :8], non_blocking=True
                    )  # not flagged: pageable nb D2H
                torch.cuda.synchronize()  # explicit: not flagged
    finally:
        torch.cuda.set_sync_debug_mode(0)
    flagged = [w for w in caught if "synchroniz" in str(w.message)]
    r = gp.report()
    explicit, pageable_nb_d2h = 1, 4
    assert r.totals.syncs.count == len(flagged) + explicit + pageable_nb_d2h
    assert r.totals.syncs.by_cause["synchronize"] == explicit


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_dataparallel_step_is_counted():
    model = torch.nn.DataParallel(torch.nn.Linear(512, 512).cuda())
    x = torch.randn(256, 512, device="cuda:0")
    with profilers.profile() as prof:
        model(x).sum().backward()  # @dp
    line = line_at(prof.report(), line_of("dp"))
    gpus = torch.cuda.device_count()
    # broadcast of the replicas (512*512 + 512 floats) to every GPU but the first, each step
    assert line.p2p.count >= gpus - 1
    assert line.p2p.bytes >= (gpus - 1) * (512 * 512 + 512) * 4


@pytest.mark.parametrize("trace", [False, True], ids=["entry-points", "gpu-trace"])
def test_explicit_syncs_are_counted_once_either_way(trace, capsys):
    y = torch.randn(8, device="cuda:0")
    with profilers.profile(trace_syncs=trace) as prof:
        torch.cuda.synchronize()  # @explicit
        y.sum().item()  # @item_once
        print(y)  # @printed
    r = prof.report()
    capsys.readouterr()
    assert line_at(r, line_of("explicit")).syncs.by_cause == {"synchronize": 1}
    assert line_at(r, line_of("item_once")).syncs.by_cause == {"item": 1}
    printed = line_at(r, line_of("printed")).syncs.by_cause
    if trace:  # the trace sees every sync printing makes inside torch
        assert printed.get("copy_to_host", 0) >= 1
    else:
        assert printed == {"copy_to_host": 1}


def test_backward_on_autograd_device_threads_goes_to_the_forward_lines():
    # On a GPU the backward runs on autograd's device thread, with no Python frame of the user.
    w1 = torch.randn(512, 512, device="cuda:0", requires_grad=True)
    w2 = torch.randn(512, 512, device="cuda:0", requires_grad=True)
    x = torch.randn(256, 512, device="cuda:0")
    with profilers.profile() as prof:
        for _ in range(3):
            h = (x @ w1).relu()  # @gpu_first
            out = (h @ w2).sum()  # @gpu_second
            out.backward()  # @gpu_bwd
    r = prof.report()
    first, second = line_at(r, line_of("gpu_first")), line_at(r, line_of("gpu_second"))
    bwd = line_at(r, line_of("gpu_bwd"))
    # MmBackward0 for w1 (t, mm), ReluBackward0 (detach, threshold_backward), per step.
    assert first.backward["mm.default"].count == 3
    assert first.backward["threshold_backward.default"].count == 3
    # MmBackward0 for both h and w2 (two mm), SumBackward0 (expand), per step.
    assert second.backward["mm.default"].count == 6 and second.backward["expand.default"].count == 3
    # CUDA-event time: each forward line's backward is part of the .backward() line's.
    assert first.backward_ms > 0 and second.backward_ms > 0
    assert first.backward_ms + second.backward_ms <= bwd.kernel_time_ms + 1e-6
    assert bwd.ops >= first.backward_ops + second.backward_ops


def test_indexing_rules_and_torch_tensor_on_a_real_gpu():
    x = torch.randn(100, 4, device="cuda")
    keep = torch.zeros(100, dtype=torch.bool)
    keep[:30] = True
    with profilers.profile() as prof:
        torch.tensor([1.0, 2.0, 3.0], device="cuda")  # @tensor
        x[torch.tensor([1, 2, 3])]  # @ind_cpu
        x[keep]  # @mask_cpu
        x[~(x[:, 0] > 0)] = 0.0  # @masked_fill
    r = prof.report()
    assert line_at(r, line_of("tensor")).h2d.counts() == copies(count=1, bytes=12, pageable=1)
    ind = line_at(r, line_of("ind_cpu"))
    assert ind.h2d.counts() == copies(count=1, bytes=24, pageable=1)
    assert ind.syncs.by_cause == {"copy_to_device": 1}
    mask = line_at(r, line_of("mask_cpu"))
    assert mask.h2d.counts() == copies(count=1, bytes=240, non_blocking=1) and not mask.syncs.count
    assert line_at(r, line_of("masked_fill")).syncs.count == 0


def test_the_fast_path_counts_what_the_mode_counts_on_a_real_gpu(capsys):
    """--no-kernel-timing's kernels against the dispatch mode, on real CUDA: copies both ways,
    syncs, masks, inference mode (``to``/``item`` decomposed below a whole op), autograd's device
    thread sending a gradient back to the host."""
    from tests.test_fast_path import counted

    x = torch.randn(N, N, requires_grad=True)
    pinned = torch.randn(N, N).pin_memory()
    model = torch.nn.Linear(N, 8).to("cuda:0")

    def work():
        y = x.to("cuda:0")  # @fast_h2d
        pinned.to("cuda:0", non_blocking=True)
        y.detach().cpu()
        y.sum().item()  # @fast_item
        y[y > 0]
        (y * 2).sum().backward()  # @fast_backward
        with torch.inference_mode():
            out = model(torch.randn(4, N).to("cuda:0"))  # @fast_infer
            out.cpu()
            float(out.sum())  # @fast_infer_item
        print(y[:1, :1])

    reports = []
    for count_ops in (None, True):
        with profilers.profile(kernel_timing=False, count_ops=count_ops) as prof:
            work()
        reports.append(prof.report())
    capsys.readouterr()
    fast, mode = reports
    assert fast.options.counting == "copies" and mode.options.counting == "every_op"
    assert counted(fast) == counted(mode)
    assert line_at(fast, line_of("fast_h2d")).h2d.counts() == copies(
        count=1, bytes=NBYTES, pageable=1
    )
    assert line_at(fast, line_of("fast_item")).syncs.by_cause == {"item": 1}
    assert line_at(fast, line_of("fast_backward")).d2h.count == 1  # ToCopyBackward's, on its thread
    assert line_at(fast, line_of("fast_infer")).h2d.count == 1
    assert line_at(fast, line_of("fast_infer_item")).syncs.by_cause == {"item": 1}
