"""CUDA graphs and CUDA generators on the fake GPU: a capture records the ops of its block, a
replay counts them again from its line (no host copy, no sync), what a GPU cannot capture raises
PyTorch's CUDA error naming the line; ``torch.Generator(device="cuda")`` works."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import profilers
from tests import conftest
from tests.profiler_helpers import EXTRA_DETACHES, copies, line_at, line_of

pytestmark = [
    pytest.mark.fake_cuda,
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
    pytest.mark.usefixtures("both_paths"),  # the exact counts hold on both counting paths
]


def profiled(fn, devices: int = 1):
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda(devices) as harness, profilers.profile() as prof:
        fn()
    r = prof.report()
    r = harness.mark(r)
    return r, harness


@pytest.mark.slow
@pytest.mark.usefixtures("both_values")  # the same counts with real values and placeholders
def test_warmup_capture_and_replays_count_what_a_gpu_does(both_paths: str):
    seen: dict[str, object] = {}
    replays = 5

    def work():
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("cuda")
        static_in = torch.zeros(2, 8, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(static_in)  # @warmup
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # @enter
            static_out = model(static_in)  # @capture
        seen["out"] = (tuple(static_out.shape), static_out.device, static_out.dtype)
        host = torch.randn(2, 8).pin_memory()
        for _ in range(replays):
            static_in.copy_(host, non_blocking=True)  # @feed
            graph.replay()  # @replay
        seen["same_out"] = static_out is not None and static_out.shape == (2, 4)

    r, harness = profiled(work)
    assert seen["out"] == ((2, 4), torch.device("cuda:0"), torch.float32)
    # entering torch.cuda.graph synchronises once, as on a GPU (torch/cuda/graphs.py)
    assert line_at(r, line_of("enter")).syncs.to_dict() == {
        "count": 1,
        "by_cause": {"synchronize": 1},
    }
    feed = line_at(r, line_of("feed"))
    # a pinned non_blocking copy each step: 2 * 8 * 4 bytes, no sync
    assert feed.h2d.counts() == copies(count=replays, bytes=replays * 64, non_blocking=replays)
    assert feed.syncs.count == 0
    # a replay neither copies to or from the host nor waits: on the copies path, no line at all
    at_replay = [s for s in r.lines if s.line == line_of("replay")]
    assert [(s.syncs.count, s.d2h.count, s.h2d.count) for s in at_replay] == (
        [(0, 0, 0)] if both_paths == "every_op" else []
    )
    if both_paths == "every_op":
        replay = line_at(r, line_of("replay"))
        capture = line_at(r, line_of("capture"))
        # one forward: 2 Linear (t + addmm each) + relu = 5 ops, and each replay runs them again
        per_step = {"t.default": 2, "addmm.default": 2, "relu.default": 1}
        captured = {k: v.count for k, v in capture.op_breakdown.items()}
        assert {k: captured[k] for k in per_step} == per_step
        # every op the capture dispatched runs again at each replay, nothing else
        replayed = {k: v.count for k, v in replay.op_breakdown.items()}
        once = dict(captured)
        if EXTRA_DETACHES:
            # NB: torch 2.9 dispatches one more detach below the profiler at capture (the
            # op-total difference of EXTRA_DETACHES), which the fake graph replays: no kernel
            # runs for a detach on a GPU, and no copy, sync or byte differs
            assert replayed.pop("detach.default") == (once.pop("detach.default") + 1) * replays
        assert replayed == {k: n * replays for k, n in once.items()}
        warmup = line_at(r, line_of("warmup"))
        # the warmup forward is the captured one, three times
        assert sum(v.count for v in warmup.op_breakdown.values()) == 3 * sum(captured.values())
    assert r.options.fake_cuda.graphs == {
        "captures": 1,
        "replays": replays,
        "capture_errors": [],
    }
    assert harness.placeholders.to_dict() == {"values": 0, "host_copies": 0, "sizes": 0}


def test_a_whole_training_step_captured_replays_its_backward_and_optimizer(both_paths: str):
    def work():
        model = nn.Linear(4, 2).to("cuda")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.zeros(3, 4, device="cuda"), torch.zeros(3, 2, device="cuda")
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            loss = nn.functional.mse_loss(model(x), y)  # @fwd
            loss.backward()  # @bwd
            opt.step()  # @step
        for _ in range(4):
            graph.replay()  # @step_replay

    r, _ = profiled(work)
    replay = line_at(r, line_of("step_replay"))
    # each replay runs backward's two gradient copies into .grad again (d2d, 4*2*4 + 2*4 bytes)
    bwd_d2d = line_at(r, line_of("bwd")).d2d.counts()
    assert bwd_d2d == copies(count=2, bytes=32 + 8)
    assert replay.d2d.counts() == copies(count=4 * 2, bytes=4 * 40)
    assert replay.syncs.count == 0 and replay.d2h.counts() == copies()
    if both_paths == "every_op":
        captured = [line_at(r, line_of(m)) for m in ("fwd", "bwd", "step")]
        once = sum(
            v.count for s in captured for k, v in s.op_breakdown.items() if "profiler" not in k
        )
        assert replay.ops == 4 * once


def test_what_a_capture_cannot_hold_raises_pytorchs_error_and_names_the_line():
    errors: list[str] = []

    def work():
        model = nn.Linear(4, 1).to("cuda")
        x = torch.zeros(2, 4, device="cuda")
        for attempt in ("item", "sync", "pageable", "nonzero"):
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):
                    out = model(x)
                    if attempt == "item":
                        out.sum().item()  # @item
                    elif attempt == "sync":
                        torch.cuda.synchronize()  # @sync
                    elif attempt == "pageable":
                        x.copy_(torch.ones(2, 4))  # @pageable
                    else:
                        out.nonzero()  # @nonzero
            except RuntimeError as exc:
                errors.append(str(exc))
            with pytest.raises(RuntimeError, match="without a preceding successful capture"):
                graph.replay()
        assert not torch.cuda.is_current_stream_capturing()

    r, _ = profiled(work)
    assert len(errors) == 4
    for text in errors:
        assert text.splitlines()[0] == (
            "CUDA error: operation not permitted when stream is capturing"
        )
    assert isinstance(torch.AcceleratorError("x"), RuntimeError)
    lines = [line_of(m) for m in ("item", "sync", "pageable", "nonzero")]
    failed = r.options.fake_cuda.graphs["capture_errors"]
    assert [e["line"] for e in failed] == lines
    assert all(e["file"].endswith("test_fake_cuda_graphs.py") for e in failed)
    assert f"test_fake_cuda_graphs.py:{lines[0]}" in errors[0]
    assert r.options.fake_cuda.graphs["captures"] == 0


def test_reset_pool_handles_and_make_graphed_callables():
    def work():
        model = nn.Linear(8, 4).to("cuda")
        x = torch.zeros(2, 8, device="cuda")
        pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            assert torch.cuda.is_current_stream_capturing()
            model(x)
        assert graph.pool() == pool
        graph.replay()
        graph.reset()
        with pytest.raises(RuntimeError, match="without a preceding successful capture"):
            graph.replay()
        graphed = torch.cuda.make_graphed_callables(model, (x,))
        out = graphed(x)  # @graphed
        out.sum().backward()
        assert out.shape == (2, 4) and model.weight.grad.shape == (4, 8)

    r, _ = profiled(work)
    assert r.options.fake_cuda.graphs["captures"] == 1 + 2  # make_graphed: fwd + bwd
    assert r.options.fake_cuda.graphs["replays"] == 1 + 2  # one forward, one backward


def test_cuda_generators_work_on_the_fake_gpu():
    seen: dict[str, object] = {}

    def work():
        g = torch.Generator(device="cuda:1")
        seen["device"] = g.device
        seen["is_generator"] = isinstance(g, torch.Generator)
        g.manual_seed(1234)
        seen["seed"] = g.initial_seed()
        t = torch.randn(3, 2, generator=g, device="cuda:1")
        seen["t"] = (tuple(t.shape), t.device)
        seen["perm"] = tuple(torch.randperm(5, generator=g, device="cuda:1").shape)
        state = g.get_state()
        seen["state"] = (state.dtype, tuple(state.shape))
        seen["defaults"] = len(torch.cuda.default_generators)
        torch.cuda.manual_seed(7)
        seen["default_seed"] = torch.cuda.default_generators[0].initial_seed()
        seen["host"] = torch.Generator().device
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.Generator(device="cuda:2")

    profiled(work, devices=2)
    assert seen == {
        "device": torch.device("cuda:1"),
        "is_generator": True,
        "seed": 1234,
        "t": ((3, 2), torch.device("cuda:1")),
        "perm": (5,),
        "state": (torch.uint8, (16,)),
        "defaults": 2,
        "default_seed": 7,
        "host": torch.device("cpu"),
    }
    assert torch.cuda.default_generators == () or torch.cuda.is_available()  # given back
