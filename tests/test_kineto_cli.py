"""``gpuwatch report`` given a torch.profiler trace: told from a gpuwatch run by its content, its
outputs (summary, JSON against the published schema, HTML, Perfetto), and one line with exit 2
for every file it cannot analyse."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuwatch.cli import main as cli
from gpuwatch.output.load import problem, schema
from tests.kineto_helpers import TraceBuilder
from tests.shared_traces import SHARED_TRACES as DATA
from tests.shared_traces import needs_shared_traces
from tests.test_report_schema import rich_report


def _trace(tmp_path: Path, name: str = "t.json") -> Path:
    t = TraceBuilder()
    t.step(7, 0, 100)
    t.loader(0, 60)
    t.launch("aten::conv2d", 61, 65, 30)
    return t.write(tmp_path / name, gz=name.endswith(".gz"))


def _one_line_error(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    assert cli.main(["report", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("gpuwatch: error: "), err
    return err[len("gpuwatch: error: ") :].strip()


def test_the_summary_of_a_trace(tmp_path, capsys):
    path = _trace(tmp_path, "run.pt.trace.json")
    assert cli.main(["report", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [
        "gpuwatch report: torch.profiler trace run.pt.trace.json",
        "1 step (ProfilerStep#7), 100 µs; measured from the trace",
        "GPU 0 (NVIDIA H100 80GB HBM3): input-bound. busy 30.0% (30 µs of 100 µs), idle 70.0%: "
        "input 60.0%, launch 10.0%",
        "  what to try: the GPU waits for batches: DataLoader(num_workers=N, pin_memory=True, "
        "persistent_workers=True), or prefetch the next batch while this one runs",
    ]
    row = next(line for line in out if line.startswith("  ProfilerStep#7"))
    assert row.split() == [
        "ProfilerStep#7",
        "100",
        "µs",
        "30.0%",
        "60.0%",
        "0.0%",
        "0.0%",
        "0.0%",
        "10.0%",
        "0.0%",
        "0.0%",
        "60.0%",
        "input-bound",
    ]
    assert "  window: each ProfilerStep#N's host interval" in out


def test_every_output_of_a_trace(tmp_path, capsys):
    path = _trace(tmp_path, "t.json.gz")
    out = tmp_path / "out"
    out.mkdir()
    args = ["report", "-q", str(path), "-o", str(out / "a.json"), "--html", str(out / "a.html")]
    assert cli.main([*args, "--trace", str(out / "a.trace.json")]) == 0
    assert capsys.readouterr() == ("", "")
    doc = json.loads((out / "a.json").read_text())
    assert problem(doc, "gpuwatch.kineto/1") is None
    (step,) = doc["ranks"][0]["steps"]
    assert step["devices"][0]["idle_by_cause_ms"]["input"] == 0.06
    html = (out / "a.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "input-bound" in html and "<script" not in html
    events = json.loads((out / "a.trace.json").read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X" and e["cat"].startswith("gpu.")]
    by_cat: dict[str, float] = {}
    for e in slices:
        by_cat[e["cat"]] = by_cat.get(e["cat"], 0) + e["dur"]
    # busy 30 us; input 60, launch 10 (the summary's figures, as slices in the trace's clock)
    assert {k: round(v, 3) for k, v in by_cat.items()} == {
        "gpu.busy": 30.0,
        "gpu.input": 60.0,
        "gpu.launch": 10.0,
    }
    busy = next(e for e in slices if e["cat"] == "gpu.busy")
    assert busy["ts"] == 65.0  # the kernel's own timestamp in the original trace


def test_the_json_schema_rejects_what_the_writer_must_not_write(tmp_path):
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(schema("gpuwatch.kineto/1"))
    assert (
        cli.main(["report", "-q", str(_trace(tmp_path)), "--json", str(tmp_path / "a.json")]) == 0
    )
    doc = json.loads((tmp_path / "a.json").read_text())
    doc["ranks"][0]["run"][0]["verdict"] = "fast"
    assert problem(doc, "gpuwatch.kineto/1") is not None
    del doc["ranks"][0]["run"][0]["idle_by_cause_ms"]["input"]
    assert problem(doc, "gpuwatch.kineto/1") is not None


@pytest.mark.slow
@needs_shared_traces
@pytest.mark.parametrize(
    "path", ["resnet50_num_workers_0.pt.trace.json.gz", "two_ranks", "event_sync_trace.json.gz"]
)
def test_the_json_of_real_traces_matches_its_schema(tmp_path, path):
    out = tmp_path / "a.json"
    assert cli.main(["report", "-q", str(DATA / path), "--json", str(out)]) == 0
    assert problem(json.loads(out.read_text()), "gpuwatch.kineto/1") is None


def test_a_gpuwatch_run_is_still_a_gpuwatch_run(tmp_path, capsys):
    doc = rich_report()
    doc["command"] = ["train.py", "--traceEvents"]  # content, not a word in it, decides
    (tmp_path / "run.json").write_text(json.dumps(doc))
    assert (
        cli.main(["report", str(tmp_path / "run.json"), "--json", str(tmp_path / "again.json")])
        == 0
    )
    assert "gpuwatch profile train.py --traceEvents" in capsys.readouterr().out
    assert json.loads((tmp_path / "again.json").read_text())["schema"] == "gpuwatch.profile/1"


def test_a_trace_named_like_a_run_is_read_as_a_trace(tmp_path, capsys):
    path = _trace(tmp_path, "run.json")
    assert cli.main(["report", str(path)]) == 0
    assert "input-bound" in capsys.readouterr().out


def _gpuwatch_trace(tmp_path: Path) -> Path:
    events = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "gpuwatch: train.py"}},
        {"ph": "X", "pid": 1, "tid": 3, "ts": 0, "dur": 5, "cat": "step", "name": "step 0"},
    ]
    path = tmp_path / "g.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _runtime_only(tmp_path: Path) -> Path:
    t = TraceBuilder()
    t.step(1, 0, 10)
    t.runtime("cudaLaunchKernel", 1, 2)
    return t.write(tmp_path / "r.json")


def _range_profiler(tmp_path: Path) -> Path:
    """As torch.profiler writes with CUPTI's range profiler on (experimental_config with
    profiler_metrics): counters per kernel range, no kernel activity."""
    t = TraceBuilder()
    t.step(1, 0, 10)
    t.runtime("cudaLaunchKernel", 1, 2)
    t.events.append(
        {"ph": "X", "cat": "cuda_profiler_range", "name": "k", "pid": 0, "tid": 1, "ts": 3,
         "dur": 2, "args": {"smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 0}}
    )  # fmt: skip
    return t.write(tmp_path / "range.json")


def _legacy(tmp_path: Path) -> Path:
    """The pre-Kineto autograd profiler's export (use_cuda=True): a JSON array, no categories,
    kernels under pid "CUDA functions" tied to their op by flow events."""
    events = [
        {"name": "aten::mm", "ph": "X", "ts": 10, "dur": 5, "tid": 1, "pid": "CPU functions"},
        {"name": "aten::mm", "ph": "s", "ts": 10, "tid": 1, "pid": "CPU functions", "id": 0,
         "cat": "cpu_to_cuda", "args": {}},
        {"name": "volta_sgemm", "ph": "f", "ts": 12, "tid": 0, "pid": "CUDA functions", "id": 0,
         "cat": "cpu_to_cuda", "args": {}},
        {"name": "volta_sgemm", "ph": "X", "ts": 12, "dur": 30, "tid": 0,
         "pid": "CUDA functions", "args": {}},
    ]  # fmt: skip
    return _write(tmp_path, "legacy.json", json.dumps(events).encode())


def _mtia(tmp_path: Path) -> Path:
    t = TraceBuilder()
    t.step(1, 0, 10)
    t.events.append(
        {"ph": "X", "cat": "mtia_ccp_events", "name": "k", "pid": 0, "tid": 1, "ts": 1, "dur": 2}
    )
    return t.write(tmp_path / "m.json")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(
            lambda p: _write(
                p, "t.json.gz", (DATA / "event_sync_trace.json.gz").read_bytes()[:1500]
            ),
            "is a damaged or truncated gzip file",
            marks=needs_shared_traces,
        ),
        (lambda p: _write(p, "t.json.gz", gzip.compress(b"hello")), "is not valid JSON"),
        (
            lambda p: _write(p, "t.json", _trace(p).read_bytes()[:300]),
            "is not valid JSON (Unterminated string starting at: line 1 column ",
        ),
        (lambda p: _write(p, "t.json", b"[1, 2, 3]"), "no torch.profiler events"),
        (lambda p: _write(p, "t.json", b'{"traceEvents": []}'), "no torch.profiler events"),
        (
            lambda p: _write(p, "t.json", b'{"schemaVersion": 1, "deviceProperties": []}'),
            "is neither a gpuwatch profile nor a torch.profiler trace: a JSON object with no",
        ),
        pytest.param(
            lambda p: DATA / "cpu_only.json.gz",
            "is a CPU-only trace: no GPU activity",
            marks=needs_shared_traces,
        ),
        pytest.param(
            lambda p: DATA / "amd_mi250.json.gz",
            "is an AMD (ROCm/HIP) trace",
            marks=needs_shared_traces,
        ),
        (_mtia, "is a trace of another accelerator (mtia_ccp_events events)"),
        (_legacy, "is a legacy autograd-profiler trace (torch.autograd.profiler with use_cuda"),
        (_runtime_only, "has CUDA runtime calls but no GPU activity"),
        (_range_profiler, "was recorded with CUPTI's range profiler (cuda_profiler_range"),
        (_gpuwatch_trace, "is a Chrome trace gpuwatch wrote (its own trace output)"),
        (lambda p: p, "is a folder with no .json or .json.gz trace in it"),
        (
            lambda p: _write(p, "r.json.gz", gzip.compress(json.dumps(rich_report()).encode())),
            "is a gpuwatch report, compressed: gunzip it first",
        ),
    ],
    ids=[
        "truncated-gzip",
        "gzip-not-json",
        "truncated-json",
        "json-list",
        "no-events",
        "no-trace-events",
        "cpu-only",
        "amd",
        "mtia",
        "legacy-autograd",
        "no-activity",
        "range-profiler",
        "gpuwatch-trace",
        "empty-folder",
        "gzipped-run",
    ],
)
def test_bad_traces_get_one_line_and_exit_2(tmp_path, capsys, make, message):
    folder = tmp_path / "in"
    folder.mkdir()
    path = make(folder)
    assert message in _one_line_error(capsys, [str(path)])


def test_a_run_and_a_trace_together_are_refused(tmp_path, capsys):
    (tmp_path / "run.json").write_text(json.dumps(rich_report()))
    message = _one_line_error(capsys, [str(_trace(tmp_path)), str(tmp_path / "run.json")])
    assert message.endswith(
        "is not a torch.profiler trace: a gpuwatch run and a trace cannot be reported together"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--what-if"], "--what-if replays a gpuwatch run"),
        (["--budget", "syncs<=0"], "--budget checks a gpuwatch run's copies and syncs"),
    ],
)
def test_options_of_a_run_are_refused_for_a_trace(tmp_path, capsys, args, message):
    assert _one_line_error(capsys, [str(_trace(tmp_path)), *args]).startswith(message)


@pytest.mark.slow
def test_a_trace_is_analysed_without_importing_torch_or_a_runs_modules(tmp_path):
    """Nor a run's analysis, its report's modules or a process pool's: a trace's report costs
    the trace's reading only (issue 52: 4 MB and 0.1 s of imports on every trace)."""
    import subprocess
    import sys

    path = _trace(tmp_path, "t.json.gz")
    code = (
        "import sys\n"
        "from gpuwatch.cli import main as cli\n"
        f"code = cli.main(['report', '-q', {str(path)!r}, '--html', 'r.html', '--json', 'r.json'])\n"
        "assert code == 0, code\n"
        "print(sorted(m for m in sys.modules if m.startswith(('torch', 'textual', 'plotly', "
        "'gpuwatch.analysis', 'profilers.report', 'profilers.budgets', 'multiprocessing'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_ranks_side_by_side_name_the_slowest(tmp_path, capsys):
    for rank, step_us in ((0, 100), (1, 150)):
        t = TraceBuilder(rank=rank)
        t.step(1, 0, step_us)
        t.launch("aten::mm", 0, 10, 90)  # busy 90 of 100 (90%) and of 150 (60%)
        t.write(tmp_path / f"rank{rank}.json")
    assert cli.main(["report", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[:4] == [
        "2 ranks (mean step; busy share; verdict, per GPU)",
        "  rank 0    GPU 0      100 µs   90.0%  GPU-bound",
        "  rank 1    GPU 0      150 µs   60.0%  launch-bound",
        "  slowest: rank 1, 50.0% longer steps than rank 0",
    ]


def test_a_report_written_into_the_trace_folder_is_passed_over(tmp_path, capsys):
    folder = tmp_path / "log"
    folder.mkdir()
    _trace(folder, "worker0.pt.trace.json")
    assert cli.main(["report", "-q", str(folder), "--json", str(folder / "analysis.json")]) == 0
    assert cli.main(["report", str(folder)]) == 0  # again: analysis.json is no trace
    out = capsys.readouterr().out
    assert "input-bound" in out
    assert "note: passed over (JSON, not a Chrome trace): analysis.json" in out
    (folder / "worker0.pt.trace.json").unlink()
    assert _one_line_error(capsys, [str(folder)]) == (
        f"{folder} holds no torch.profiler trace (only analysis.json)"
    )


def test_a_cpu_only_rank_in_a_folder_is_passed_over(tmp_path, capsys):
    folder = tmp_path / "log"
    folder.mkdir()
    _trace(folder, "rank0.json")
    cpu = TraceBuilder()
    cpu.step(7, 0, 100)
    cpu.op("aten::add", 10, 20)
    cpu.write(folder / "rank1.json")
    assert cli.main(["report", str(folder)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpuwatch report: torch.profiler trace rank0.json\n")
    assert "note: passed over (no GPU activity in the trace): rank1.json" in out
    (folder / "rank0.json").unlink()  # only the CPU-only rank left: its own one line
    assert _one_line_error(capsys, [str(folder)]) == (
        f"{folder / 'rank1.json'} is a CPU-only trace: no GPU activity was recorded (profile "
        "with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU)"
    )
    assert _one_line_error(capsys, [str(folder / "rank1.json")]).endswith("on a GPU)")


def test_a_long_path_loses_its_folders_before_the_op_is_cut():
    from gpuwatch.output.kineto_text import _where
    from profilers.kineto.events import Where

    deep = "moca/library/model_hub/huggingface/model/adapters/pipeline/model.py"
    at = (deep, 40, "run_on_input")
    copy, addmm = Where("aten::copy_", *at), Where("aten::addmm", *at)
    # two ops on one line, both over 90 characters: the op names stay, the folders go
    tail = ":40 (run_on_input) [aten::copy_]"
    assert _where(copy) == "…" + deep[-(90 - 1 - len(tail)) :] + tail
    assert _where(addmm).endswith("/model.py:40 (run_on_input) [aten::addmm]")
    assert len(_where(copy)) == len(_where(addmm)) == 90
    # a long op keeps the file's last 24 characters and is cut at the width
    loader = Where("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", *at)
    assert _where(loader).startswith("…" + deep[-24:] + ":40 (run_on_input) [enumerate(")
    assert len(_where(loader)) == 90 and _where(loader).endswith("…")
    short = Where("aten::mm", "train.py", 7, "step")
    assert _where(short) == "train.py:7 (step) [aten::mm]"


def test_nccl_kernels_alone_under_a_tenth_of_a_percent_are_not_shown(tmp_path, capsys):
    t = TraceBuilder()
    t.step(1, 0, 10_000)
    t.launch("aten::mm", 0, 5, 9_000)
    t.launch("nccl:all_reduce", 9_100, 9_200, 4, stream=20, name="ncclKernel_AllReduce")
    path = t.write(tmp_path / "t.json")
    assert cli.main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    header = next(ln for ln in out.splitlines() if ln.startswith("  step "))
    assert "NCCL kernels alone" not in out and "nccl" not in header  # 4 us of 10 ms: 0.04%


def test_a_window_under_a_microsecond_is_written_in_ns(tmp_path, capsys):
    # as Kineto's own sample traces: ns-resolution float times, a 130 ns window
    t = TraceBuilder()
    t.op("op1", 0.0, 0.04)
    corr = t.runtime("cudaLaunchKernel", 0.0, 0.01)
    t.kernel("Kernel", 0.02, 0.02, corr)
    t.op("op_sync", 0.11, 0.02)
    assert cli.main(["report", str(t.write(tmp_path / "t.json"))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        out[1] == "no ProfilerStep: the whole trace is one window, 130 ns; measured from the trace"
    )
    assert "busy 15.4% (20 ns of 130 ns)" in out[2]
