"""One vocabulary on the command line (short spellings, ``-o`` for outputs, ``--interval``,
``--fake-gpus``; old spellings still work with a one-line note), each subcommand's own usage on
a bad option, and the profiler library's errors and warnings worded by the CLI, never by the
library."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from gpuwatch.cli import main as cli
from gpuwatch.cli.main import build_parser
from gpuwatch.profile.options import ProfileOptions
from gpuwatch.profile.worded import worded
from profilers import Report, RunOptions
from profilers.errors import FakeCudaUnavailable, MissingTorchApi, NotSimulated
from profilers.options import FakeCudaRun, Options

ROOT = Path(__file__).resolve().parents[1]
NOTE = "gpuwatch: note: {old} is now {new} (the old spelling still works)\n"


@pytest.fixture
def saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "run.json"
    path.write_text(Report(command=["train.py"], duration_s=1.5).to_json())
    return path


def test_report_has_quiet_output_and_short_top(saved, capsys):
    assert cli.main(["report", str(saved), "-q", "-o", "again.json", "-n", "3"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == ("", "")  # quiet: no summary, no 'wrote' line
    assert json.loads(Path("again.json").read_text())["command"] == ["train.py"]
    assert cli.main(["report", str(saved), "--output", "r.html"]) == 0
    out, err = capsys.readouterr()
    assert Path("r.html").read_text().startswith("<!DOCTYPE html>") and out
    assert err == "gpuwatch: wrote r.html\n"


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["report", "run.json", "--bogus"], "usage: gpuwatch report "),
        (["profile", "--bogus", "s.py"], "usage: gpuwatch profile "),
        (["top", "--demo", "--nope"], "usage: gpuwatch top "),
        (["diff", "a.json", "b.json", "-x"], "usage: gpuwatch diff "),
    ],
)
def test_an_unknown_option_shows_its_subcommands_usage(argv, usage, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith(usage), err
    assert err.splitlines()[-1].endswith(
        f"error: unrecognized arguments: {argv[-2 if argv[0] == 'profile' else -1]}"
    )


def test_top_speaks_the_same_words(tmp_path, capsys):
    args = build_parser().parse_args(
        ["top", "--demo", "--fake-gpus", "3", "-i", "2", "-c", "-u", "ann", "-p", "7", "-1"]
    )
    assert (args.demo_gpus, args.interval, args.compute, args.user, args.pid, args.once) == (
        3,
        2.0,
        True,
        ["ann"],
        [7],
        True,
    )
    assert build_parser().parse_args(["top", "--only", "0", "2"]).only == ["0", "2"]
    assert build_parser().parse_args(["top", "--only", "0,2"]).only == ["0,2"]
    assert capsys.readouterr().err == ""
    # a demo's old spelling works, silently (no script depends on its stderr's note)
    old = build_parser().parse_args(["top", "--demo", "--demo-gpus", "4"])
    assert old.demo_gpus == 4
    old = build_parser().parse_args(["export", "--demo", "--demo-gpus", "5"])
    assert old.demo_gpus == 5
    assert capsys.readouterr().err == ""
    assert (
        "--demo-gpus"
        not in build_parser()
        ._subparsers._group_actions[0]
        .choices[  # type: ignore[union-attr]
            "top"
        ]
        .format_help()
    )


def test_top_json_prints_or_writes_one_snapshot(tmp_path, capsys):
    assert cli.main(["top", "--demo", "--fake-gpus", "3", "--only", "0", "2", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [g["index"] for g in printed["gpus"]] == [0, 2]
    path = tmp_path / "snap.json"
    assert cli.main(["top", "--demo", "--json", str(path)]) == 0
    assert capsys.readouterr().out == ""
    written = json.loads(path.read_text())
    assert written["schema"] == "gpuwatch.snapshot/1" and len(written["gpus"]) == 2


def test_count_ops_says_when_it_changes_nothing(tmp_path, capsys):
    from gpuwatch.cli.profile import _check_options

    _check_options(ProfileOptions(count_ops=True))
    assert capsys.readouterr().err == (
        "gpuwatch: note: --count-ops changes nothing without --no-kernel-timing (kernel "
        "timing counts every op)\n"
    )
    for quiet_or_meaningful in (
        ProfileOptions(count_ops=True, kernel_timing=False),
        ProfileOptions(count_ops=True, quiet=True),
    ):
        _check_options(quiet_or_meaningful)
        assert capsys.readouterr().err == ""


@pytest.mark.fake_cuda
def test_the_cli_words_the_librarys_errors_with_its_flags():
    fake = FakeCudaUnavailable("could not run c++: no such file")
    assert str(fake) == "the fake GPU could not run c++: no such file"
    assert worded(fake) == "--fake-cuda could not run c++: no such file"
    trace = MissingTorchApi("trace_syncs", "torch.cuda._gpu_trace")
    assert (
        str(trace) == "trace_syncs=True needs torch.cuda._gpu_trace, which this torch does not have"
    )
    assert worded(trace) == (
        "--trace-syncs needs torch.cuda._gpu_trace, which this torch does not have"
    )
    missing = NotSimulated("torch.cuda.foo()", "torch._C._cuda_foo")
    assert isinstance(missing, AttributeError) and (missing.api, missing.needs) == (
        "torch.cuda.foo()",
        "torch._C._cuda_foo",
    )
    import pickle

    again = pickle.loads(pickle.dumps(trace))
    assert (again.option, again.api, str(again)) == (trace.option, trace.api, str(trace))


def test_a_missing_torch_api_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    import profilers.patches

    monkeypatch.setattr(profilers.patches, "gpu_trace", None)
    script = tmp_path / "s.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    code = cli.main(["profile", "--trace-syncs", "--no-gpu-stats", "-q", str(script)])
    assert code == 2
    assert capsys.readouterr().err == (
        "gpuwatch: error: --trace-syncs needs torch.cuda._gpu_trace, which this torch does "
        "not have\n"
    )


def _strings(node: ast.AST) -> list[str]:
    return [
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def test_the_library_neither_prints_nor_names_cli_flags_in_what_it_raises_or_warns():
    flag = re.compile(r"(?<![\w-])--[a-z][a-z-]+")
    found = []
    for path in sorted((ROOT / "profilers").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                found.append(f"{where}: print()")
            said = None
            if isinstance(node, ast.Raise) and node.exc is not None:
                said = node.exc
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "warn":
                said = node
            if said is None:
                continue
            for text in _strings(said):
                if "gpuwatch:" in text or "gpuwatch --" in text or flag.search(text):
                    found.append(f"{where}: {text!r}")
    assert found == []


@pytest.mark.fake_cuda
def test_report_options_are_typed_with_the_same_json():
    doc = {
        **{"kernel_timing": False, "user_code": ["src"], "timeline_capacity": 9},
        **{"threads": True, "comm": False, "steps": [1, None], "count_ops": None},
        **{"trace_syncs": False, "time_steps": 64},
        "kernel_timing_source": "off",
        "counting": "copies",
        "gpu_stats": "demo",
        "gpu_samples_scope": "all GPUs",
        "merged_ranks": 2,
        "fake_cuda": {"devices": 2, "placeholders": {"values": 1, "host_copies": 0, "sizes": 3}},
        "from_a_newer_gpuwatch": {"kept": True},
    }
    options = RunOptions.from_dict(json.loads(json.dumps(doc)))
    assert options.profile == Options(
        kernel_timing=False, user_code=("src",), timeline_capacity=9, comm=False, steps=(1, None)
    )
    assert (options.counting, options.counts_ops, options.timing_source) == ("copies", False, "off")
    assert options.fake_cuda == FakeCudaRun(2, {"values": 1, "host_copies": 0, "sizes": 3})
    assert options.extra == {"from_a_newer_gpuwatch": {"kept": True}}
    assert options.to_dict() == doc
    # an old or foreign report: what is missing is None, what is odd is kept as it was
    odd = RunOptions.from_dict({"counting": 3, "fake_cuda": "yes", "kernel_timing": True})
    assert (odd.profile, odd.counting, odd.fake_cuda, odd.counts_ops) == (None, None, None, True)
    assert odd.to_dict() == {"counting": 3, "fake_cuda": "yes", "kernel_timing": True}
    assert RunOptions.from_dict(None) == RunOptions() and RunOptions().to_dict() == {}


def test_diff_o_with_no_known_ending_names_only_what_diff_writes(saved, capsys):
    # diff writes JSON and HTML, no trace: its error must not point at --trace, which it refuses
    assert cli.main(["diff", str(saved), str(saved), "-o", "d.txt"]) == 2
    assert capsys.readouterr().err == (
        "gpuwatch: error: -o d.txt: the file name says no report kind; end it in .json or "
        ".html (or use --json, --html)\n"
    )
