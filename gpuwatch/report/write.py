"""Every report file gpuwatch writes: paths checked before the run, files written whole or not at
all, and never over the user's own files.

* :func:`check_outputs` runs before the script starts: an empty path, a directory, a folder that
  is missing or not writable (probed by creating a file there, which also catches ``/proc``), an
  output given twice, or an output that is one of the user's inputs (the script itself, the report
  being re-rendered) is refused with one line and exit 2.
* :func:`write_reports` renders each report to text first and then writes it atomically (a
  temporary file in the same folder, renamed over the target), so a failure while rendering or
  writing leaves what was there before, never a truncated file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from gpuwatch.cli_errors import CliError
from profilers.report import Report, write_text_atomic


@dataclass(frozen=True)
class Output:
    """One file the user asked for: ``kind`` is ``"json"``, ``"html"`` or ``"trace"``."""

    kind: str
    path: str


def outputs(
    json_path: str | None, html_path: str | None, trace_path: str | None = None
) -> list[Output]:
    """The outputs asked for, in a fixed order (an empty string counts: it is refused later)."""
    asked = (("json", json_path), ("html", html_path), ("trace", trace_path))
    return [Output(k, p) for k, p in asked if p is not None]


#: ``-o PATH``: the kind of report each file ending asks for (longest ending first).
ENDINGS = ((".trace.json", "trace"), (".json", "json"), (".html", "html"), (".htm", "html"))


def output_for(path: str) -> Output:
    """The output ``-o PATH`` asks for, by the file's ending; :class:`CliError` for others."""
    lower = path.lower()
    for ending, kind in ENDINGS:
        if lower.endswith(ending):
            return Output(kind, path)
    raise CliError(
        f"-o {path}: the file name says no report kind; end it in .json, .html or .trace.json "
        "(or use --json, --html, --trace)"
    )


def for_rank(out: Output, rank: int) -> Output:
    """Rank ``rank``'s own file for ``out``: ``{rank}`` in the path replaced, else ``.rankN``
    before the ending (``r.json`` -> ``r.rank1.json``, ``t.trace.json`` -> ``t.rank1.trace.json``)."""
    if "{rank}" in out.path:
        return Output(out.kind, out.path.replace("{rank}", str(rank)))
    lower = out.path.lower()
    for ending, _ in ENDINGS:
        if lower.endswith(ending):
            cut = len(out.path) - len(ending)
            return Output(out.kind, f"{out.path[:cut]}.rank{rank}{out.path[cut:]}")
    return Output(out.kind, f"{out.path}.rank{rank}")


def distributed_rank() -> tuple[int, int] | None:
    """``(rank, world_size)`` from the launcher's environment (torchrun, torch.distributed.run,
    SLURM through torchrun), or None when this process is not one rank of several."""
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None
    return (rank, world) if world >= 1 and 0 <= rank < world else None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_outputs(wanted: Sequence[Output], inputs: Iterable[str] = ()) -> None:
    """Raises :class:`CliError` (exit 2) when any output cannot or must not be written.

    Args:
        wanted: the outputs asked for.
        inputs: the user's files the run reads (the script, a report being re-rendered): an
            output that is one of them would destroy it.
    """
    inputs = [p for p in inputs if p]
    for i, out in enumerate(wanted):
        if not out.path:
            raise CliError(f"--{out.kind} needs a file name (an empty path was given)")
        for path in inputs:
            if _same_file(out.path, path):
                raise CliError(
                    f"refusing to write the {out.kind.upper()} report to {out.path}: it is "
                    f"{path}, an input of this run, and would be overwritten"
                )
        for other in wanted[:i]:
            if other.path and _same_file(out.path, other.path):
                raise CliError(
                    f"{out.path} is given twice (--{other.kind} and --{out.kind}); "
                    "each report needs its own file"
                )
        check_writable(out.path)


def check_writable(path: str) -> None:
    """Raises :class:`CliError` when ``path`` cannot be written, before a long run is wasted."""
    p = Path(path)
    if p.is_dir():
        raise CliError(f"cannot write the report to {path}: it is a directory")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise CliError(f"cannot write the report to {path}: no directory {parent}")
    if p.exists() and not os.access(p, os.W_OK):
        raise CliError(f"cannot write the report to {path}: permission denied")
    # NB: os.access says yes to root for any folder, /proc included; creating a file is the
    # only honest test, and it is what the atomic write will do.
    probe = parent / f".{p.name}.gpuwatch-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise CliError(
            f"cannot write the report to {path}: {exc.strerror or exc} in {parent}"
        ) from None
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass  # a folder that lets us create but not remove: the write itself will say more


def render(report: Report, kind: str) -> str:
    """The text of one output; may raise anything a renderer raises."""
    if kind == "json":
        return report.to_json()
    if kind == "html":
        from gpuwatch.report.html import render_html

        return render_html(report)
    if kind == "trace":
        from gpuwatch.report.trace import render_trace

        return render_trace(report)
    raise ValueError(f"unknown report kind {kind!r}")


def write_reports(report: Report, wanted: Sequence[Output]) -> list[tuple[bool, str]]:
    """Writes each output whole or not at all; ``(ok, message)`` for each, for the caller to
    show. A failing renderer costs its own file only, never the others."""
    results: list[tuple[bool, str]] = []
    for out in wanted:
        try:
            text = render(report, out.kind)
        except Exception as exc:  # a renderer bug must not cost the other reports
            results.append((False, f"could not render {out.path}: {type(exc).__name__}: {exc}"))
            continue
        try:
            write_text_atomic(out.path, text)
        except OSError as exc:
            results.append((False, f"cannot write the report to {out.path}: {exc.strerror or exc}"))
        else:
            results.append((True, f"wrote {out.path}"))
    return results


def say(
    results: Sequence[tuple[bool, str]], quiet: bool = False, file: TextIO | None = None
) -> bool:
    """Prints the results (``wrote`` lines only when not ``quiet``); True if any failed."""
    stream = file if file is not None else sys.stderr
    for ok, message in results:
        if ok and quiet:
            continue
        try:
            print(f"gpuwatch: {'' if ok else 'error: '}{message}", file=stream)
        except (OSError, ValueError):
            pass  # the terminal is gone (SIGHUP): the files are what counts
    return not all(ok for ok, _ in results)


def write_outputs(report: Report, wanted: Sequence[Output], quiet: bool = False) -> bool:
    """Writes the reports and says so on stderr. True if any write failed."""
    return say(write_reports(report, wanted), quiet=quiet)
