"""Every demo and exercise runs on the CPU with tiny sizes; on a GPU, the naive variant's
mistakes show in the profile, at the lines that make them. The demos run in this process, as
``__main__`` (torch is imported once for all of them)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import gpuwatch_here, script_here

ROOT = Path(__file__).resolve().parent.parent
DEMOS = ROOT / "demos"
TINY = ["--steps", "6", "--epochs", "2", "--batch", "8", "--size", "16"]
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def demo(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python demos/SCRIPT ARGS`` in this process (the demos' ``__main__`` path, torch
    already imported): its stdout and stderr; it must exit 0."""
    return script_here(ROOT / script, list(args), ROOT)


def together(*commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Runs each ``[script, args...]`` in turn; each must succeed; their results in order."""
    return [demo(*c) for c in commands]


def profiled(out: Path, *script_and_args: str, quiet: bool = True) -> tuple[dict, str]:
    """``gpuwatch profile --json OUT script args`` (in this process: the same run path as the
    command's): the JSON document and the summary (stderr)."""
    flags = ["-q"] if quiet else []
    done = gpuwatch_here(["profile", *flags, "--json", str(out), *script_and_args], ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text()), done.stderr


def final_loss(out: str) -> float:
    match = re.search(r"final loss (\d+\.\d+)", out)
    assert match, out
    return float(match.group(1))


@pytest.mark.slow
def test_naive_and_fixed_reach_the_same_loss():
    naive, fixed = together(
        *(["demos/single_gpu_training.py", "--variant", v, *TINY] for v in ("naive", "fixed"))
    )
    assert abs(final_loss(naive.stdout) - final_loss(fixed.stdout)) < 1e-4
    assert naive.stdout.count("epoch ") == fixed.stdout.count("epoch ") == 2
    if not torch.cuda.is_available():
        assert naive.stderr == "note: no CUDA GPU found, running on the CPU\n"


def test_every_mistake_and_fix_is_on_its_own_commented_line():
    lines = (DEMOS / "single_gpu_training.py").read_text().splitlines()

    def code_with(marker: str) -> list[str]:
        return [s for s in lines if marker in s and s.split(marker)[0].strip()]

    mistakes = code_with("# MISTAKE:")
    # the model or constants moved inside the loop, a CPU tensor made mid-forward, loss.item()
    # every step, .cpu().numpy() metrics, non_blocking from pageable memory, a blocking copy,
    # the optimiser built before .to(device)
    assert len(mistakes) == 7
    assert len(code_with("# FIX:")) >= 5


def test_dataparallel_demo_says_how_the_batch_is_split():
    out = demo(
        "demos/dataparallel_training.py", "--steps", "2", "--batch", "8", "--size", "16"
    ).stdout
    gpus = torch.cuda.device_count()
    if gpus >= 2:
        assert f"DataParallel over {gpus} GPUs" in out
    elif gpus == 1:
        assert "one GPU visible" in out
    else:
        assert "no GPU: DataParallel just calls the model on the CPU" in out
    assert re.search(r"mean loss \d+\.\d+ over 2 steps", out)


def test_split_sizes_follow_torch_chunk():
    sys.path.insert(0, str(DEMOS))
    try:
        from dataparallel_training import split_sizes
    finally:
        sys.path.remove(str(DEMOS))
    assert split_sizes(10, 3) == [4, 4, 2]
    assert split_sizes(128, 1) == [128]


def test_exercises_print_their_tables():
    matmul, trace = (
        d.stdout
        for d in together(
            ["demos/exercises.py", "matmul", "--sizes", "16", "32"],
            ["demos/exercises.py", "trace-log", "--steps", "20", "--size", "8"],
        )
    )
    assert re.search(r"^16x16\s+\d+\.\d+", matmul, re.M) and "32x32" in matmul
    assert "log each tr(M M^T) with .item()" in trace and "same values: True" in trace
    if torch.cuda.device_count() >= 2:  # on fewer it only says it skipped
        two = demo("demos/exercises.py", "two-gpus", "--steps", "1", "--size", "64").stdout
        assert "two GPUs at once" in two


@pytest.mark.slow
def test_minibatch_benchmark_table():
    out = demo(
        "demos/minibatch_benchmark.py",
        "--batch",
        "2",
        "--steps",
        "1",
        "--threads",
        "1",
        "2",
        "--networks",
        "fc",
        "lstm",
    ).stdout
    header = next(line for line in out.splitlines() if line.startswith("network"))
    assert "CPU 1 thr" in header and "CPU 2 thr" in header
    assert re.search(r"^fc\s+\d+\.\d+\s+\d+\.\d+", out, re.M)
    assert re.search(r"^lstm\s+\d+\.\d+", out, re.M)


def test_trace_log_profile_shows_one_sync_per_logged_value(tmp_path):
    # On the CPU .item() is free; the profile still charges the ops to the exercise's lines.
    doc, _ = profiled(
        tmp_path / "r.json",
        "demos/exercises.py",
        "trace-log",
        "--steps",
        "10",
        "--size",
        "8",
        "--device",
        "cpu",
    )
    lines = {s["source"] for s in doc["sites"] if s["file"] == "demos/exercises.py"}
    assert "log.append((m @ m.T).trace().item())  # a sync per product" in lines


def _profile_both(tmp_path: Path, *flags: str) -> list[tuple[dict, str]]:
    """Both variants profiled: ``[(naive JSON, summary), (fixed JSON, summary)]``."""
    return [
        profiled(
            tmp_path / f"{v}.json", *flags, "demos/single_gpu_training.py", "--variant", v,
            "--steps", "20", "--epochs", "1", "--batch", "32", quiet=False,
        )
        for v in ("naive", "fixed")
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.fake_cuda
def test_without_a_gpu_fake_cuda_teaches_the_naive_and_fixed_lesson(tmp_path):
    (naive, said), (fixed, fixed_said) = _profile_both(tmp_path, "--fake-cuda")
    # 20 steps: .item() each, two .cpu() each, a blocking label copy and a constant moved each,
    # and the model's 6 parameters moved once (the later .to(device) calls move nothing)
    assert naive["totals"]["syncs"] == {
        "count": 106,
        "by_cause": {"item": 20, "copy_to_host": 40, "copy_to_device": 46},
    }
    # fixed: the model (6 parameters and the mean buffer) once, one .item() each for the loss
    # and the accuracy at the epoch's end; the batches come pinned, non_blocking
    assert fixed["totals"]["syncs"] == {"count": 9, "by_cause": {"item": 2, "copy_to_device": 7}}
    assert (fixed["totals"]["h2d"]["count"], fixed["totals"]["h2d"]["pageable"]) == (47, 7)
    source = (DEMOS / "single_gpu_training.py").read_text().splitlines()
    mistakes = {
        f"demos/single_gpu_training.py:{i}" for i, t in enumerate(source, 1) if "# MISTAKE:" in t
    }
    hinted = set(re.findall(r"^  (demos/single_gpu_training\.py:\d+)\s*$", said, re.M))
    assert hinted and hinted <= mistakes
    assert "No hints" in fixed_said and "SIMULATED: --fake-cuda" in fixed_said


@gpu
@needs_cuda
def test_on_a_gpu_the_naive_variant_copies_and_syncs_more_at_its_mistake_lines(tmp_path):
    (naive, _), (fixed, _) = _profile_both(tmp_path)
    n, f = naive["totals"], fixed["totals"]
    assert n["syncs"]["count"] > f["syncs"]["count"]
    assert n["h2d"]["count"] + n["d2h"]["count"] > f["h2d"]["count"] + f["d2h"]["count"]
    source = (DEMOS / "single_gpu_training.py").read_text().splitlines()
    mistakes = {i for i, text in enumerate(source, start=1) if "# MISTAKE:" in text}
    demo_lines = [s for s in naive["sites"] if s["file"] == "demos/single_gpu_training.py"]
    busiest = sorted(
        demo_lines,
        key=lambda s: (s["syncs"]["count"], s["h2d"]["count"] + s["d2h"]["count"]),
        reverse=True,
    )[:4]
    assert {s["line"] for s in busiest} <= mistakes, [(s["line"], s["source"]) for s in busiest]
    # 20 steps: .item() and two .cpu() every step, a blocking label copy every step
    item_line = next(i for i in mistakes if "loss.item()" in source[i - 1])
    line = next(s for s in demo_lines if s["line"] == item_line)
    assert line["syncs"]["by_cause"].get("item") == 20


@pytest.mark.fake_cuda
def test_fake_gpu_walkthrough_profile_counts_and_hints_point_at_the_mistakes(tmp_path):
    doc, summary = profiled(
        tmp_path / "w.json",
        "--fake-cuda",
        "demos/fake_gpu_walkthrough.py",
        "--steps",
        "10",
        "--batch",
        "8",
        quiet=False,
    )
    t = doc["totals"]
    # once: w1 784*512*4 = 1605632, b1 512*4 = 2048, w2 512*10*4 = 20480, b2 10*4 = 40
    # each of 10 steps: xb 8*784*4 = 25088, yb 8 int64 = 64, scale 4
    assert (t["h2d"]["count"], t["h2d"]["bytes"]) == (4 + 30, 1628200 + 10 * (25088 + 64 + 4))
    assert (t["h2d"]["non_blocking"], t["h2d"]["pageable"]) == (10, 34)
    # each step: loss.item() and a .cpu() of a float32 scalar, 4 bytes each
    assert (t["d2h"]["count"], t["d2h"]["bytes"]) == (20, 80)
    assert t["syncs"] == {
        "count": 44,
        "by_cause": {"item": 10, "copy_to_host": 10, "copy_to_device": 24},
    }
    source = (DEMOS / "fake_gpu_walkthrough.py").read_text().splitlines()
    mistakes = {
        f"demos/fake_gpu_walkthrough.py:{i}" for i, s in enumerate(source, 1) if "# MISTAKE:" in s
    }
    hinted = set(
        re.findall(r"^  (demos/fake_gpu_walkthrough\.py:\d+)\s*$", summary.split("Hints")[-1], re.M)
    )
    assert hinted == mistakes and len(mistakes) == 5


@pytest.mark.fake_cuda
def test_the_readmes_first_command_predicted_for_a_gpu_ends_in_steps_and_ranks_its_fixes(tmp_path):
    doc, summary = profiled(
        tmp_path / "w.json",
        "--fake-cuda",
        "--gpu",
        "H100",
        "--what-if",
        "demos/fake_gpu_walkthrough.py",
        "--steps",
        "12",
        "--batch",
        "8",
        quiet=False,
    )
    assert doc["time"]["steps_closed"] == 12  # each opt.step() ends one
    p = doc["predicted"]
    assert p["gpu"] == "H100-SXM" and p["host"]["basis"] == "p10-p90 of 10 steps"
    for part in (p["host"], p["gpu_model"], p["step"]):
        assert 0 < part["low_ms"] <= part["ms"] <= part["high_ms"], part
    assert doc["what_if"]["savings"] and "no step ended" not in summary
    assert "PREDICTED step on the H100-SXM: " in summary and "MEASURED on this CPU" in summary
    assert "What if (PREDICTED for H100-SXM;" in summary
    # every field written is in the published schema (strict: no field it does not name)
    from gpuwatch.output.load import parse, problem

    assert problem(doc, strict=True) is None
    # the same prediction twice: the two runs' ranges overlap, so the diff does not rank them
    from gpuwatch.analysis.diff import diff_reports
    from gpuwatch.analysis.diff_findings import DiffDoc
    from gpuwatch.output.diff_text import time_line

    report = parse(json.dumps(doc), "w.json")[0]
    line = time_line(DiffDoc.written(diff_reports(report, report).to_dict()))
    assert line is not None and "cannot rank the two: their predicted ranges overlap" in line.plain
    assert "; the GPU model's part: " in line.plain and line.plain.endswith("(cannot rank)")
    # one far below the other's range, its GPU part too: ranked (no such words)
    doc["predicted"]["step"] = {"ms": 1e-3, "low_ms": 1e-3, "high_ms": 1e-3}
    doc["predicted"]["gpu_model"].update(ms=1e-3, low_ms=1e-3, high_ms=2e-3)
    faster = parse(json.dumps(doc), "faster.json")[0]
    d = diff_reports(report, faster)
    line = time_line(DiffDoc.written(d.to_dict()))
    assert line is not None and "the two" not in line.plain and "(1 µs)" in line.plain
    assert "→ 1 µs (1-2 µs) (ranked)" in line.plain
    assert problem(d.to_dict("w.json", "faster.json"), "gpuwatch.diff/1") is None


@pytest.mark.slow
@pytest.mark.fake_cuda
def test_the_readmes_first_sample_is_what_the_command_prints():
    # NB: its times aside (they move run to run); `python .ci/readme_samples.py` makes it again
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, str(root / ".ci" / "readme_samples.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
