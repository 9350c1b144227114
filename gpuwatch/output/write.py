"""Every report file gpuwatch writes: paths checked before the run (:func:`check_outputs`: one
line and exit 2), files written whole or not at all (rendered first, then a temporary file
renamed over the target), never over the user's own files.

NB: paths are made absolute when an :class:`Output` is made, so a script that changes directory
(Hydra does) cannot move the reports. What is not a plain file (a device, a FIFO, /dev/stdout) is
written through, as ``echo > PATH`` would; a symlink stays a symlink, its target replaced.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gpuwatch.errors import CliError
from gpuwatch.output.renderers import endings
from profilers.text import write_text_atomic

if TYPE_CHECKING:
    from gpuwatch.analysis.findings import Findings
    from profilers.report import Report


@dataclass(frozen=True)
class Output:
    """One file the user asked for: ``kind`` is ``"json"``, ``"html"`` or ``"trace"``."""

    kind: str
    path: str
    """As the user gave it (what messages say)."""
    where: str = field(default="", compare=False)
    """The absolute path, fixed when the Output is made (before the script can chdir)."""

    def __post_init__(self) -> None:
        if not self.where and self.path:
            object.__setattr__(self, "where", os.path.abspath(self.path))


def outputs(
    json_path: str | None, html_path: str | None, trace_path: str | None = None
) -> list[Output]:
    """The outputs asked for, in a fixed order (an empty string counts: it is refused later)."""
    asked = (("json", json_path), ("html", html_path), ("trace", trace_path))
    return [Output(k, p) for k, p in asked if p is not None]


#: ``-o PATH``: the kind of report each file ending asks for (longest ending first): the
#: renderers' own (gpuwatch/output/renderers.py).
ENDINGS = endings()


def output_for(path: str, trace: bool = True) -> Output:
    """The output ``-o PATH`` asks for, by the file's ending; :class:`CliError` for others
    (naming only the kinds the command writes: ``trace=False`` for one with no trace)."""
    lower = path.lower()
    for ending, kind in ENDINGS:
        if lower.endswith(ending):
            return Output(kind, path)
    endings, options = (
        (".json, .html or .trace.json", "--json, --html, --trace")
        if trace
        else (".json or .html", "--json, --html")
    )
    raise CliError(
        f"-o {path}: the file name says no report kind; end it in {endings} (or use {options})"
    )


def for_rank(out: Output, rank: int) -> Output:
    """Rank ``rank``'s own file for ``out``: ``{rank}`` in the path replaced, else ``.rankN``
    before the ending (``r.json`` -> ``r.rank1.json``, ``t.trace.json`` -> ``t.rank1.trace.json``)."""
    return Output(out.kind, _ranked(out.path, rank), _ranked(out.where, rank))


def _ranked(path: str, rank: int) -> str:
    if "{rank}" in path:
        return path.replace("{rank}", str(rank))
    lower = path.lower()
    for ending, _ in ENDINGS:
        if lower.endswith(ending):
            cut = len(path) - len(ending)
            return f"{path[:cut]}.rank{rank}{path[cut:]}"
    return f"{path}.rank{rank}"


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
            if _same_file(out.where, path):
                raise CliError(
                    f"refusing to write the {out.kind.upper()} report to {out.path}: it is "
                    f"{path}, an input of this run, and would be overwritten"
                )
        through = streams_through(out.where)
        for other in wanted[:i]:
            # NB: /dev/null (or /dev/stdout) for two reports is fine: nothing is replaced.
            if other.path and not through and _same_file(out.where, other.where):
                if other.kind == out.kind:  # NB: -o x.json -o x.json, or -o and --json
                    raise CliError(
                        f"{out.path} is given twice for the {out.kind.upper()} report "
                        f"(-o or --{out.kind}): give it once"
                    )
                raise CliError(
                    f"{out.path} is given twice (--{other.kind} and --{out.kind}); "
                    "each report needs its own file"
                )
        check_writable(out.where, out.path)


def check_writable(path: str, shown: str) -> None:
    """Raises :class:`CliError` when ``path`` cannot be written, before a long run is wasted
    (``shown``: the path as the user gave it, for the message)."""
    p = Path(path)
    if p.is_dir():
        raise CliError(f"cannot write the report to {shown}: it is a directory")
    if streams_through(path):  # a device, a FIFO, /dev/stdout: written through, never replaced
        if not os.access(path, os.W_OK):
            raise CliError(f"cannot write the report to {shown}: permission denied")
        return
    p = Path(os.path.realpath(path))  # a symlink's target is what gets replaced
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        # the folder as the user typed it, unless a symlink led somewhere else
        typed = os.path.dirname(shown) or "."
        missing = typed if os.path.realpath(typed) == str(parent) else str(parent)
        raise CliError(f"cannot write the report to {shown}: no directory {missing}")
    if p.exists() and not os.access(p, os.W_OK):
        raise CliError(f"cannot write the report to {shown}: permission denied")
    # NB: os.access says yes to root for any folder, /proc included; creating a file is the
    # only honest test, and it is what the atomic write will do.
    probe = parent / f".{p.name}.gpuwatch-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise CliError(
            f"cannot write the report to {shown}: {exc.strerror or exc} in {parent}"
        ) from None
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass  # a folder that lets us create but not remove: the write itself will say more


#: Folders whose entries are the process's streams and devices, never files to replace
#: (``/dev/stdout`` -> ``/proc/self/fd/1`` -> the file the shell opened). /dev/shm holds files.
_STREAM_FOLDERS = ("/dev/", "/proc/")
#: Seconds a FIFO nobody reads is waited for before the write fails.
FIFO_WAIT_S = 10.0


def _hops(path: str) -> list[str]:
    """``path`` and each symlink it leads through, one hop at a time (at most 40, as Linux)."""
    hops = [os.path.abspath(path)]
    for _ in range(40):
        try:
            link = os.readlink(hops[-1])
        except OSError:
            break  # not a link (or missing): the chain ends here
        hops.append(os.path.abspath(os.path.join(os.path.dirname(hops[-1]), link)))
    return hops


def streams_through(path: str) -> bool:
    """True when ``path`` must be written through, not replaced: not a regular file (a device, a
    FIFO, a socket), or reached through /dev or /proc (/dev/stdout redirected to a file)."""
    try:
        st = os.stat(path)
    except OSError:
        return False  # nothing there yet: a new file
    if not stat.S_ISREG(st.st_mode):
        return True
    return any(
        hop.startswith(_STREAM_FOLDERS) and not hop.startswith("/dev/shm/") for hop in _hops(path)
    )


def write_file(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` through a device, FIFO or stream (:func:`streams_through`), else
    atomically (a symlink's target replaced, the link kept). Raises OSError."""
    if not streams_through(path):
        write_text_atomic(os.path.realpath(path), text)
        return
    data = text.encode("utf-8", "backslashreplace")
    is_fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    regular = stat.S_ISREG(os.stat(path).st_mode)
    # NB: a file reached through /dev/stdout is the shell's redirection: appended to, after
    # what the script printed there, never truncated.
    flags = os.O_WRONLY | (os.O_APPEND if regular else 0) | (os.O_NONBLOCK if is_fifo else 0)
    deadline = time.monotonic() + FIFO_WAIT_S
    while True:
        try:
            fd = os.open(path, flags)
            break
        except OSError as exc:
            # A FIFO nobody has opened for reading yet: wait a while for its reader.
            if exc.errno != errno.ENXIO or not is_fifo or time.monotonic() > deadline:
                if exc.errno == errno.ENXIO and is_fifo:
                    raise OSError(exc.errno, "no process is reading the FIFO") from None
                raise
            time.sleep(0.05)
    try:
        if is_fifo:
            os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def write_reports(
    report: Report, wanted: Sequence[Output], findings: Findings | Exception | None = None
) -> list[tuple[bool, str]]:
    """Writes each output of ``report`` and its ``findings`` (the analysis, or how it failed:
    see :class:`~gpuwatch.output.renderers.Run`) by :func:`write_document`."""
    from gpuwatch.output.renderers import Run

    return write_document("profile", Run(report, findings), wanted)


def write_document(document: str, data: object, wanted: Sequence[Output]) -> list[tuple[bool, str]]:
    """Writes each output whole or not at all by ``document``'s renderer of its kind; ``(ok,
    message)`` for each. A failing renderer or write costs its own file only, never the others."""
    from gpuwatch.output.renderers import renderer

    results: list[tuple[bool, str]] = []
    for out in wanted:
        try:
            text = renderer(document, out.kind).render(data)
        except Exception as exc:  # a renderer bug must not cost the other reports
            results.append((False, f"could not render {out.path}: {type(exc).__name__}: {exc}"))
            continue
        try:
            write_file(out.where, text)
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
