"""Every ``gpuwatch profile`` option is declared once (gpuwatch/profile/options.py), and every
path that carries options gives back the same frozen object: the command line, the JSON of the
``--live`` child, the command line of each rank, the notebook magic's line; and the one mapping
to ``profilers.profile()``'s keywords."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpuwatch.cli.main import build_parser
from gpuwatch.cli.target_args import split_target
from gpuwatch.profile.live.protocol import Done, Fatal
from gpuwatch.profile.live.session import ChildSession
from gpuwatch.profile.options import ProfileOptions, profiler_keywords
from gpuwatch.profile.ranks import rank_command, rank_options
from gpuwatch.profile.runner import Target

#: Every field away from its default (a new option must be added here: the first test says so).
EVERY = ProfileOptions(
    output_paths=("a.json", "b.html"),
    json_path="r.json",
    html_path="r.html",
    trace_path="r.trace.json",
    quiet=True,
    top=7,
    kernel_timing=False,
    count_ops=True,
    user_code=("src", "lib"),
    inputs=("json.JSONDecoder", "itertools.count"),
    lib_lines=True,
    timeline_capacity=123,
    checkpoint_s=5.0,
    gpu_interval_s=2.5,
    gpu_stats=False,
    trace_syncs=True,
    fake_cuda=True,
    fake_gpus=3,
    fake_memory_bytes=24 * 1024**3,
    fake_values="placeholder",
    gpu="H100-SXM",
    what_if=True,
    memory=True,
    steps=(2, 9),
    nproc_per_node=2,
    live=True,
    demo=True,
    budget="syncs<=0",
    no_budget=True,
)


def profile_options(argv: list[str]) -> ProfileOptions:
    """The options the real ``gpuwatch`` parser makes of ``gpuwatch profile ARGV s.py``."""
    parser = build_parser()
    ours, target = split_target(parser, ["profile", *argv, "s.py", "--lr", "1"])
    assert target == ["s.py", "--lr", "1"]
    return ProfileOptions.from_namespace(parser.parse_args(ours))


def test_the_sample_sets_every_field_away_from_its_default():
    defaults = ProfileOptions()
    same = [f.name for f in dataclasses.fields(EVERY) if getattr(EVERY, f.name) == f.default]
    assert same == [], f"add these fields to EVERY: {same}"
    assert EVERY != defaults
    written = set(EVERY.to_argv())  # every option is written back, in its current spelling
    assert {f.metadata["flag"].names[-1] for f in dataclasses.fields(EVERY)} <= written


@pytest.mark.parametrize(
    "options",
    [
        ProfileOptions(),
        EVERY,
        EVERY.replace(steps=(4, None), user_code=("one",), output_paths=()),
        ProfileOptions(steps=(0, 1), gpu_interval_s=0.1, checkpoint_s=0.0),
    ],
)
def test_argv_options_argv_json_round_trip(options):
    argv = options.to_argv()
    assert profile_options(argv) == options
    assert ProfileOptions.from_argv(argv) == options
    assert profile_options(argv).to_argv() == argv
    thawed = ProfileOptions.from_json(json.loads(json.dumps(options.to_json())))
    assert thawed == options and hash(thawed) == hash(options)
    assert type(thawed.user_code) is tuple and type(thawed.output_paths) is tuple


def test_defaults_are_the_command_lines():
    assert profile_options([]) == ProfileOptions()
    assert ProfileOptions().to_argv() == []


def test_options_are_frozen_keyword_only_and_hashable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        EVERY.top = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        ProfileOptions(True)  # type: ignore[misc]
    assert len({EVERY, EVERY.replace(), ProfileOptions()}) == 2
    with pytest.raises(ValueError, match="not profile options: stepz"):
        ProfileOptions.from_json({"stepz": [1, 2]})


def test_the_rank_command_line_gives_back_the_ranks_options():
    cmd = rank_command(EVERY, Target("train.py", ["--lr", "1"]), "/tmp/x/rank{rank}.json")
    assert cmd[:3] == ["-m", "gpuwatch", "profile"]
    assert profile_options(cmd[3:-3]) == rank_options(EVERY, "/tmp/x/rank{rank}.json")
    assert cmd[-3:] == ["train.py", "--lr", "1"]
    ranked = rank_options(EVERY, "p{rank}.json")
    # quiet, one JSON output, launching nothing; everything else as the user gave it
    assert (ranked.quiet, ranked.json_path, ranked.output_paths, ranked.nproc_per_node) == (
        True,
        "p{rank}.json",
        (),
        0,
    )
    assert (ranked.steps, ranked.fake_gpus, ranked.user_code) == ((2, 9), 3, ("src", "lib"))
    assert (ranked.live, ranked.demo, ranked.budget, ranked.no_budget) == (False, False, None, True)
    module = rank_command(ProfileOptions(), Target("pkg.mod", [], module=True), "r{rank}.json")
    assert module == [
        *("-m", "gpuwatch", "profile", "--json", "r{rank}.json", "--quiet"),
        *("-m", "pkg.mod"),
    ]


@pytest.mark.fake_cuda
def test_the_notebook_magic_builds_the_same_options():
    pytest.importorskip("IPython")
    from gpuwatch.profile.notebook import parse_options

    magic = EVERY.replace(
        quiet=False,
        checkpoint_s=0.0,  # a cell has no checkpoints
        gpu_interval_s=0.5,
        gpu_stats=True,
        nproc_per_node=0,
        live=False,
        demo=False,
        budget=None,
        no_budget=False,
        fake_cuda=False,
        fake_gpus=1,
        fake_memory_bytes=None,
        fake_values=None,
        gpu=None,
        what_if=False,
    )
    line = " ".join(magic.replace(checkpoint_s=ProfileOptions().checkpoint_s).to_argv())
    options, wanted = parse_options(line)
    assert options == magic
    assert [(o.kind, o.path) for o in wanted] == [
        ("json", "r.json"),
        ("html", "r.html"),
        ("trace", "r.trace.json"),
        ("json", "a.json"),
        ("html", "b.html"),
    ]


@pytest.mark.fake_cuda
def test_the_library_keywords_come_from_one_mapping():
    import profilers
    from profilers.session import Options

    keywords = profiler_keywords(ProfileOptions())
    params = inspect.signature(profilers.profile).parameters
    option_fields = {f.name for f in dataclasses.fields(ProfileOptions)}
    library_fields = {f.name for f in dataclasses.fields(Options)}
    # Each keyword is one the library takes, under the same name as the CLI's option.
    assert set(keywords) <= set(params) & library_fields & option_fields
    # count_ops: the CLI's bool becomes the library's three states.
    assert keywords == {
        "kernel_timing": True,
        "count_ops": None,
        "user_code": None,
        "timeline_capacity": 10_000,
        "trace_syncs": False,
        "steps": None,
        "memory": None,
        "gpu": None,
        "inputs": (),
        "lib_lines": False,
        "what_if": False,
    }
    fast = profiler_keywords(ProfileOptions(kernel_timing=False))
    assert (fast["kernel_timing"], fast["count_ops"]) == (False, None)
    counted = profiler_keywords(ProfileOptions(kernel_timing=False, count_ops=True))
    assert counted["count_ops"] is True
    fake = profiler_keywords(ProfileOptions(fake_cuda=True, fake_gpus=2, user_code=("src",)))
    assert (fake["kernel_timing"], fake["count_ops"], fake["user_code"]) == (False, True, ("src",))
    built = EVERY.profiler().options
    assert (built.kernel_timing, built.count_ops, built.user_code, built.steps) == (
        False,
        True,
        ("src", "lib"),
        (2, 9),
    )
    assert (built.timeline_capacity, built.trace_syncs, built.lib_lines) == (123, True, True)
    assert (built.timeline_capacity, built.trace_syncs) == (123, True)
    assert built.what_if is True  # --what-if: the replay's records kept (off the hot path else)


STEPS = """\
import torch
w = torch.nn.Parameter(torch.ones(4))
opt = torch.optim.SGD([w], lr=0.1)
for i in range(5):
    opt.zero_grad()
    (w * 2).sum().backward()
    opt.step()
"""


@pytest.mark.fake_cuda
@pytest.mark.slow
def test_steps_reach_the_live_child(tmp_path: Path):
    (tmp_path / "s.py").write_text(STEPS)
    session = ChildSession(
        Target(str(tmp_path / "s.py"), []),
        ProfileOptions(steps=(1, 3), user_code=(str(tmp_path),)),
        interval_s=0.1,
        cwd=str(tmp_path),
    )
    session.start()
    done = None
    deadline = time.monotonic() + 60
    try:
        while done is None:
            assert time.monotonic() < deadline, "the live child sent no report"
            for msg in session.drain().messages:
                assert not isinstance(msg, Fatal), msg
                if isinstance(msg, Done):
                    done = msg
            time.sleep(0.02)
    finally:
        session.stop()
    steps = done.report["totals"]["steps"]
    # steps 1 and 2 of 0..4: the window [1, 3), two steps profiled, five seen
    assert (steps["window"], steps["count"], steps["seen"]) == ([1, 3], 2, 5)


@pytest.mark.slow
def test_steps_reach_a_rank(tmp_path: Path):
    (tmp_path / "s.py").write_text(STEPS)
    cmd = rank_command(
        ProfileOptions(steps=(1, 3), gpu_stats=False),
        Target(str(tmp_path / "s.py"), []),
        str(tmp_path / "rank{rank}.json"),
    )
    # What torch.distributed.run starts for rank 0 of 1: the same command, RANK set.
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    done = subprocess.run(
        [sys.executable, *cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # quiet
    steps = json.loads((tmp_path / "rank0.json").read_text())["totals"]["steps"]
    assert (steps["window"], steps["count"], steps["seen"]) == ([1, 3], 2, 5)


def test_old_spellings_work_with_a_note(capsys):
    options = profile_options(["--gpu-interval", "2.5"])
    assert options.gpu_interval_s == 2.5 and options == profile_options(["-i", "2.5"])
    assert capsys.readouterr().err == (
        "gpuwatch: note: --gpu-interval is now --interval (the old spelling still works)\n"
    )
    assert profile_options(["--interval", "2.5"]) == options
    assert capsys.readouterr().err == ""


def test_short_spellings(capsys):
    options = profile_options(["-o", "a.json", "-q", "-n", "3", "-i", "1"])
    assert options == ProfileOptions(output_paths=("a.json",), quiet=True, top=3, gpu_interval_s=1)
    assert profile_options(["--output", "a.json"]).output_paths == ("a.json",)
    assert capsys.readouterr().err == ""


def test_a_script_named_after_an_option_value_is_still_the_script():
    parser = build_parser()
    ours, target = split_target(parser, ["profile", "-n", "3", "-i", "1", "s.py", "-n", "9"])
    assert target == ["s.py", "-n", "9"]
    assert ProfileOptions.from_namespace(parser.parse_args(ours)).top == 3


def test_the_namespace_is_read_never_changed():
    ns = build_parser().parse_args(["profile", "--user-code", "a", "--steps", "1:"])
    before = dict(vars(ns))
    options = ProfileOptions.from_namespace(ns)
    assert vars(ns) == before and options.user_code == ("a",) and options.steps == (1, None)


def test_every_declared_option_has_help_and_one_current_spelling():
    parser = build_parser()
    spellings = [f.metadata["flag"].names for f in dataclasses.fields(ProfileOptions)]
    assert all(names[-1].startswith("--") for names in spellings)
    text = textwrap.dedent(parser._subparsers._group_actions[0].choices["profile"].format_help())  # type: ignore[union-attr]
    for names in spellings:
        assert names[-1] in text
    assert "--gpu-interval" not in text  # old spellings are hidden
