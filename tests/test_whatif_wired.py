"""The what-if wired into runs: the step replay's records taken from the hot path
(CUDA-event times on a GPU, stand-in events here; the model's under ``--fake-cuda --gpu``),
``report.what_if`` and ``report.predicted``, ``--gpu`` and ``report --what-if`` on the command
line, the time view's GPU half PREDICTED under the fake GPU."""

from __future__ import annotations

import json

import pytest
import torch

import profilers
from gpuwatch.analysis import analyze
from gpuwatch.analysis.hints import hints
from gpuwatch.cli.main import main
from gpuwatch.output.html import render_html
from gpuwatch.output.load import problem
from gpuwatch.output.timeview import time_lines
from gpuwatch.output.whatif import what_if_lines
from profilers.timing.gpu_model.rates import HOST_LAUNCH_NS, copy_ns
from profilers.timing.gpu_model.roofline import predict_op_ns
from profilers.timing.gpu_model.specs import GIB, gpu_spec
from profilers.timing.oplog import OpLog
from tests import conftest
from tests.profiler_helpers import fake_mode, line_of, never_pinned
from tests.test_cuda_timing import TICK_MS, StubCuda

needs_fake_cuda = pytest.mark.skipif(
    conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
)


def _line(line: int) -> str:
    return f"tests/test_whatif_wired.py:{line}"


def test_on_a_gpu_each_op_gets_its_event_time_and_the_what_ifs_are_replayed():
    gpu = StubCuda()
    with profilers.profile(cuda=gpu, is_pinned=never_pinned, what_if=True) as prof, fake_mode():
        host = torch.randn(64, 64)
        for _ in range(4):
            x = host.to("cuda:0")  # @h2d
            y = x * 2  # @mul
            y.cpu()  # @d2h
            profilers.step()
    r = prof.report()
    step = list(prof._log.steps)[-1]
    *ops, end = step.ops()
    assert (end.kind, end.line, end.gpu_ns) == ("host", "(end of step)", 0)  # after the d2h
    # per step: the copy in (blocking, pageable), the multiply, the copy out (a sync)
    assert [(o.kind, o.line, o.sync) for o in ops] == [
        ("h2d", _line(line_of("h2d")), "copy_to_device"),
        ("kernel", _line(line_of("mul")), None),
        ("d2h", _line(line_of("d2h")), "copy_to_host"),
    ]
    tick_ns = round(TICK_MS * 1e6)  # the stand-in GPU's clock moves a tick per event record
    assert [o.gpu_ns for o in ops] == [tick_ns] * 3
    assert [(o.nbytes, o.pinned, o.non_blocking) for o in ops] == [
        (64 * 64 * 4, False, False),
        (0, False, False),
        (64 * 64 * 4, False, False),
    ]
    assert all(0 <= o.overhead_ns <= o.host_ns for o in ops)
    w = r.what_if
    assert w is not None and w["measured"] == "replayed" and w["gpu"] is None
    assert w["ops"] == 3 and w["ops_dropped"] == 0 and w["steps_median"] == 3  # steps 1, 2, 3
    found = {(s["kind"], s["site"]) for s in w["savings"]}
    assert ("pinned_non_blocking", _line(line_of("h2d"))) in found
    assert ("defer_sync", _line(line_of("d2h"))) in found
    assert all(s["saving_ms"] >= 0 for s in w["savings"])
    together = [s for s in w["savings"] if s["together"]]
    assert w["sum_ms"] == pytest.approx(sum(s["saving_ms"] for s in together), abs=1e-5)
    assert w["interaction_ms"] == pytest.approx(w["sum_ms"] - w["combined_ms"], abs=1e-5)
    # the real GPU's time view is measured (CUDA events placed on the host's clock,
    # profilers/timing/gpu_time.py): replayed figures go to what_if only
    assert r.time is not None and r.time["run"]["gpu"]["measured"] == "measured"
    assert r.predicted is None
    assert profilers.Report.from_dict(json.loads(r.to_json())).what_if == w


def _gpu_steps(**asked: object) -> profilers.Profile:
    """Four steps of a copy in, a multiply and a copy out on the stand-in GPU."""
    with profilers.profile(cuda=StubCuda(), is_pinned=never_pinned, **asked) as prof, fake_mode():
        host = torch.randn(64, 64)
        for _ in range(4):
            x = host.to("cuda:0")  # @h2d_steps
            y = x * 2  # @mul_steps
            y.cpu()  # @d2h_steps
            profilers.step()
    return prof


def test_a_gpu_run_that_asks_for_no_what_if_keeps_no_replay_and_says_how_to_get_one(
    monkeypatch, tmp_path, capsys
):
    made = []
    real_init = OpLog.__init__

    def counted(self, *args, **kwargs):
        made.append(args)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(OpLog, "__init__", counted)
    prof = _gpu_steps()
    r = prof.report()
    # the hot path made no record: no log was made for it to fill, nothing to replay
    assert made == [] and prof._log is None and prof._recorder.replay is None
    assert r.what_if is None and r.options.profile is not None and not r.options.profile.what_if
    doc = json.loads(r.to_json())
    assert "what_if" not in doc and "what_if" not in doc["options"]  # the JSON as before
    # the time view's GPU half is measured without it: each timed op placed at its own line
    # (the hot path hands the GPU timeline its line and copy; how a blocking copy is charged:
    # tests/test_time_gpu.py)
    assert r.time is not None and r.time["run"]["gpu"]["measured"] == "measured"
    timeline = prof._recorder.timer.timeline
    assert (timeline.placed, timeline.unplaced) == (4 * 3, 0)
    steps = {_line(line_of(n)) for n in ("h2d_steps", "mul_steps", "d2h_steps")}
    assert set(timeline._keys.values()) == steps
    idle_lines = {d["site"] for d in r.time["run"]["gpu"]["idle_lines"]}
    assert idle_lines <= steps | {"(end of step)"}
    # no empty table anywhere: the summary's line and the HTML section are absent, the hints
    # carry no saving, and report --what-if says how to get one
    assert not any("unprofiled step" in line for line in time_lines(r, analyze(r)))
    assert "<h2>What if</h2>" not in render_html(r, analyze(r))
    assert all(h.saving_ms == 0 and "the fix saves" not in h.evidence for h in hints(r))
    path = tmp_path / "run.json"
    r.save(path)
    assert main(["report", str(path), "--what-if"]) == 0
    assert capsys.readouterr().out == (
        "What if: not available (the run did not record its steps for a replay: profile it "
        "with --what-if).\n"
    )


def test_what_if_true_keeps_the_replay_and_its_option_goes_to_the_json(monkeypatch):
    prof = _gpu_steps(what_if=True)
    r = prof.report()
    assert prof._log is not None and prof._recorder.replay is prof._log
    assert [s.step for s in prof._log.steps] == [0, 1, 2, 3]
    assert r.what_if is not None and r.what_if["ops"] == 3
    doc = json.loads(r.to_json())
    assert doc["options"]["what_if"] is True
    assert problem(doc, "gpuwatch.profile/1") is None  # the published schema holds it
    doc["options"]["what_if"] = "yes"
    assert "what_if" in str(problem(doc, "gpuwatch.profile/1"))
    doc["options"]["what_if"] = True
    back = profilers.Report.from_dict(doc)
    assert back.options.profile is not None and back.options.profile.what_if is True
    assert back.what_if == r.what_if


@pytest.mark.fake_cuda
def test_without_a_closed_step_or_gpu_times_there_is_no_what_if():
    gpu = StubCuda()
    with profilers.profile(cuda=gpu, is_pinned=never_pinned, what_if=True) as prof, fake_mode():
        x = torch.ones(8, device="cuda:0")
        x + 1
    r = prof.report()
    assert r.what_if is None
    assert what_if_lines(r) == [
        "What if: not available (no whole step was recorded to replay: the replay needs the "
        "run's steps timed (no --steps window), each ended by optimizer.step() or "
        "profilers.step())."
    ]
    with profilers.profile(is_pinned=never_pinned) as cpu_only:
        for _ in range(3):
            torch.ones(8) + 1
            profilers.step()
    r = cpu_only.report()
    assert r.what_if is None and r.time is not None
    assert what_if_lines(r) == [
        "What if: not available (no GPU times to replay: run on a GPU with kernel timing, or "
        "with --fake-cuda --gpu NAME for a prediction)."
    ]


def _fake_run(
    work, gpu: str = "H100", values: str | None = None
) -> tuple[profilers.Report, object]:
    from profilers.fake_cuda.harness import fake_cuda

    with (
        fake_cuda(1, values=values),
        profilers.profile(kernel_timing=False, count_ops=True, gpu=gpu) as prof,
    ):
        work()
    return prof.report(), prof


@pytest.mark.fake_cuda
@pytest.mark.slow
@needs_fake_cuda
def test_under_the_fake_gpu_each_op_has_the_models_time():
    spec = gpu_spec("H100")

    def work():
        host = torch.randn(64, 64)
        for _ in range(4):
            x = host.to("cuda:0")  # @to
            y = x @ x  # @mm
            y.sum().item()  # @item
            profilers.step()

    r, prof = _fake_run(work)
    *ops, end = list(prof._log.steps)[-1].ops()
    assert (end.kind, end.line) == ("host", "(end of step)")
    assert [(o.kind, o.line) for o in ops] == [
        ("h2d", _line(line_of("to"))),
        ("kernel", _line(line_of("mm"))),
        ("kernel", _line(line_of("item"))),
        ("d2h", _line(line_of("item"))),
    ]
    a = torch.empty(64, 64, device="meta")
    mm_ns = predict_op_ns(spec, torch.ops.aten.mm.default, (a, a), {}, a)
    total = torch.empty((), device="meta")
    sum_ns = predict_op_ns(spec, torch.ops.aten.sum.default, (a,), {}, total)
    assert [o.gpu_ns for o in ops] == [
        copy_ns(spec, "h2d", 64 * 64 * 4, pinned=False),
        mm_ns,
        sum_ns,
        copy_ns(spec, "d2h", 4, pinned=False),
    ]
    # NB: under the fake GPU an op's own run is the simulation's: the launch stands for it
    assert all(o.host_ns >= HOST_LAUNCH_NS + o.overhead_ns for o in ops)
    assert r.predicted is not None and r.predicted["gpu"] == "H100-SXM"
    assert r.predicted["memory"]["fits"] is True and r.predicted["memory"]["message"] is None
    run = r.time["run"]
    assert run["gpu"]["measured"] == "predicted" and run["gpu"]["gpu"] == "H100-SXM"
    assert run["verdict"] in ("launch-bound", "sync-bound", "GPU-bound", "copy-bound")
    # only the replayed steps: the others' host time is the simulation's
    assert r.time["steps"] and all(s["gpu"]["measured"] == "predicted" for s in r.time["steps"])
    assert r.time["gpu"].startswith("PREDICTED for H100-SXM")
    # the per-step figures' basis, the steps after the first, is the same typical step
    assert r.time["after_first"]["gpu"] == run["gpu"]
    assert r.time["after_first"]["verdict"] == run["verdict"]
    first = time_lines(r, analyze(r))[0]
    assert first.startswith(f"PREDICTED for H100-SXM: {run['verdict']}: ")
    w = r.what_if
    assert w["measured"] == "predicted" and w["gpu"] == "H100-SXM"
    assert {(s["kind"], s["site"]) for s in w["savings"]} >= {
        ("pinned_non_blocking", _line(line_of("to"))),
        ("defer_sync", _line(line_of("item"))),
    }
    lines = time_lines(r, analyze(r))
    # the verdict, then the prediction's two parts with their ranges, then the unprofiled step
    assert lines[1].startswith("PREDICTED step on the H100-SXM: ")
    assert lines[2].startswith("  host: ") and "MEASURED on this CPU" in lines[2]
    assert lines[3].startswith("  GPU model: ")
    assert lines[4].startswith("an unprofiled step would take about ")
    assert "(PREDICTED for H100-SXM, step 3 replayed" in lines[4]


@pytest.mark.fake_cuda
@pytest.mark.slow
@needs_fake_cuda
def test_a_nan_check_that_decides_the_loop_gets_no_read_it_less_often():
    def work():
        x = torch.randn(64, 64, device="cuda:0")
        for _ in range(4):
            loss = (x @ x).sum()
            if not torch.isfinite(loss):  # @nan_check
                raise RuntimeError("nan")
            loss.item()  # @nan_item
            profilers.step()

    r, _ = _fake_run(work)
    w = r.what_if
    assert w is not None
    deferred = {s["site"] for s in w["savings"] if s["kind"] == "defer_sync"}
    assert _line(line_of("nan_item")) in deferred and _line(line_of("nan_check")) not in deferred
    kinds = {h.kind for h in analyze(r).hints if h.line.line == line_of("nan_check")}
    assert "check_on_host" in kinds and not kinds & {"item_in_loop", "data_dependent"}


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_the_peak_of_gpu_memory_is_checked_against_the_gpus_size():
    def work():
        big = torch.empty(5 * GIB // 4, device="cuda:0")  # 5 GiB of float32
        for _ in range(2):
            big.add_(1)
            profilers.step()

    # NB: placeholder values: 5 GiB really allocated and added to took seconds, and the check
    # reads the sizes only
    r, _ = _fake_run(work, gpu="GTX 980", values="placeholder")
    memory = r.predicted["memory"]
    assert memory["peak_bytes"] == 5 * GIB and memory["fits"] is False
    message = "would not fit on a GTX-980: 5.0 GiB (the GTX-980 has 4 GiB)"
    assert memory["message"] == message
    assert f"PREDICTED: {message}" in time_lines(r, analyze(r))


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_the_memory_check_is_said_when_no_step_ended():
    # A script that never steps (inference, an allocation test) gets no time prediction, but
    # its peak was still counted: the summary says it would not fit.
    def work():
        torch.empty(5 * GIB // 4, device="cuda:0")

    r, _ = _fake_run(work, gpu="GTX 980", values="placeholder")
    assert r.time is None
    assert time_lines(r, analyze(r))[1:] == [
        "PREDICTED: would not fit on a GTX-980: 5.0 GiB (the GTX-980 has 4 GiB)"
    ]


@pytest.mark.fake_cuda
@pytest.mark.slow
@needs_fake_cuda
def test_the_gpus_idle_over_a_long_pause_is_the_pauses_line_not_the_next_ops():
    import time

    def work():
        x = torch.ones(64, 64, device="cuda:0")
        for _ in range(4):
            time.sleep(0.12)  # @pause
            x = x * 2  # @after_pause
            profilers.step()

    r, _ = _fake_run(work, gpu="A10", values="placeholder")
    assert r.time is not None
    idle = r.time["after_first"]["gpu"]["idle_lines"]
    # 120 ms a step (the sampler names a pause of 50-100 ms or more whole): tolerance 10%,
    # a reading's share of the stretch after the pause may stay with the op's line
    assert idle[0]["site"] == _line(line_of("pause")) and idle[0]["cause"] == "launch"
    assert idle[0]["ms"] >= 0.9 * 120
    assert time_lines(r, analyze(r))[-1].startswith(f"costliest line: {_line(line_of('pause'))}, ")


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_without_gpu_the_fake_gpus_time_view_stays_off():
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda(1), profilers.profile(kernel_timing=False, count_ops=True) as prof:
        torch.ones(4, device="cuda:0") + 1
        profilers.step()
    r = prof.report()
    assert r.time is None and r.what_if is None and r.predicted is None
    with pytest.raises(RuntimeError, match="on simulated GPUs only"):
        with profilers.profile(gpu="H100"):
            pass


@pytest.mark.fake_cuda
def test_gpu_names_a_known_gpu_and_goes_with_fake_cuda(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text("raise SystemExit('must not run')\n")
    assert main(["profile", "--gpu", "H100", str(script)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "gpuwatch: error: --gpu predicts a named GPU under --fake-cuda; a run on this machine's "
        "GPUs is measured, not predicted (add --fake-cuda to predict for another GPU)\n"
    )
    assert main(["profile", "--fake-cuda", "--gpu", "Z9000", str(script)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuwatch: error: unknown GPU 'Z9000'; known: H200, H100-SXM, ")
    assert err.count("\n") == 1 and "GTX-980" in err


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_report_what_if_prints_the_table(tmp_path, capsys):
    def work():
        host = torch.randn(256, 256)
        for _ in range(4):
            x = host.to("cuda:0", non_blocking=True)
            (x @ x).sum().item()
            profilers.step()

    r, _ = _fake_run(work)
    path = tmp_path / "run.json"
    r.save(path)
    assert main(["report", str(path), "--what-if"]) == 0
    out = capsys.readouterr().out.splitlines()
    w = r.what_if
    assert out[0].startswith(f"What if (PREDICTED for H100-SXM; step 3, {w['ops']} ops): ")
    assert out[1].split() == ["rank", "saves/step", "range", "%", "line", "fix"]
    # a line more where some fixes cannot be ranked against each other
    tied = any(not s["ranked"] for s in w["savings"])
    assert len(out) == 2 + len(w["savings"]) + 1 + tied
    assert tied == any("cannot be ranked" in x for x in out)
    assert out[-1].startswith("  all together: saves ")
    doc = json.loads(path.read_text())
    assert problem(doc, "gpuwatch.profile/1") is None  # the published schema holds them
    doc["what_if"]["savings"][0]["kind"] = "faster_gpu"
    assert "faster_gpu" in str(problem(doc, "gpuwatch.profile/1"))
    page = render_html(r, analyze(r))
    assert "<h2>What if</h2>" in page and "PREDICTED for H100-SXM" in page
    # each hint of a line with a what-if says what its fix saves, and they rank by it
    found = [h for h in hints(r) if h.saving_ms > 0]
    assert found and all("the fix saves about " in h.evidence for h in found)
    # the line's own cost is a predicted figure too, and says so apart from the saving
    costed = [h for h in found if h.cost_ms > 0]
    assert costed and all(
        " of GPU idle per step (" in h.evidence
        and "PREDICTED for H100-SXM)" in h.evidence.split("; ")[1]
        for h in costed
    )
    # ranked by what they save where replayed, else by their line's cost (the most a fix
    # there can save: a launch-bound line has no what-if)
    ranked = hints(r)
    assert [h.rank_ms for h in ranked] == sorted((h.rank_ms for h in ranked), reverse=True)
    saved = [h.saving_ms for h in ranked if h.saved]
    assert saved == sorted(saved, reverse=True)
