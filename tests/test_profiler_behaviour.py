"""Attribution, threads, DataParallel's comm paths, hidden syncs, safety and the report object."""

from __future__ import annotations

import dataclasses
import json
import threading
import warnings

import pytest
import torch
import torch.cuda.comm
import torch.nn.parallel.comm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.cuda import _gpu_trace
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import profilers
from gpuwatch.analysis import analyze
from profilers import registry
from tests.profiler_helpers import copies, fake_mode, line_at, line_of, never_pinned

ORIGINALS = {
    "bootstrap": threading.Thread._bootstrap_inner,
    "backward": torch.Tensor.backward,
    "autograd.backward": torch.autograd.backward,
    "grad": torch.autograd.grad,
    "scatter": torch.nn.parallel.comm.scatter,
    "cuda.gather": torch.cuda.comm.gather,
    "synchronize": torch.cuda.synchronize,
    "stream.synchronize": torch.cuda.Stream.synchronize,
    "event.synchronize": torch.cuda.Event.synchronize,
    "tensor_str": torch._tensor_str._str,
}


@pytest.fixture(autouse=True)
def nothing_left_installed():
    yield
    assert registry.ACTIVE is None
    assert threading.Thread._bootstrap_inner is ORIGINALS["bootstrap"]
    assert torch.Tensor.backward is ORIGINALS["backward"]
    assert torch.autograd.backward is ORIGINALS["autograd.backward"]
    assert torch.autograd.grad is ORIGINALS["grad"]
    assert torch.nn.parallel.comm.scatter is ORIGINALS["scatter"]
    assert torch.cuda.comm.gather is ORIGINALS["cuda.gather"]
    assert torch.cuda.synchronize is ORIGINALS["synchronize"]
    assert torch.cuda.Stream.synchronize is ORIGINALS["stream.synchronize"]
    assert torch.cuda.Event.synchronize is ORIGINALS["event.synchronize"]
    assert torch._tensor_str._str is ORIGINALS["tensor_str"]
    assert _get_current_dispatch_mode_stack() == []


# -- attribution --------------------------------------------------------------------------------


def helper_that_copies(x):
    return x.to("cuda:0")  # @helper


def test_line_is_the_innermost_user_line_with_its_callers():
    with profilers.profile(is_pinned=never_pinned) as prof, fake_mode():
        x = torch.randn(8, 8)
        helper_that_copies(x)  # @caller
    line = line_at(prof.report(), line_of("helper"))
    assert line.function == "helper_that_copies" and line.h2d.count == 1
    assert (
        line.stack[0]
        == f"tests/test_profiler_behaviour.py:{line_of('caller')} test_line_is_the_innermost_user_line_with_its_callers"
    )


def test_library_frames_are_skipped():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(32, 16)
    with profilers.profile() as prof:
        model(x)  # @forward
    r = prof.report()
    line = line_at(r, line_of("forward"))
    assert line.ops == r.totals.ops  # every op inside nn.Module code is charged to this line
    assert {"addmm.default", "relu.default"} <= set(line.op_breakdown)


def _compiled_body(x, y):
    z = x @ y  # @mm
    return (z.relu() + 1).sum()  # @tail


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("own_stance", [False, True])
def test_compiled_code_runs_eagerly_and_dynamo_never_traces_the_profiler(backend, own_stance):
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(_compiled_body, backend=backend)
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    expected = _compiled_body(x, y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profilers.profile() as prof:
            if own_stance:  # the script's own: the profile's force_eager gives way to it
                torch.compiler.set_stance("default")
            for _ in range(2):
                assert torch.equal(compiled(x, y), expected)
    # With the script's own stance dynamo's frame callback is set while compiled code runs
    # (the profile's force_eager sets none): had it reached the profiler's frames it would try
    # to trace them and warn about the builtins they call.
    assert not [w for w in caught if "dynamo" in str(w.filename).lower()], [
        str(w.message)[:200] for w in caught
    ]
    r = prof.report()
    assert r.compiled is not None  # dynamo handed the frames (own stance), or no frame at all
    assert (r.compiled["eager_calls"], r.compiled["frames"] > 0) == (
        (0, True) if own_stance else (2, False)
    )
    mm = line_at(r, line_of("mm"))
    assert mm.ops == 2 and mm.op_breakdown["mm.default"].count == 2
    assert line_at(r, line_of("tail")).ops == 6  # relu, add, sum; twice


def test_backward_ops_are_charged_to_the_backward_line():
    model = torch.nn.Linear(32, 8)
    x = torch.randn(16, 32)
    with profilers.profile() as prof:
        loss = model(x).pow(2).mean()  # @loss
        loss.backward()  # @backward
    r = prof.report()
    bwd = line_at(r, line_of("backward"))
    assert bwd.ops > 0 and any(name.startswith("mm") for name in bwd.op_breakdown)
    assert line_at(r, line_of("loss")).ops >= 3


class _SpawnInBackward(torch.autograd.Function):
    """Its backward runs an op on a thread with no user frame, like autograd's device threads."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        out = []
        t = threading.Thread(target=lambda: out.append(None), daemon=True)
        t.start()
        t.join()
        worker = threading.Thread(target=torch.mul, args=(grad, 2))  # no Python frame of ours
        worker.start()
        worker.join()
        return grad * 2


def test_ops_with_no_user_frame_go_to_the_running_backward_call():
    x = torch.randn(4, requires_grad=True)
    with profilers.profile() as prof:
        y = _SpawnInBackward.apply(x).sum()
        y.backward()  # @bwd
    r = prof.report()
    line = line_at(r, line_of("bwd"))
    assert line.op_breakdown["mul.Tensor"].count >= 1
    assert not [s for s in r.lines if s.file == "<unknown>"]


def test_ops_with_no_user_frame_outside_backward_are_unknown():
    a = torch.randn(4)
    with profilers.profile() as prof:
        t = threading.Thread(target=torch.add, args=(a, a))
        t.start()
        t.join()
    (unknown,) = [s for s in prof.report().lines if s.file == "<unknown>"]
    assert unknown.ops == 1 and unknown.function == "<no user frame>"


def test_user_code_option_narrows_attribution(tmp_path):
    with profilers.profile(user_code=[str(tmp_path)]) as prof:
        torch.randn(4) + 1
    assert [s.file for s in prof.report().lines] == ["<unknown>"]


# -- threads ------------------------------------------------------------------------------------


def _worker(a, out):
    out.append(a @ a)  # @thread_op


def test_threads_started_while_profiling_are_seen():
    a = torch.randn(32, 32)
    out = []
    with profilers.profile() as prof:
        threads = [threading.Thread(target=_worker, args=(a, out)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    line = line_at(prof.report(), line_of("thread_op"))
    assert line.ops == 3 and line.function == "_worker"


def test_threads_can_be_left_out():
    a = torch.randn(8, 8)
    with profilers.profile(threads=False) as prof:
        t = threading.Thread(target=_worker, args=(a, []))
        t.start()
        t.join()
    assert prof.report().totals.ops == 0


# -- DataParallel's comm functions (stand-ins: the real ones need GPUs) ---------------------------


def _fake_scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
    chunks = tensor.chunk(len(devices), dim)
    return tuple(c.to(f"cuda:{d}") for c, d in zip(chunks, devices, strict=True))


def _fake_gather(tensors, dim=0, destination=None, *, out=None):
    return torch.cat([t.to(f"cuda:{destination}") for t in tensors], dim)


def _fake_broadcast_coalesced(tensors, devices, buffer_size=0):
    return [[t.to(f"cuda:{d}") for t in tensors] for d in devices]


def _fake_reduce_add_coalesced(inputs, destination=None, buffer_size=0):
    return [
        sum(group[i].to(f"cuda:{destination}") for group in inputs) for i in range(len(inputs[0]))
    ]


def test_dataparallel_comm_paths_are_counted(monkeypatch):
    comm = torch.nn.parallel.comm
    monkeypatch.setattr(comm, "scatter", _fake_scatter)
    monkeypatch.setattr(comm, "gather", _fake_gather)
    monkeypatch.setattr(comm, "broadcast_coalesced", _fake_broadcast_coalesced)
    monkeypatch.setattr(comm, "reduce_add_coalesced", _fake_reduce_add_coalesced)
    with profilers.profile(is_pinned=never_pinned) as prof, fake_mode():
        batch = torch.randn(64, 32)
        parts = comm.scatter(batch, [0, 1])  # @scatter
        params = [torch.randn(32, 32).to("cuda:0"), torch.randn(32).to("cuda:0")]  # @params
        replicas = comm.broadcast_coalesced(params, [0, 1])  # @broadcast
        comm.gather([p @ r[0] for p, r in zip(parts, replicas, strict=True)], 0, 0)  # @gather
        comm.reduce_add_coalesced(replicas, 0)  # @reduce
    r = prof.report()
    # scatter: 64x32 float32 batch split in two, each half 32*32*4 = 4096 bytes, host -> GPU
    assert line_at(r, line_of("scatter")).h2d.counts() == copies(
        count=2, bytes=8192, pageable=2, non_blocking=2
    )
    # broadcast: only cuda:1 needs a copy, one coalesced transfer of 32*32*4 + 32*4 = 4224 bytes
    assert line_at(r, line_of("broadcast")).p2p.counts() == copies(
        count=1, bytes=4224, non_blocking=1
    )
    # gather to cuda:0: the cuda:1 output (32x32 float32 = 4096 bytes) crosses
    assert line_at(r, line_of("gather")).p2p.counts() == copies(count=1, bytes=4096, non_blocking=1)
    # reduce_add to cuda:0: cuda:1's replica of both params, coalesced = 4224 bytes
    assert line_at(r, line_of("reduce")).p2p.counts() == copies(count=1, bytes=4224, non_blocking=1)
    # the copies the stand-ins dispatch inside are not counted again
    assert r.totals.h2d.count == 2 + 2 and r.totals.p2p.count == 3
    assert r.totals.syncs.by_cause == {"copy_to_device": 2}  # only the two blocking .to() of params


# -- syncs the dispatcher never sees ------------------------------------------------------------


def test_explicit_synchronize_calls_are_caught_through_gpu_trace_callbacks():
    with profilers.profile(trace_syncs=True) as prof:
        _gpu_trace.DeviceSynchronizationCallbacks.fire_callbacks()  # @device_sync
        _gpu_trace.EventSynchronizationCallbacks.fire_callbacks(1234)  # @event_sync
        _gpu_trace.StreamSynchronizationCallbacks.fire_callbacks(0)  # @stream_sync
    r = prof.report()
    for marker in ("device_sync", "event_sync", "stream_sync"):
        assert line_at(r, line_of(marker)).syncs.by_cause == {"synchronize": 1}
    assert r.totals.syncs.count == 3


PRINTING = compile(
    "def _str(fire):\n    fire()\n",
    torch._tensor_str.__file__,  # frames of this function look like torch's tensor printing
    "exec",
)


def test_printing_a_cuda_tensor_counts_as_a_copy_to_host_sync():
    ns: dict = {}
    exec(PRINTING, ns)
    with profilers.profile(trace_syncs=True) as prof:
        ns["_str"](lambda: _gpu_trace.StreamSynchronizationCallbacks.fire_callbacks(0))  # @print
    line = line_at(prof.report(), line_of("print"))
    assert line.syncs.by_cause == {"copy_to_host": 1}


@torch.library.custom_op("gpuwatch_test::waits", mutates_args=())
def _waits(x: torch.Tensor) -> torch.Tensor:
    _gpu_trace.StreamSynchronizationCallbacks.fire_callbacks(0)
    return x.clone()


def test_a_sync_inside_an_op_no_rule_explains_is_other_and_counted_once():
    x = torch.randn(3)
    with profilers.profile(trace_syncs=True) as prof:
        _waits(x)  # @other
    line = line_at(prof.report(), line_of("other"))
    assert line.syncs.to_dict() == {"count": 1, "by_cause": {"other": 1}}


def test_syncs_after_the_profile_are_not_counted():
    with profilers.profile(trace_syncs=True) as prof:
        pass
    _gpu_trace.DeviceSynchronizationCallbacks.fire_callbacks()
    assert prof.report().totals.syncs.count == 0


def test_without_gpu_trace_callbacks_are_ignored_and_nothing_is_counted_twice():
    with profilers.profile() as prof:  # the default: entry points, not the trace
        _gpu_trace.DeviceSynchronizationCallbacks.fire_callbacks()
        _waits(torch.randn(3))
    assert prof.report().totals.syncs.count == 0


class _StandIn:
    """Stands in for torch.cuda's sync entry points on a machine without CUDA."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args, **kwargs) -> None:
        self.calls += 1


def test_explicit_synchronize_calls_are_caught_where_python_makes_them(monkeypatch):
    device, stream, event = _StandIn(), _StandIn(), _StandIn()
    monkeypatch.setattr(torch.cuda, "synchronize", device)
    monkeypatch.setattr(torch.cuda.Stream, "synchronize", stream)
    monkeypatch.setattr(torch.cuda.Event, "synchronize", event)
    with profilers.profile() as prof:
        torch.cuda.synchronize()  # @sync
        torch.cuda.Stream.synchronize(object())  # @stream
        for _ in range(2):
            torch.cuda.Event.synchronize(object())  # @event
    r = prof.report()
    assert (device.calls, stream.calls, event.calls) == (1, 1, 2)  # the real call still happens
    assert line_at(r, line_of("sync")).syncs.by_cause == {"synchronize": 1}
    assert line_at(r, line_of("stream")).syncs.by_cause == {"synchronize": 1}
    assert line_at(r, line_of("event")).syncs.by_cause == {"synchronize": 2}


# -- safety -------------------------------------------------------------------------------------


def test_an_exception_restores_everything_and_keeps_the_counts():
    with pytest.raises(ValueError, match="boom"):
        with profilers.profile() as prof:
            torch.randn(4) * 2
            raise ValueError("boom")
    r = prof.report()
    assert r.totals.ops == 2 and not r.partial  # finished (by an exception) and restored


def test_profiles_cannot_be_nested_or_reused():
    with profilers.profile() as outer:
        with pytest.raises(RuntimeError, match="cannot be nested"):
            with profilers.profile():
                pass
        torch.ones(1) + 1
    assert outer.report().totals.ops == 2
    with pytest.raises(RuntimeError, match="already run"):
        with outer:
            pass


OPS = [
    lambda a, b: a + b,
    lambda a, b: a * b - b,
    lambda a, b: a @ b.T,
    lambda a, b: torch.relu(a) + torch.sigmoid(b),
    lambda a, b: torch.cat([a, b])[: a.shape[0]],
    lambda a, b: a.double().float() / (b.abs() + 1),
    lambda a, b: torch.softmax(a, dim=-1) + b.sum(),
    lambda a, b: a[b > 0].sum() + a,
    lambda a, b: torch.unique(a.round()).sum() + b,
    # Python numbers: torch makes them 0-dim "wrapped" tensors, which keep their own promotion
    # rules (an int tensor times 2.5 is float32, not float64); the fast path must keep them.
    lambda a, b: (a.long() * 2.5 + b) * (b > 0) - 1,
    lambda a, b: torch.where(a > 0, a, 0.5) + (a.int() + 3).float(),
    lambda a, b: a.clone().index_put_((b > 0,), torch.tensor(0.25)) + a.clone().fill_(2),
    lambda a, b: torch.tensor([1.5, 2.0]).repeat(18).reshape(6, 6) + a.masked_fill(b < 0, 7),
]


# NB: both_paths only swaps profilers.profile for the test: the same for every example.
@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**31 - 1),
    program=st.lists(st.integers(0, len(OPS) - 1), min_size=1, max_size=12),
)
def test_results_are_bit_for_bit_the_same_with_the_profiler(seed, program, both_paths):
    def run():
        g = torch.Generator().manual_seed(seed)
        a, b = torch.randn(6, 6, generator=g), torch.randn(6, 6, generator=g)
        for i in program:
            a, b = OPS[i](a, b), a
        return a, b

    plain = run()
    with profilers.profile() as prof:
        profiled = run()
    for p, q in zip(plain, profiled, strict=True):
        assert torch.equal(p, q) and p.dtype == q.dtype
    if both_paths == "every_op":
        assert prof.report().totals.ops >= len(program)


# -- the report ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_memory_stays_bounded_one_entry_per_line_and_a_capped_timeline():
    with profilers.profile(is_pinned=never_pinned, timeline_capacity=5) as prof, fake_mode():
        x = torch.randn(4)
        for _ in range(2000):
            x.to("cuda:0")  # @loop
    r = prof.report()
    assert len([s for s in r.lines if s.line == line_of("loop")]) == 1
    assert line_at(r, line_of("loop")).h2d.count == 2000
    assert r.timeline["capacity"] == 5 and len(r.timeline["events"]) == 5
    assert r.timeline["recorded"] == 2000 and r.timeline["dropped"] == 1995
    event = r.timeline["events"][-1]
    assert (
        event["direction"] == "h2d" and event["bytes"] == 16 and event["sync"] == "copy_to_device"
    )


def test_snapshot_while_running_does_not_stop_the_profile():
    with profilers.profile(is_pinned=never_pinned) as prof, fake_mode():
        x = torch.randn(4)
        x.to("cuda:0")
        snap = prof.snapshot()
        x.to("cuda:0")
    assert snap["partial"] is True and snap["totals"]["h2d"]["count"] == 1
    json.dumps(snap)  # plain data, ready for a pipe
    final = prof.report()
    assert final.totals.h2d.count == 2 and not final.partial


def test_report_round_trips_through_json():
    with profilers.profile(is_pinned=never_pinned) as prof, fake_mode():
        y = torch.randn(8, 8).to("cuda:0")
        y.sum().item()
    r = prof.report(command=["train.py", "--fast"], exit_code=3)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["schema"] == "gpuwatch.profile/1" and d["command"] == ["train.py", "--fast"]
    assert d["exit_code"] == 3
    back = profilers.Report.from_dict(d)
    assert back.to_dict() == r.to_dict()


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "not an object"),
        ({"schema": "other/1"}, "schema is 'other/1'"),
        ({"schema": "gpuwatch.profile/1", "totals": {"h2d": {}}}, "damaged"),
    ],
)
def test_foreign_or_damaged_reports_are_refused(doc, message):
    with pytest.raises(profilers.ReportFormatError, match=message):
        profilers.Report.from_dict(doc)


def test_live_snapshot_is_compact_and_counts_so_far():
    with profilers.profile(is_pinned=never_pinned) as prof, fake_mode():
        x = torch.randn(4)
        for _ in range(3):
            x.to("cuda:0")  # @live
        snap = prof.live_snapshot(top=1)
    assert snap["totals"]["h2d"]["count"] == 3 and snap["line_count"] == 2
    assert [s["line"] for s in snap["lines"]] == [line_of("live")]
    assert "timeline" not in snap and snap["elapsed_s"] >= 0
    json.dumps(snap)


def test_a_helper_called_from_two_lines_keeps_both_caller_chains():
    with profilers.profile(is_pinned=never_pinned) as prof, fake_mode():
        x = torch.randn(8, 8)
        for _ in range(3):
            helper_that_copies(x)  # @first_caller
            helper_that_copies(x)  # @second_caller
    line = line_at(prof.report(), line_of("helper"))
    me = "test_a_helper_called_from_two_lines_keeps_both_caller_chains"
    here = "tests/test_profiler_behaviour.py"
    assert line.h2d.count == 6
    assert [c[0] for c in line.stacks] == [
        f"{here}:{line_of('first_caller')} {me}",
        f"{here}:{line_of('second_caller')} {me}",
    ]
    assert line.stack == line.stacks[0]
    assert profilers.Line.from_dict(line.to_dict()).stacks == line.stacks


def test_optimizer_steps_and_manual_steps_are_counted():
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profilers.profile() as prof:
        for _ in range(5):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
    r = prof.report()
    assert r.steps == {"count": 5, "source": "optimizer"}
    assert profilers.Report.from_dict(r.to_dict()).steps == r.steps
    assert r.to_dict()["totals"]["steps"] == {"count": 5, "source": "optimizer"}
    opt.step()  # outside the profile: not counted, and the hook is gone
    with profilers.profile() as prof:
        for _ in range(3):
            torch.randn(2) + 1
            profilers.step()
    assert prof.report().steps == {"count": 3, "source": "manual"}
    profilers.step()  # outside a profile it does nothing


def test_the_summary_speaks_per_step():
    from gpuwatch.output.text import summary
    from tests.test_report_render import report, text

    r = dataclasses.replace(report(), steps={"count": 25, "source": "optimizer"})
    shown = text(summary(r, analyze(r)))
    assert "25 steps (optimizer): per step: 1 copy (4 B), 1 sync" in shown
    assert "lines that copy or sync every step: train.py:42" in shown
    assert "25 syncs (item 25); 1 sync and 1 copy per step" in shown
