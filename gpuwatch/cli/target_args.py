"""Where ``gpuwatch profile``'s own options end and the profiled script's (or module's) begin."""

from __future__ import annotations

import argparse


def split_target(
    parser: argparse.ArgumentParser, argv: list[str]
) -> tuple[list[str], list[str] | None]:
    """Splits a command line at the script (or ``-m module``) of ``gpuwatch profile``: the
    arguments for gpuwatch, and the target's (None when this is no ``profile`` command line).
    Everything after the script or the module belongs to it, as with ``python`` and ``python
    -m``: ``profile -m pkg.mod --lr 3e-4 --json j.json`` gives both options to the module."""
    # NB: argparse cannot do this itself: -m takes one value and REMAINDER does not start
    # until a positional, so "-m pkg.mod --lr 1" was "unrecognized arguments: --lr".
    command = next((i for i, tok in enumerate(argv) if not tok.startswith("-")), None)
    if command is None or argv[command] != "profile":
        return argv, None
    profile = subparser(parser, "profile")
    i = command + 1
    while i < len(argv):
        tok = argv[i]
        if tok == "--":  # the end of gpuwatch's options: the script comes next
            return argv[:i], argv[i + 1 :]
        if tok == "-m" or (tok.startswith("-m") and not tok.startswith("--")):
            head = i + 2 if tok == "-m" else i + 1
            rest = argv[head:]
            # NB: "-m pkg.mod -- --lr 1": the "--" separates gpuwatch's part from the module's,
            # the one place a user can put one; it is not the module's own argument.
            return argv[:head], rest[1:] if rest[:1] == ["--"] else rest
        if not tok.startswith("-") or tok == "-":
            return argv[:i], argv[i:]
        action = profile._option_string_actions.get(tok.split("=", 1)[0])
        takes_value = action is not None and action.nargs != 0 and "=" not in tok
        i += 2 if takes_value else 1
    return argv, None


def subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of ``command``, one of ``parser``'s subcommands."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    sub: argparse.ArgumentParser = action.choices[command]
    return sub
