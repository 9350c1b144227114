"""The ``gpuwatch`` command line: one module per subcommand in this package (``SUBCOMMANDS``),
and a short ``main()`` that dispatches to the handler the subcommand's parser set."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import import_module

from gpuwatch import __version__
from gpuwatch.errors import CliError

#: The subcommands, in the order ``gpuwatch --help`` lists them, with its line on each: each is
#: the module of that name here, whose ``declare(parser)`` declares its options and handler.
SUBCOMMANDS = {
    "top": "live per-GPU stats and processes (NVML)",
    "profile": "run a PyTorch script and count its device copies, syncs and kernel time",
    "report": "re-render a saved gpuwatch profile JSON, or analyse a torch.profiler trace",
    "diff": "compare two saved runs line by line (before and after a change)",
    "export": "serve the GPUs' stats to Prometheus (dcgm-exporter's metric names)",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser; with ``only``, that one's alone in full, the others' names and
    help lines only: ``gpuwatch top`` (or ``--help``) never loads ``profile``'s half."""
    # NB: allow_abbrev=False everywhere: a prefix must never pick another option silently
    # (--trace was taken as --trace-syncs).
    parser = argparse.ArgumentParser(
        prog="gpuwatch",
        allow_abbrev=False,
        description="Why is my GPU idle? Live GPU stats, and a profiler of the copies and "
        "synchronisations a PyTorch script makes.",
    )
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command, help_line in SUBCOMMANDS.items():
        p = sub.add_parser(command, allow_abbrev=False, help=help_line)
        if only is None or command == only:
            import_module(f"gpuwatch.cli.{command}").declare(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from gpuwatch.cli.target_args import split_target, subparser

    argv = list(sys.argv[1:] if argv is None else argv)
    # NB: the top level's options take no value: its first word is the subcommand, if any.
    parser = build_parser(next((a for a in argv if not a.startswith("-")), ""))
    ours, target = split_target(parser, argv)
    args, unknown = parser.parse_known_args(ours)
    if unknown:  # NB: the subcommand's own usage, not the top level's (argparse's default)
        subparser(parser, args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
    if target is not None:  # everything after the script or module is the script's
        args = argparse.Namespace(**{**vars(args), "args": target})
    try:
        return int(args.handler(args))
    except CliError as exc:
        print(f"gpuwatch: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gpuwatch top --json | head`: the reader is gone
        return _pipe_closed()
    except BaseException as exc:
        # NB: SIGTERM/SIGHUP before the script started (gpuwatch/profile/interrupts.py's
        # Terminated): looked up among the modules loaded, as ``gpuwatch top`` never imports it.
        interrupts = sys.modules.get("gpuwatch.profile.interrupts")
        if interrupts is None or not isinstance(exc, interrupts.Terminated):
            raise
        return int(exc.exit_code)


def _pipe_closed() -> int:
    """Ends quietly, as ``cat`` does when its reader goes: no traceback, and no second error
    when Python flushes stdout at exit (it now writes to /dev/null)."""
    import os
    import signal

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE
