"""Exact figures of ``gpuwatch report TRACE`` on small traces written by hand, each worked out
in its comments (times in microseconds, as Kineto writes them; figures in ms)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profilers.kineto.analyse import MAX_SLICES, analyse
from profilers.kineto.read import read_traces
from profilers.kineto.result import RankResult
from tests.kineto_helpers import TraceBuilder


def _one(tmp_path: Path, t: TraceBuilder, gz: bool = False) -> RankResult:
    path = t.write(tmp_path / ("t.json.gz" if gz else "t.json"), gz=gz)
    (rank,) = analyse(read_traces([str(path)])).ranks
    return rank


def _overlapping_streams() -> TraceBuilder:
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("aten::mm", 4, 10, 30, stream=7)  # launched at 5, runs [10, 40) on stream 7
    t.launch("aten::add", 19, 30, 30, stream=8)  # launched at 20, runs [30, 60) on stream 8
    t.loader(62, 6)  # the host fetches a batch over [62, 68)
    t.launch("aten::relu", 69, 80, 10, stream=7)  # launched at 70, runs [80, 90)
    return t


def test_busy_is_the_union_of_all_streams_and_idle_is_charged_by_cause(tmp_path):
    r = _one(tmp_path, _overlapping_streams())
    (d,) = r.run
    # busy: [10, 40) U [30, 60) U [80, 90) = 50 + 10 = 60 us of 100
    assert (d.wall_ms, d.busy_ms, d.idle_ms) == (0.1, 0.06, 0.04)
    assert d.compute_ms == 0.06 and d.comm_ms == 0 and d.copy_ms == 0
    # idle: [0, 10) launch (mm not queued until 5, started at 10); [60, 80): the host in the
    # loader [62, 68) is input (6), the rest launch (14); [90, 100) launch (nothing after)
    assert dict(d.idle_by_cause_ms) == {
        "input": 0.006,
        "sync": 0.0,
        "copy": 0.0,
        "comm": 0.0,
        "launch": 0.034,
        "dependency": 0.0,
        "warmup": 0.0,
    }
    assert d.verdict == "launch-bound"  # busy 60% < 80%; launch is the largest idle cause
    charged = {(c.cause, c.where.op): c.idle_ms for c in r.lines}
    # [0, 10) waits for mm; [60, 62) + [68, 80) wait for relu; [90, 100) for nothing
    assert charged == {
        ("launch", "aten::mm"): 0.01,
        ("launch", "aten::relu"): 0.014,
        ("launch", "(no later GPU work in the trace)"): 0.01,
        ("input", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"): 0.006,
    }


def test_hta_views_of_the_same_trace(tmp_path):
    r = _one(tmp_path, _overlapping_streams())
    (a,) = r.active
    # HTA's window: first activity 10 to last 90; busy 60 of 80 (75%), idle 20
    assert a.to_dict() | {} == {
        "device": 0,
        "start_ms": 0.01,
        "end_ms": 0.09,
        "busy_ms": 0.06,
        "idle_ms": 0.02,
        "compute_ms": 0.06,
        "non_compute_ms": 0.0,
        "busy_pct": 75.0,
        "idle_pct": 25.0,
        "compute_pct": 75.0,
    }
    # stream 7: mm ends at 40, relu launched at 70 (after 40) -> host_wait 40; stream 8 alone
    assert [s.to_dict() for s in r.streams] == [
        {"device": 0, "stream": 7, "host_wait_ms": 0.04, "kernel_wait_ms": 0.0, "other_ms": 0.0},
        {"device": 0, "stream": 8, "host_wait_ms": 0.0, "kernel_wait_ms": 0.0, "other_ms": 0.0},
    ]


def _sync_step() -> TraceBuilder:
    t = TraceBuilder()
    t.step(1, 0, 180)
    t.python("train.py(12): <module>", 0, 180)
    t.python("train.py(7): log", 15, 103)  # [15, 118): the line that reads the loss
    t.launch("aten::mm", 4, 10, 100)  # runs [10, 110)
    t.op("aten::item", 20, 96)
    ext = t.op("aten::_local_scalar_dense", 20, 95)
    corr = t.runtime("cudaMemcpyAsync", 21, 2, ext)
    t.memcpy("DtoH (Device -> Pageable)", 110, 2, corr, 4)  # [110, 112)
    t.runtime("cudaStreamSynchronize", 23, 90, ext)  # the host waits over [23, 113]
    t.launch("aten::add", 149, 155, 20)  # launched at 150, runs [155, 175)
    return t


def test_a_step_with_a_sync(tmp_path):
    r = _one(tmp_path, _sync_step())
    (d,) = r.run
    # busy: [10, 112) (mm, then the copy) + [155, 175) = 122 of 180
    assert (d.busy_ms, d.copy_ms) == (0.122, 0.002)
    # idle: [0, 10) launch; [112, 150): in the sync to 113, then the host runs on from the
    # wait the GPU ran dry in: sync 38; [150, 155) add queued: launch 5; [175, 180) launch 5
    assert dict(d.idle_by_cause_ms) == {
        "input": 0.0,
        "sync": 0.038,
        "copy": 0.0,
        "comm": 0.0,
        "launch": 0.02,
        "dependency": 0.0,
        "warmup": 0.0,
    }
    assert d.verdict == "sync-bound"  # busy 67.8% < 80%; sync 38 > launch 20
    sync = [c for c in r.lines if c.cause == "sync"]
    assert [(c.where.op, c.where.file, c.where.line, c.where.function) for c in sync] == [
        ("aten::_local_scalar_dense", "train.py", 7, "log")
    ]
    assert r.has_stacks


def test_python_long_after_a_short_sync_is_launch_past_the_work_the_sync_waited_for(tmp_path):
    # As _sync_step, but the host reaches the sync late: it waits [100, 113] for the last 12
    # of the GPU's work, then runs its own Python to 150. Had it not waited, 12 of that Python
    # would have run beside the GPU: the sync's; the other 25 leave the GPU idle whatever.
    t = TraceBuilder()
    t.step(1, 0, 180)
    t.python("train.py(12): <module>", 0, 180)
    t.python("train.py(7): log", 15, 103)
    t.launch("aten::mm", 4, 10, 100)  # runs [10, 110)
    t.op("aten::item", 98, 18)
    ext = t.op("aten::_local_scalar_dense", 98, 17)
    corr = t.runtime("cudaMemcpyAsync", 99, 1, ext)
    t.memcpy("DtoH (Device -> Pageable)", 110, 2, corr, 4)  # [110, 112)
    t.runtime("cudaStreamSynchronize", 100, 13, ext)  # the host waits over [100, 113]
    t.launch("aten::add", 149, 155, 20)  # launched at 150, runs [155, 175)
    (d,) = _one(tmp_path, t).run
    assert dict(d.idle_by_cause_ms) == {
        "input": 0.0,
        "sync": 0.013,
        "copy": 0.0,
        "comm": 0.0,
        "launch": 0.045,
        "dependency": 0.0,
        "warmup": 0.0,
    }
    assert d.verdict == "launch-bound"


def test_a_step_waiting_for_the_dataloader_is_input_bound(tmp_path):
    t = TraceBuilder()
    t.step(3, 0, 100)
    t.loader(0, 60)
    t.launch("aten::conv2d", 61, 65, 30)  # launched at 62, runs [65, 95)
    (s,) = _one(tmp_path, t).steps
    (d,) = s.devices
    # idle [0, 65): input [0, 60), launch [60, 65); [95, 100) launch
    assert dict(d.idle_by_cause_ms) == {
        "input": 0.06,
        "sync": 0.0,
        "copy": 0.0,
        "comm": 0.0,
        "launch": 0.01,
        "dependency": 0.0,
        "warmup": 0.0,
    }
    assert (s.name, s.number, s.input_ms, s.to_dict()["input_pct"]) == (
        "ProfilerStep#3",
        3,
        0.06,
        60.0,
    )
    assert d.verdict == "input-bound"


def test_launch_bound_and_gpu_bound_steps(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    for i in range(10):  # ten 2 us kernels, each queued 8 us after the last: the host is slow
        t.launch("aten::add", 10 * i, 10 * i + 4, 2)
    t.step(2, 100, 100)
    t.launch("aten::mm", 100, 105, 90)  # [105, 195): busy 90%
    r = _one(tmp_path, t)
    first, second = (s.devices[0] for s in r.steps)
    assert (first.busy_ms, first.idle_by_cause_ms["launch"], first.verdict) == (
        0.02,
        0.08,
        "launch-bound",
    )
    assert (second.busy_ms, second.idle_by_cause_ms["launch"], second.verdict) == (
        0.09,
        0.01,
        "GPU-bound",
    )
    (run,) = r.run  # the run: 110 busy of 200 (55%) -> launch-bound
    assert (run.wall_ms, run.busy_ms, run.verdict) == (0.2, 0.11, "launch-bound")


def test_a_blocking_pageable_copy_is_copy_time(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.python("train.py(20): <module>", 0, 100)
    ext = t.op("aten::copy_", 9, 42)
    corr = t.runtime("cudaMemcpyAsync", 10, 40, ext)  # the host stages it over [10, 50]
    t.memcpy("HtoD (Pageable -> Device)", 45, 5, corr, 1 << 20)  # [45, 50)
    t.launch("aten::mm", 54, 58, 40)  # launched at 55, runs [58, 98)
    (d,) = _one(tmp_path, t).run
    # busy 5 + 40; idle [0, 10) launch (copy_ not yet called); [10, 45) the host in the copy;
    # [50, 55) the tail of the copy the GPU ran dry in; [55, 58) mm queued; [98, 100) launch
    assert (d.busy_ms, d.idle_by_cause_ms["copy"], d.idle_by_cause_ms["launch"]) == (
        0.045,
        0.04,
        0.015,
    )
    assert d.verdict == "copy-bound"


def test_copies_have_direction_bytes_and_memory(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    for i, kind in enumerate(
        ["HtoD (Pageable -> Device)", "HtoD (Pinned -> Device)", "HtoD (Pinned -> Device)"]
    ):
        ext = t.op("aten::copy_", 10 * i, 5)
        t.memcpy(
            kind, 10 * i + 3, 2, t.runtime("cudaMemcpyAsync", 10 * i + 1, 1, ext), 1000 * (i + 1)
        )
    ext = t.op("aten::copy_", 50, 5)
    t.memcpy("DtoD (Device -> Device)", 53, 1, t.runtime("cudaMemcpyAsync", 51, 1, ext), 64)
    r = _one(tmp_path, t)
    assert [c.to_dict() for c in r.copies] == [
        {"direction": "d2d", "memory": None, "count": 1, "bytes": 64, "gpu_ms": 0.001},
        {"direction": "h2d", "memory": "pageable", "count": 1, "bytes": 1000, "gpu_ms": 0.002},
        {"direction": "h2d", "memory": "pinned", "count": 2, "bytes": 5000, "gpu_ms": 0.004},
    ]


def test_a_queued_nccl_kernel_waits_on_comm(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("nccl:all_reduce", 9, 40, 50, stream=20, name="ncclKernel_AllReduce_RING_LL_Sum_float")
    (d,) = _one(tmp_path, t).run
    # busy [40, 90) NCCL only; idle [0, 10) launch, [10, 40) queued behind other ranks: comm;
    # [90, 100) launch. (The host's own nccl:all_reduce op [9, 13) is comm too: [9, 10).)
    assert (d.busy_ms, d.comm_ms, d.compute_ms) == (0.05, 0.05, 0.0)
    assert dict(d.idle_by_cause_ms) == {
        "input": 0.0,
        "sync": 0.0,
        "copy": 0.0,
        "comm": 0.031,
        "launch": 0.019,
        "dependency": 0.0,
        "warmup": 0.0,
    }
    assert d.verdict == "comm-bound"


def test_a_step_busy_with_exposed_nccl_only_is_comm_bound(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("aten::mm", 0, 5, 85)  # compute [5, 90): 85%
    t.step(2, 100, 100)
    t.launch("nccl:all_reduce", 100, 105, 90, stream=20, name="ncclKernel_AllReduce")
    first, second = (s.devices[0] for s in _one(tmp_path, t).steps)
    assert (first.busy_ms, first.verdict) == (0.085, "GPU-bound")
    # busy 90% but all of it NCCL alone (waiting for the other ranks): comm 90 + 0 idle
    assert (second.busy_ms, second.comm_ms, second.verdict) == (0.09, 0.09, "comm-bound")


def test_gzip_reads_as_the_json_does(tmp_path):
    plain = _one(tmp_path, _overlapping_streams())
    packed = _one(tmp_path, _overlapping_streams(), gz=True)
    assert packed.to_dict() | {"path": ""} == plain.to_dict() | {"path": ""}


def test_a_folder_of_two_ranks_is_read_in_rank_order(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for rank, name in ((1, "a_first_by_name.json"), (0, "b_second.json.gz")):
        t = TraceBuilder(rank=rank)
        t.step(1, 0, 100)
        t.launch("aten::mm", 0, 10, 40 + 20 * rank)  # rank 0 busy 40, rank 1 busy 60
        t.write(folder / name, gz=name.endswith(".gz"))
    analysis = analyse(read_traces([str(folder)]), [str(folder)])
    assert [(r.rank, Path(r.path).name, r.run[0].busy_ms) for r in analysis.ranks] == [
        (0, "b_second.json.gz", 0.04),
        (1, "a_first_by_name.json", 0.06),
    ]


def test_no_profiler_step_makes_the_whole_trace_one_window(tmp_path):
    t = TraceBuilder()
    t.launch("aten::mm", 0, 10, 40)  # the op starts at 0; the kernel ends at 50
    r = _one(tmp_path, t)
    (s,) = r.steps
    assert (s.name, s.number, s.wall_ms, s.devices[0].busy_ms) == ("whole trace", None, 0.05, 0.04)
    assert not r.has_steps and any("no ProfilerStep" in n for n in r.notes)


@pytest.mark.parametrize(
    "frame",
    [
        "/usr/lib/python3.11/threading.py(1002): run",
        "torch/nn/modules/module.py(1501): _call_impl",
        "/x/site-packages/foo.py(3): f",
        "<built-in method mm>",
        "nn.Module: Linear_0",
        "threading.py(1016): _bootstrap_inner",
        "vllm/model_executor/models/llama.py(245): forward",
        "contextlib.py(81): inner",
        "torch\\nn\\modules\\module.py(1501): _call_impl",  # recorded on Windows
        "C:\\Python311\\Lib\\site-packages\\foo.py(3): f",
        "C:\\Python311\\Lib\\threading.py(1016): _bootstrap_inner",
    ],
)
def test_library_frames_are_not_the_users_line(frame):
    from profilers.kineto.events import user_frame

    assert user_frame(frame) is None
    assert user_frame("/home/me/train.py(42): main") == ("/home/me/train.py", 42, "main")
    assert user_frame("trace.py(7): step") == ("trace.py", 7, "step")  # a script, not stdlib's
    assert user_frame("mypkg/model.py(3): forward") == ("mypkg/model.py", 3, "forward")
    assert user_frame("C:\\Users\\me\\train.py(42): main") == ("C:/Users/me/train.py", 42, "main")


def _values() -> object:
    from hypothesis import strategies as st

    awkward = st.sampled_from(
        [float("inf"), -float("inf"), 1e300, -1, 0, 2**64, True, None, "", "stream 7", [], {}]
    )
    scalars = st.one_of(
        awkward,
        st.none(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False),
        st.text(max_size=12),
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=6,
    )


@pytest.mark.slow
def test_any_damage_to_a_trace_is_analysed_or_one_trace_error(tmp_path):
    """Each field of each event (and of its args) replaced by any JSON value: an analysis or a
    TraceError, never another exception (the CLI turns a TraceError into one line)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from profilers.kineto.read import TraceError, trace_from_doc

    base = _sync_step().doc()
    fields = [(i, k, None) for i, e in enumerate(base["traceEvents"]) for k in e]
    fields += [(i, "args", k) for i, e in enumerate(base["traceEvents"]) for k in e.get("args", {})]

    @settings(
        max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(st.lists(st.tuples(st.sampled_from(fields), _values()), min_size=1, max_size=6))
    def check(damage: list[tuple[tuple[int, str, str | None], object]]) -> None:
        doc = {
            **base,
            "traceEvents": [dict(e, args=dict(e.get("args", {}))) for e in base["traceEvents"]],
        }
        for (i, key, sub), value in damage:
            event = doc["traceEvents"][i]
            if sub is None:
                event[key] = value
            elif isinstance(event.get(key), dict):
                event[key][sub] = value
        try:
            result = analyse([trace_from_doc(doc, "t.json", 0)])
        except TraceError:
            return
        result.to_json()

    check()


@pytest.mark.parametrize("key", ["External id", "correlation", "ts", "dur"])
def test_an_id_or_time_past_int64_is_damage_not_a_crash(key):
    # host calls and times are kept in int64 columns: a value past them is read as none
    from profilers.kineto.read import trace_from_doc

    doc = _sync_step().doc()
    for event in doc["traceEvents"]:
        if key in event.get("args", {}):
            event["args"][key] = 2**70
        elif key in event and event.get("cat") != "kernel":
            event[key] = 1e16  # its nanoseconds from the first event are past int64
    result = analyse([trace_from_doc(doc, "t.json", 0)])
    assert result.to_json()


def test_each_device_has_its_own_busy_and_idle(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("aten::mm", 0, 10, 80)  # GPU 0: [10, 90)
    ext = t.op("aten::add", 20, 4)
    corr = t.runtime("cudaLaunchKernel", 21, 2, ext)
    t._gpu("kernel", "add_kernel", 30, 20, corr, 7)
    t.events[-1]["args"]["device"] = 1  # GPU 1: [30, 50)
    r = _one(tmp_path, t)
    assert [(d.device, d.busy_ms, d.idle_ms, d.verdict) for d in r.run] == [
        (0, 0.08, 0.02, "GPU-bound"),
        (1, 0.02, 0.08, "launch-bound"),
    ]
    # GPU 1 waited [0, 30) for aten::add (launched at 21) and [50, 100) for nothing after it
    assert {c.where.op: c.idle_ms for c in r.lines if c.cause == "launch"} == {
        "aten::mm": 0.01,  # GPU 0 [0, 10)
        "(no later GPU work in the trace)": 0.06,  # GPU 0 [90, 100), GPU 1 [50, 100)
        "aten::add": 0.03,  # GPU 1 [0, 30)
    }


def _queued_before_the_trace() -> TraceBuilder:
    """Two steps whose GPU lags its host: the first 20 us of step 1 run a kernel queued before
    the trace began (its launch call is not in the trace)."""
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.step(2, 100, 100)
    t.kernel("queued_earlier", 0, 20, corr=999)  # [0, 20): no cudaLaunchKernel 999 in the trace
    t.launch("aten::mm", 4, 30, 40)  # [30, 70)
    t.launch("aten::add", 104, 120, 60)  # [120, 180)
    return t


def test_work_queued_before_the_trace_is_busy_but_out_of_htas_view(tmp_path):
    r = _one(tmp_path, _queued_before_the_trace())
    step1, step2 = (s.devices[0] for s in r.steps)
    # the GPU ran [0, 20) and [30, 70) in step 1: 60 us busy, whoever queued the work
    assert (step1.busy_ms, step2.busy_ms) == (0.06, 0.06)  # add [120, 180) in step 2
    # HTA keeps only activities launched in the traced steps: mm [30, 70) and add [120, 180),
    # a window of 150 us with 100 busy
    (a,) = r.active
    assert (a.start_ms, a.end_ms, a.busy_ms, a.idle_ms) == (0.03, 0.18, 0.1, 0.05)
    (stream,) = r.streams
    assert stream.host_wait_ms == 0.05  # add launched at 105, after mm ended at 70
    assert any("1 GPU activities (20 us of GPU time) have no launch call" in n for n in r.notes)


def test_with_one_step_hta_keeps_every_activity(tmp_path):
    t = _queued_before_the_trace()
    t.events = [e for e in t.events if e["name"] != "ProfilerStep#2"]
    r = _one(tmp_path, t)
    (a,) = r.active
    assert (a.start_ms, a.busy_ms) == (0.0, 0.12)  # one step: HTA filters nothing
    assert not any("no launch call" in n for n in r.notes)


def test_the_summary_shows_the_nccl_time_a_comm_bound_verdict_counts(tmp_path):
    from gpuwatch.output.kineto_html import render_html
    from gpuwatch.output.kineto_text import summary_lines

    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("aten::mm", 0, 5, 85)  # compute [5, 90): 85%
    t.step(2, 100, 100)
    t.launch("nccl:all_reduce", 100, 105, 90, stream=20, name="ncclKernel_AllReduce")
    path = t.write(tmp_path / "t.json")
    analysis = analyse(read_traces([str(path)]))
    text = "\n".join(summary_lines(analysis))
    # busy 175 of 200 (87.5%) reads GPU-bound unless the 90 us of NCCL alone (45%) is shown
    assert "comm-bound. busy 87.5% (175 µs of 200 µs; NCCL kernels alone 45.0%)" in text
    header, first, second = (ln.split() for ln in text.splitlines()[6:9])
    assert header[:4] == ["step", "wall", "busy", "nccl"]
    assert (first[3], first[4], second[3], second[4]) == ("85.0%", "0.0%", "90.0%", "90.0%")
    assert '<th class="">NCCL alone</th>' in render_html(analysis)


@pytest.mark.parametrize("event", [0, 4])
def test_a_time_past_any_clock_is_skipped_as_damage(tmp_path, event):
    # found by the fuzz test: a finite ts of 1.8e305 us overflowed on the way to ns (a kernel's)
    # or made every other time overflow (the first event's, which the times count from)
    doc = _sync_step().doc()
    doc["traceEvents"][event]["ts"] = 1.797693134862316e305
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    (r,) = analyse(read_traces([str(path)])).ranks
    assert r.steps and r.run[0].wall_ms <= 0.18


def test_a_kernel_without_correlation_is_not_charged_to_an_uncorrelated_runtime_call(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("lonely", 40, 10, corr=-1)  # no correlation: its launch is unknown
    ext = t.op("aten::item", 60, 30)
    t.events.append(  # a sync with no correlation id either: it still blocks the host
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 4242,
         "tid": 4242, "ts": 61, "dur": 28, "args": {"External id": ext}}
    )  # fmt: skip
    r = _one(tmp_path, t)
    charged = {(c.cause, c.where.op): c.idle_ms for c in r.lines}
    # [0, 40) waits for a kernel whose launch is not in the trace (queued before it began: not
    # the host's); [61, 89) the host blocked in the sync (charged to its op); [50, 61) and
    # [89, 100) wait for no later GPU work
    assert charged == {
        ("dependency", "(launch not in trace: lonely)"): 0.04,
        ("sync", "aten::item"): 0.028,
        ("launch", "(no later GPU work in the trace)"): 0.022,
    }


def test_a_gap_is_the_hosts_only_when_the_work_that_ends_it_was_queued_after_it_began(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 200)
    t.launch("aten::mm", 0, 10, 40)  # launched at 1, runs [10, 50)
    t.launch("aten::add", 5, 80, 20)  # launched at 6, before the gap [50, 80): runs [80, 100)
    t.python("train.py(20): step", 110, 40)  # the host runs line 20 over [110, 150)
    t.launch("aten::relu", 140, 150, 10)  # launched at 141, after the gap [100, 150) began
    r = _one(tmp_path, t)
    (d,) = r.run
    # busy 40 + 20 + 10 = 70 of 200; [50, 80): add was queued, the GPU waited on something
    # else: dependency 30; [0, 10) mm and [100, 150) relu were late: launch 10 + 50, and
    # [160, 200) waits for no later GPU work: launch 40
    assert dict(d.idle_by_cause_ms) == {
        "input": 0.0,
        "sync": 0.0,
        "copy": 0.0,
        "comm": 0.0,
        "launch": 0.1,
        "dependency": 0.03,
        "warmup": 0.0,
    }
    charged = {(c.cause, c.where.label()): c.idle_ms for c in r.lines}
    assert charged[("dependency", "aten::add")] == 0.03
    assert charged[("launch", "train.py:20 (step)")] == 0.05  # relu's line


def test_a_trace_that_begins_with_the_run_starts_with_warm_up_not_launch(tmp_path):
    t = TraceBuilder()  # no ProfilerStep: the whole trace, [0, 480), is the window
    t.python("train.py(3): <module>", 0, 480)
    t.op("aten::empty", 0, 300)  # the host builds the model: no GPU work until 310
    t.launch("aten::mm", 300, 310, 80)  # launched at 301, runs [310, 390)
    t.launch("aten::mm", 390, 400, 80)  # launched at 391, after the GPU ran dry: [400, 480)
    r = _one(tmp_path, t)
    (d,) = r.run
    # warm-up [0, 310) at the line that queued the first work; launch [390, 400)
    assert (d.idle_by_cause_ms["warmup"], d.idle_by_cause_ms["launch"]) == (0.31, 0.01)
    assert {(c.cause, c.where.label()) for c in r.lines} == {
        ("warmup", "train.py:3 (<module>)"),
        ("launch", "train.py:3 (<module>)"),
    }
    # busy 160 of the 170 us after warm-up (94%): GPU-bound, where 160 of 480 read launch-bound
    assert d.verdict == "GPU-bound"


def test_a_step_with_no_gpu_work_gets_no_launch_verdict(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("aten::mm", 0, 10, 80)
    t.step(2, 100, 100)
    t.op("aten::add", 110, 50)  # a CPU tensor's op: nothing reaches the GPU
    first, second = (s.devices[0] for s in _one(tmp_path, t).steps)
    assert first.verdict == "GPU-bound"
    assert (second.busy_ms, second.verdict) == (0.0, "no GPU work")


@pytest.mark.slow
def test_the_html_and_perfetto_outputs_of_a_huge_trace_stay_bounded(tmp_path):
    from gpuwatch.output import kineto_html, kineto_trace

    t = TraceBuilder()
    for step in range(400):  # 400 steps of 30 kernels, each after a 2 us gap: 24,000 slices
        t0 = step * 100
        t.step(step + 1, t0, 100)
        for k in range(30):
            t.launch(f"aten::op{k}", t0 + 3 * k, t0 + 3 * k + 2, 1)
    analysis = analyse(read_traces([str(t.write(tmp_path / "big.json"))]))
    (r,) = analysis.ranks
    # the analysis itself keeps only the longest slices: its memory is bounded too
    assert len(r.timeline) == MAX_SLICES and r.timeline_left[0] > 0
    assert len(r.steps) > kineto_html.MAX_STEPS
    trace = json.loads(kineto_trace.render_trace(analysis))["traceEvents"]
    slices = [e for e in trace if e["ph"] == "X" and e["tid"] != kineto_trace.STEP_TID]
    assert len(slices) == MAX_SLICES
    (note,) = [e for e in trace if e["ph"] == "i"]
    assert note["name"].startswith(f"gpuwatch: {r.timeline_left[0]:,} shorter slices")
    assert len(json.dumps(trace)) < 10e6  # docs/trace.md: under 10 MB per rank
    html = kineto_html.render_html(analysis)
    assert html.count("<tr>") < kineto_html.MAX_STEPS + 100 and len(html) < 1e6
    assert "... 300 more steps" in html


def test_a_step_of_no_length_is_analysed_as_one_with_no_gpu_work():
    # a damaged step (dur -1, read as an empty window: hypothesis found it) has no idle piece
    from profilers.kineto.read import trace_from_doc

    doc = _sync_step().doc()
    doc["traceEvents"][0]["dur"] = -1
    (step,) = analyse([trace_from_doc(doc, "t.json", 0)]).ranks[0].steps
    assert step.wall_ms == 0.0 and step.devices[0].verdict == "no GPU work"
