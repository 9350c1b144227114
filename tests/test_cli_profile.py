"""``gpuwatch profile`` and ``gpuwatch report`` run as a user runs them, with scripts in tmp_path
that make copies and syncs on fake CUDA tensors: one run through the console script in a process
of its own, the rest through the CLI's ``main()`` in this process (the same run path, seconds
less each)."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from gpuwatch.cli import main as cli
from tests.helpers import gpuwatch_here, refuses_fullgraph_under_a_mode, run

ENTRY_POINTS = [["gpuwatch"], [sys.executable, "-m", "gpuwatch"]]

COPIES = textwrap.dedent("""
    import json, sys, torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    print(json.dumps(sys.argv))
    with FakeTensorMode(shape_env=ShapeEnv()):
        w = torch.randn(64, 64).to("cuda:0")
        for step in range(12):
            x = torch.randn(32, 64).to("cuda:0")
            loss = (x @ w).sum().item()
    code = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    if code:
        sys.exit(code)
""")
# lines of COPIES (1-based after dedent, the first line is empty):
LINE_W, LINE_X, LINE_ITEM = 8, 10, 11


def script(tmp_path: Path, text: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# NB: both entry points (the console script, python -m gpuwatch) are run by test_cli_top's
# test_version_and_help; a full profile through one of them is enough here.
@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRY_POINTS[:1], ids=["script"])
def test_counts_in_the_json_are_exact_and_argv_passes_through(tmp_path, entry):
    script(tmp_path, COPIES)
    done = run([*entry, "profile", "--json", "run.json", "train.py", "0", "--lr", "3"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == ["train.py", "0", "--lr", "3"]
    assert done.stdout.count("\n") == 1  # the script's stdout, and nothing of gpuwatch's
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["schema"] == "gpuwatch.profile/1" and doc["exit_code"] == 0 and not doc["partial"]
    assert doc["command"] == ["train.py", "0", "--lr", "3"]
    t = doc["totals"]
    # w: 64*64*4 = 16384 bytes once; x: 32*64*4 = 8192 bytes, 12 times = 98304; total 114688
    assert (t["h2d"]["count"], t["h2d"]["bytes"]) == (13, 16384 + 12 * 8192)
    # 12 .item() calls, one float32 element each
    assert (t["d2h"]["count"], t["d2h"]["bytes"]) == (12, 12 * 4)
    assert t["syncs"] == {"count": 25, "by_cause": {"item": 12, "copy_to_device": 13}}
    lines = {s["line"]: s for s in doc["sites"] if s["file"] == "train.py"}
    assert lines[LINE_X]["h2d"]["count"] == 12 and lines[LINE_X]["source"].startswith(
        "x = torch.randn"
    )
    assert lines[LINE_ITEM]["syncs"]["by_cause"] == {"item": 12}
    assert lines[LINE_W]["h2d"]["bytes"] == 16384
    # top-level lines of the script: no callers (the console script's bin/gpuwatch is not one)
    assert all(s["stack"] == [] and s["stacks"] == [] for s in lines.values())
    assert "Top lines by syncs" in done.stderr and f"train.py:{LINE_ITEM}" in done.stderr


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """One profiled run (exit code 3) whose report several tests read: profiled once."""
    tmp = tmp_path_factory.mktemp("saved")
    script(tmp, COPIES)
    return tmp, gpuwatch_here(["profile", "-q", "--json", "r.json", "train.py", "3"], tmp)


def test_exit_code_of_the_script_is_kept(saved_run):
    tmp_path, done = saved_run
    assert done.returncode == 3
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["exit_code"] == 3 and not doc["partial"] and doc["totals"]["h2d"]["count"] == 13


def test_an_exception_shows_the_scripts_traceback_and_a_partial_report(tmp_path):
    script(tmp_path, COPIES + "raise ValueError('shapes do not match')\n")
    done = gpuwatch_here(["profile", "--json", "r.json", "--html", "r.html", "train.py"], tmp_path)
    assert done.returncode == 1
    err = done.stderr
    assert "Traceback (most recent call last):" in err
    assert (
        'File "' in err and 'train.py", line 15' in err and "ValueError: shapes do not match" in err
    )
    assert (
        "gpuwatch/profile/runner.py" not in err and "runpy" not in err
    )  # only the script's frames
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["partial"] is True and doc["exit_code"] == 1
    assert doc["error"] == "ValueError: shapes do not match"
    assert doc["totals"]["h2d"]["count"] == 13  # what ran before the error is kept
    assert (tmp_path / "r.html").stat().st_size > 1_000_000


def test_fullgraph_compile_runs_eager_under_the_profiler_and_says_so(tmp_path):
    script(
        tmp_path,
        textwrap.dedent("""
            import torch
            f = torch.compile(lambda x: (x * 2).sum(), backend="eager", fullgraph=True)
            print(f(torch.ones(4)).item())
        """),
    )
    # kernel timing is a dispatch mode: the profile runs compiled code eager by torch's own
    # force_eager stance, so fullgraph=True, which finds no compiled frame, does not raise
    done = gpuwatch_here(["profile", "-q", "--json", "r.json", "train.py"], tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "8.0\n", "")
    compiled = json.loads((tmp_path / "r.json").read_text())["compiled"]
    assert (compiled["ran_eager"], compiled["eager_calls"]) == ("gpuwatch's dispatch mode", 1)


def test_fullgraph_refused_where_the_script_sets_its_own_stance_gets_one_line(tmp_path):
    script(
        tmp_path,
        textwrap.dedent("""
            import torch
            torch.compiler.set_stance("default")  # the script's own: the profile keeps it
            f = torch.compile(lambda x: (x * 2).sum(), backend="eager", fullgraph=True)
            print(f(torch.ones(4)).item())
        """),
    )
    done = gpuwatch_here(["profile", "-q", "--json", "r.json", "train.py"], tmp_path)
    if not refuses_fullgraph_under_a_mode():  # torch 2.9 runs it eager: the report says so
        assert (done.returncode, done.stdout, done.stderr) == (0, "8.0\n", "")
        doc = json.loads((tmp_path / "r.json").read_text())
        assert doc["compiled"]["ran_eager"] == "gpuwatch's dispatch mode"
        return
    assert done.returncode == 1
    # one line, no dynamo dump of skipped frames, and the option that runs it unmodified
    assert done.stderr == (
        "gpuwatch: train.py:5: torch.compile(fullgraph=True) cannot run under the profiler's "
        "dispatch mode (kernel timing); the same script runs unmodified with "
        "--no-kernel-timing (copies, syncs and collectives counted, compiled code run "
        "compiled), or profile it with fullgraph=False\n"
    )
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["partial"] is True and doc["error"].startswith("RuntimeError: torch.compile")
    done = gpuwatch_here(["profile", "-q", "--no-kernel-timing", "train.py"], tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "8.0\n", "")


def test_dash_m_runs_a_module_with_its_arguments(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(COPIES)
    done = gpuwatch_here(
        # everything after the module is the module's, gpuwatch's own options included
        [
            "profile",
            "-q",
            "--json",
            "r.json",
            "-m",
            "mypkg.train",
            "0",
            "--lr",
            "3e-4",
            "--json",
            "j.json",
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    argv = json.loads(done.stdout.splitlines()[0])
    assert argv[0].endswith("mypkg/train.py") and argv[1:] == [
        "0",
        "--lr",
        "3e-4",
        "--json",
        "j.json",
    ]
    assert not (tmp_path / "j.json").exists()
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["command"] == ["-m", "mypkg.train", "0", "--lr", "3e-4", "--json", "j.json"]
    assert {s["file"] for s in doc["sites"]} >= {"mypkg/train.py"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py"], "script not found: missing.py"),
        (["."], ". is a directory, not a script"),
        (["-m", "no_such_module_xyz"], "module 'no_such_module_xyz' not found"),
        (
            ["--json", "nowhere/r.json", "train.py"],
            "cannot write the report to nowhere/r.json: no directory nowhere",
        ),
        (["--html", ".", "train.py"], "cannot write the report to .: it is a directory"),
        ([], "no script given: gpuwatch profile [options] script.py [args ...]"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_the_script_runs(tmp_path, args, message):
    script(tmp_path, "open('ran', 'w').write('yes')\n")
    done = gpuwatch_here(["profile", *args], tmp_path)
    assert done.returncode == 2
    assert done.stderr == f"gpuwatch: error: {message}\n"
    assert not (tmp_path / "ran").exists()


def test_unreadable_script_is_refused(tmp_path, monkeypatch, capsys):
    path = script(tmp_path, "print('hi')\n")
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if str(p) == str(path) else real_access(p, mode)
    )
    assert cli.main(["profile", str(path)]) == 2
    assert (
        capsys.readouterr().err
        == f"gpuwatch: error: script not readable: {path} (permission denied)\n"
    )


def test_report_rerenders_a_saved_run(saved_run):
    tmp_path, _ = saved_run
    done = gpuwatch_here(["report", "r.json", "--html", "again.html"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Top lines by syncs" in done.stdout and f"train.py:{LINE_ITEM}" in done.stdout
    assert "<!DOCTYPE html>" in (tmp_path / "again.html").read_text()[:50]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "is not valid JSON"),
        (
            b'{"schema": "gpuwatch.snapshot/1", "gpus": []}',
            "not a gpuwatch profile: schema is 'gpuwatch.snapshot/1'",
        ),
        (b'{"schema": "gpuwatch.profile/1", "totals": 7}', "damaged gpuwatch profile"),
        (b"\xff\xfe\x00binary", "is not text"),
    ],
)
def test_report_refuses_corrupt_or_foreign_files(tmp_path, content, message):
    (tmp_path / "bad.json").write_bytes(content)
    done = gpuwatch_here(["report", "bad.json"], tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("gpuwatch: error:")
    assert message in done.stderr and "Traceback" not in done.stderr


def test_report_of_a_missing_file(tmp_path):
    done = gpuwatch_here(["report", "nope.json"], tmp_path)
    assert (done.returncode, done.stderr) == (2, "gpuwatch: error: no such file: nope.json\n")


EVIL = "</script><img src=x onerror=window.__pwned=1><b>"


def test_html_escapes_strings_from_user_code(tmp_path):
    text = COPIES.replace("loss = (x @ w)", f"loss = (x @ w)  # {EVIL}\n        loss = (x @ w)")
    script(tmp_path, text, name="evil_<b>.py")
    done = gpuwatch_here(["profile", "-q", "--html", "r.html", "evil_<b>.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "r.html").read_text()
    assert EVIL not in page and "<img src=x" not in page
    assert "&lt;/script&gt;&lt;img src=x onerror=window.__pwned=1&gt;" in page


def _browser():
    pw = pytest.importorskip("playwright.sync_api")
    exe = "/usr/bin/chromium"
    if not Path(exe).exists():
        pytest.skip("Debian's chromium is not installed")
    return pw, exe


@pytest.mark.slow  # a headless Chromium and its driver
def test_html_report_renders_offline_in_a_real_browser(tmp_path):
    pw, exe = _browser()
    text = COPIES.replace("loss = (x @ w)", f"loss = (x @ w)  # {EVIL}\n        loss = (x @ w)")
    script(tmp_path, text)
    done = gpuwatch_here(["profile", "-q", "--html", "r.html", "train.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    with pw.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=exe,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            page = browser.new_page()
            requests, problems = [], []
            page.on("request", lambda r: requests.append(r.url))
            page.on(
                "console",
                lambda m: problems.append(m.text) if m.type in ("error", "warning") else None,
            )
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto((tmp_path / "r.html").as_uri())
            page.wait_for_selector("#fig-syncs .main-svg", timeout=30_000)
            plots = page.query_selector_all(".js-plotly-plot")
            bars = page.query_selector_all("#fig-bytes .bars .point")
            pwned = page.evaluate("window.__pwned === 1")
            title = page.title()
            verdict = page.inner_text(".verdict p")  # the summary's first time line, shown
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert len(plots) == 4 and len(bars) >= 2
    assert requests == [(tmp_path / "r.html").as_uri()]  # self-contained: nothing fetched
    assert problems == [] and not pwned
    assert title == "gpuwatch profile: train.py"
    assert re.match(r"(input|sync|copy|comm|host)-bound: \S+ \S+ (per step|in all), ", verdict)
    assert verdict.endswith("of the host's time (GPU not measured)"), verdict


def test_gpu_stats_follow_the_gpus_the_script_used(monkeypatch):
    from gpuwatch.monitor.gpu_timeline import used_gpu_indices

    devices = [{"device": "cpu"}, {"device": "cuda:1"}]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert used_gpu_indices(devices) == {1}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")  # cuda:1 is NVML's GPU 6
    assert used_gpu_indices(devices) == {6}
    samples = [{"gpu": 0, "uuid": "GPU-0a1b-ffff"}, {"gpu": 1, "uuid": "GPU-2c3d-eeee"}]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-2c3d,GPU-0a1b")  # UUID prefixes, reordered
    assert used_gpu_indices(devices, samples) == {0}  # cuda:1 is the second entry: GPU-0a1b
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0a1b,2c3d")  # CUDA accepts them without GPU-
    assert used_gpu_indices(devices, samples) == {1}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0,GPU-2")  # ambiguous prefixes: no telling
    assert used_gpu_indices(devices, [*samples, {"gpu": 2, "uuid": "GPU-2c3d-0000"}]) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234,MIG-5678")  # slices NVML was not asked of
    assert used_gpu_indices(devices, samples) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,MIG-GPU-0a1b-ffff/2/0")  # a slice of GPU 0
    assert used_gpu_indices(devices, samples) == {0}
    from gpuwatch.monitor import gpu_timeline

    class Nvml:  # what RealBackend.gpu_of_mig answers (tested over the stub NVML elsewhere)
        def gpu_of_mig(self, uuid: str) -> int | None:
            return {"MIG-5678": 1}.get(uuid)

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234,MIG-5678")
    mig_gpus = gpu_timeline.learn_mig_gpus(Nvml())
    assert mig_gpus == {"MIG-5678": 1}
    assert used_gpu_indices(devices, samples, mig_gpus) == {1}  # MIG-5678 is part of GPU 1
    assert used_gpu_indices(devices, samples) is None  # what the caller did not pass is unknown
    # A script that used no GPU is charged with none (the node's load is someone else's).
    assert used_gpu_indices([{"device": "cpu"}]) == set()
