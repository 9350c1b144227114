"""Where gpuwatch's options end and the profiled script's (or module's) begin: everything after
the script or ``-m module`` is the target's, as with ``python`` and ``python -m``."""

from __future__ import annotations

import pytest

from gpuwatch.cli import main as cli
from gpuwatch.cli.target_args import split_target


@pytest.mark.parametrize(
    ("argv", "ours", "theirs"),
    [
        # a module's own options, even ones gpuwatch also has, are the module's
        (
            ["profile", "-m", "pkg.mod", "--lr", "3e-4"],
            ["profile", "-m", "pkg.mod"],
            ["--lr", "3e-4"],
        ),
        (
            ["profile", "-q", "-m", "pkg.mod", "--json", "j.json"],
            ["profile", "-q", "-m", "pkg.mod"],
            ["--json", "j.json"],
        ),
        # a "--" right after the module separates, as the user meant; a later one is the module's
        (
            ["profile", "-m", "pkg.mod", "--", "--lr", "3e-4"],
            ["profile", "-m", "pkg.mod"],
            ["--lr", "3e-4"],
        ),
        (
            ["profile", "-m", "pkg.mod", "a", "--", "b"],
            ["profile", "-m", "pkg.mod"],
            ["a", "--", "b"],
        ),
        (["profile", "-mpkg.mod", "--top", "2"], ["profile", "-mpkg.mod"], ["--top", "2"]),
        # options with a value are skipped whole, so their value is never taken for the script
        (
            ["profile", "--json", "r.json", "--top=3", "train.py", "--json", "x"],
            ["profile", "--json", "r.json", "--top=3"],
            ["train.py", "--json", "x"],
        ),
        (["profile", "--live", "--", "train.py", "-q"], ["profile", "--live"], ["train.py", "-q"]),
        (["profile", "--", "--odd-name.py"], ["profile"], ["--odd-name.py"]),
        # nothing to split: argparse says what is wrong
        (["profile", "--json"], ["profile", "--json"], None),
        (["top", "--json"], ["top", "--json"], None),
        (["--version"], ["--version"], None),
    ],
)
def test_everything_after_the_target_is_the_targets(argv, ours, theirs):
    assert split_target(cli.build_parser(), argv) == (ours, theirs)


def test_the_parsed_command_line_gives_the_module_its_options(monkeypatch):
    seen = {}

    def fake_run(args):
        seen.update(module=args.module, args=args.args, json=args.json_path, quiet=args.quiet)
        return 0

    monkeypatch.setattr("gpuwatch.cli.profile.run_profile", fake_run)
    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda only=None: parser)
    for action in parser._actions:  # the handler was bound when the parser was built
        for sub in getattr(action, "choices", None) or {}:
            if sub == "profile":
                action.choices[sub].set_defaults(handler=fake_run)
    assert cli.main(["profile", "-q", "-m", "pkg.mod", "--json", "j.json", "--lr", "3e-4"]) == 0
    assert seen == {
        "module": "pkg.mod",
        "args": ["--json", "j.json", "--lr", "3e-4"],
        "json": None,
        "quiet": True,
    }
