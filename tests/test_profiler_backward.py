"""Backward ops charged to the forward line whose op made their autograd node, besides the
.backward() line; and thread states reused so that a thread per step keeps memory bounded."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

import profilers
from profilers.counting import backward as _backward
from profilers.counting.backward import _made_by, _node_stem
from tests.profiler_helpers import EXTRA_DETACHES, line_at, line_of
from tests.test_cuda_timing import TICK_MS, StubCuda


def counts(ops: dict[str, Any]) -> dict[str, int]:
    return {name: int(e.count) for name, e in ops.items()}


def test_each_forward_line_gets_the_backward_of_its_own_ops():
    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(2, 4)
    with profilers.profile() as prof:
        h = x @ w  # @mm
        y = h.relu()  # @relu
        loss = y.sum()  # @sum
        loss.backward()  # @backward
    r = prof.report()
    # MmBackward0 makes the grad of w only (x needs none): x.t() @ grad, one t and one mm.
    assert counts(line_at(r, line_of("mm")).backward) == {"t.default": 1, "mm.default": 1}
    # ReluBackward0 unpacks the saved result (a detach) and runs threshold_backward.
    assert counts(line_at(r, line_of("relu")).backward) == {
        "detach.default": 1,
        "threshold_backward.default": 1,
    }
    # SumBackward0 expands the incoming grad back to y's shape.
    assert counts(line_at(r, line_of("sum")).backward) == {"expand.default": 1}
    # The .backward() line keeps every backward op: the 5 above, plus ones_like (the first
    # grad, made before any node runs) and AccumulateGrad's detach of w's grad: no forward op
    # made those, so no forward line gets them.
    # (torch 2.9: AccumulateGrad's extra detach, EXTRA_DETACHES)
    bwd = line_at(r, line_of("backward"))
    assert bwd.ops == 7 + EXTRA_DETACHES and bwd.backward == {}
    assert counts(bwd.op_breakdown) == {
        "ones_like.default": 1,
        "expand.default": 1,
        "detach.default": 2 + EXTRA_DETACHES,
        "threshold_backward.default": 1,
        "t.default": 1,
        "mm.default": 1,
    }
    # Host time is charged to both: the forward line's share is part of the backward line's.
    mm = line_at(r, line_of("mm"))
    assert 0 < mm.backward_ms <= bwd.kernel_time_ms
    # Forward counts are unchanged, and the totals count each op once.
    assert line_at(r, line_of("mm")).ops == 1 and r.totals.ops == 1 + 2 + 1 + bwd.ops


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2  # @custom_fwd

    @staticmethod
    def backward(ctx, grad):
        return grad * 2  # @custom_bwd


def test_a_node_no_line_made_is_not_given_to_a_neighbour():
    # A custom Function's node is made by Function.apply, whose forward ops run with grad off:
    # its node number falls in the range of the line before. That line's ops make no node of
    # that kind, so its backward stays at the .backward() line only.
    x = torch.randn(8, requires_grad=True)
    with profilers.profile() as prof:
        a = x.exp()  # @exp
        b = _Double.apply(a)
        b.sum().backward()  # @custom_backward
    r = prof.report()
    # ExpBackward0: unpacks the saved result (a detach), then grad * result.
    assert counts(line_at(r, line_of("exp")).backward) == {"detach.default": 1, "mul.Tensor": 1}
    # The Function's own ops are user code: charged to its lines, forward and backward alike.
    assert counts(line_at(r, line_of("custom_fwd")).op_breakdown) == {"mul.Tensor": 1}
    assert line_at(r, line_of("custom_fwd")).backward == {}
    assert counts(line_at(r, line_of("custom_bwd")).op_breakdown) == {"mul.Tensor": 1}
    assert line_at(r, line_of("custom_backward")).op_breakdown["mul.Tensor"].count == 1  # exp's


def test_several_forwards_then_one_backward_go_to_their_own_lines():
    lin = torch.nn.Linear(6, 6)
    xs = [torch.randn(3, 6) for _ in range(3)]
    with profilers.profile() as prof:
        total = 0
        for x in xs:
            total = total + lin(x).tanh().sum()  # @step
        extra = lin.weight.square().sum()  # @extra
        (total + extra).backward()
    r = prof.report()
    step = line_at(r, line_of("step"))
    # Per micro-batch: TanhBackward0 (tanh_backward), AddmmBackward0 (t, mm, t, sum, view),
    # TBackward0 (t), SumBackward0 (expand), AddBackward0 (nothing: the grad passes through).
    assert step.backward["tanh_backward.default"].count == 3
    assert step.backward["mm.default"].count == 3  # the grad of the weight (x needs none)
    assert counts(line_at(r, line_of("extra")).backward) == {
        "expand.default": 1,  # SumBackward0
        "pow.Tensor_Scalar": 1,  # PowBackward0: grad * 2 * w ...
        "mul.Scalar": 1,
        "mul.Tensor": 1,
    }


def _forward_on_a_thread(layer, x, out):
    out.append(layer(x).relu().sum())  # @thread_fwd


def test_forward_on_threads_backward_on_main_like_dataparallel():
    # Each thread numbers its nodes from its own counter, so numbers repeat across threads;
    # a node goes to the line of the thread whose op there can have made it.
    layer = torch.nn.Linear(5, 4)
    with profilers.profile() as prof:
        outs: list[torch.Tensor] = []
        workers = [
            threading.Thread(target=_forward_on_a_thread, args=(layer, torch.randn(2, 5), outs))
            for _ in range(2)
        ]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        loss = outs[0] + outs[1].exp()  # @main_fwd
        loss.backward()
    r = prof.report()
    fwd = line_at(r, line_of("thread_fwd"))
    assert fwd.backward["threshold_backward.default"].count == 2  # one ReluBackward0 per thread
    assert fwd.backward["mm.default"].count == 2  # AddmmBackward0: the weight's grad
    main = line_at(r, line_of("main_fwd"))
    # ExpBackward0 (detach of the saved result, a mul); AddBackward0 runs no op.
    assert counts(main.backward) == {"detach.default": 1, "mul.Tensor": 1}


def test_a_thread_per_step_reuses_states_and_counts_stay_exact():
    a = torch.randn(8, 8)
    with profilers.profile() as prof:
        for _ in range(40):
            t = threading.Thread(target=torch.mm, args=(a, a))
            t.start()
            t.join()
    rec = prof._recorder
    assert rec is not None
    # two: the main thread's (it holds the step clock of the time view) and one reused by all
    # 40 threads, so a thread per step keeps memory flat
    assert len(rec.threads.all()) == 2
    (unknown,) = [s for s in prof.report().lines if s.file == "<unknown>"]
    assert unknown.ops == 40 and unknown.op_breakdown == {
        "mm.default": profilers.OpTotal(40, unknown.kernel_time_ms)
    }


def test_backward_breakdown_round_trips_and_survives_a_top_ops_cut():
    x = torch.randn(16, 16, requires_grad=True)
    with profilers.profile() as prof:
        y = x.sin().cos().tanh().exp().log1p().sigmoid().sum()  # @chain
        y.backward()
    d = prof.report().to_dict()
    (chain,) = [s for s in d["sites"] if s["line"] == line_of("chain")]
    # sin, cos, tanh, exp, log1p, sigmoid, sum: 7 nodes; 14 ops in all (e.g. CosBackward0:
    # sin, neg, mul; TanhBackward0: detach, tanh_backward), more kinds than the top 8 shown.
    assert chain["backward"]["ops"] == 14 and len(chain["backward"]["top_ops"]) == 8
    back = profilers.Report.from_dict(d)
    line = line_at(back, line_of("chain"))
    assert line.backward_ops == chain["backward"]["ops"]
    # Reports keep the top 8 ops; the rest survive as one entry so the totals do not change.
    cut = line.to_dict(top_ops=2)["backward"]
    again = profilers.Line.from_dict({**line.to_dict(), "backward": cut})
    assert again.backward_ops == line.backward_ops
    assert again.backward_ms == pytest.approx(line.backward_ms)
    assert "(other ops)" in again.backward
    # The line's own ops too: read back from a top-2 cut, its ops and time still add up.
    own = profilers.Line.from_dict(line.to_dict(top_ops=2))
    assert sum(e.count for e in own.op_breakdown.values()) == line.ops
    assert sum(e.ms for e in own.op_breakdown.values()) == pytest.approx(line.kernel_time_ms)


class EveryOpOnGpu0(StubCuda):
    """Stand-in events for every op, host tensors included: each op takes TICK_MS."""

    def stream_for(self, args, kwargs):
        return self.make_stream((0, 0, 1)), 0


def test_gpu_times_of_backward_ops_land_in_both_lines_once_read_back():
    gpu = EveryOpOnGpu0()
    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(2, 4)
    with profilers.profile(cuda=gpu) as prof:
        y = (x @ w).relu()  # @timed_fwd
        y.sum().backward()  # @timed_bwd
        assert prof.snapshot()["totals"]["kernel_time_ms"] == 0  # nothing read back yet
    r = prof.report()
    fwd, bwd = line_at(r, line_of("timed_fwd")), line_at(r, line_of("timed_bwd"))
    # MmBackward0 (t, mm) and ReluBackward0 (detach, threshold_backward): 4 ops.
    assert fwd.backward_ops == 4 and fwd.backward_ms == 4 * TICK_MS
    # sum, ones_like, SumBackward0's expand, the 4 above, AccumulateGrad's detach: 8 ops,
    # each timed once: the forward line's share is part of them, not added to them.
    n = 8 + EXTRA_DETACHES
    assert bwd.ops == n and bwd.kernel_time_ms == n * TICK_MS
    assert r.totals.kernel_time_ms == (fwd.ops + n) * TICK_MS == r.totals.ops * TICK_MS


@pytest.mark.parametrize(
    ("node", "op", "made"),
    [
        ("AddmmBackward0", "addmm.default", True),
        ("NllLossBackward0", "nll_loss_forward.default", True),
        ("NativeLayerNormBackward0", "native_layer_norm.default", True),
        ("LogSoftmaxBackward0", "_log_softmax.default", True),
        ("MaxPool2DWithIndicesBackward0", "max_pool2d_with_indices.default", True),
        ("SumBackward1", "sum.dim_IntList", True),
        ("ReluBackward0", "mm.default", False),
        ("torch::autograd::CopySlices", "copy_.default", False),
    ],
)
def test_node_names_match_the_ops_that_make_them(node, op, made):
    assert _made_by(op, _node_stem(node)) is made


def test_forward_entries_are_trimmed_and_recent_graphs_still_resolve(monkeypatch):
    monkeypatch.setattr(_backward, "FORWARD_ENTRIES", 3)
    x = torch.randn(4, requires_grad=True)
    with profilers.profile() as prof:
        for _ in range(20):
            y = x.exp()  # @trim_exp
            z = y.sin()  # @trim_sin
        z.sum().backward()
        rec = prof._recorder
        assert rec is not None
        (st,) = rec.threads.all()
        assert len(st.fwd[0]) <= 2 * 3  # two line changes per round, 40 in all: trimmed
    r = prof.report()
    # The last round's graph is recent: still charged to its lines (SinBackward0: cos, mul).
    assert counts(line_at(r, line_of("trim_sin")).backward) == {"cos.default": 1, "mul.Tensor": 1}
    assert line_at(r, line_of("trim_exp")).backward["mul.Tensor"].count == 1
