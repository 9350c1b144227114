"""Runs a user's script or module as ``__main__``, the way ``python script.py`` would."""

from __future__ import annotations

import builtins
import io
import os
import runpy
import sys
import threading
import traceback
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpuwatch.profile.fullgraph import _PACKAGE, fullgraph_refused
from gpuwatch.profile.interrupts import Terminated
from profilers.registry import is_own


@dataclass
class Target:
    """What to run: a script path, or a module name with ``module=True``."""

    name: str
    args: Sequence[str]
    module: bool = False

    @property
    def argv(self) -> list[str]:
        return [self.name, *self.args]

    @property
    def command(self) -> list[str]:
        """As the user typed it after ``gpuwatch profile``: ``["-m", "pkg.mod", ...]`` for a module."""
        return ["-m", self.name, *self.args] if self.module else self.argv


@dataclass
class Outcome:
    exit_code: int
    finished: bool
    """False when the script raised, was interrupted or exited early by an exception."""
    error: str | None = None
    """``ValueError: bad shape`` for an exception; None otherwise."""


class TargetError(Exception):
    """The target cannot be run (missing, unreadable, no such module). One line."""


def check_target(target: Target) -> None:
    """Fails early with a clear message (or the script's SyntaxError), before profiling starts."""
    if target.module:
        import importlib.util

        # NB: only the top-level package is looked up here: finding "pkg.mod" imports "pkg",
        # running its __init__ outside the profile (and outside the user's traceback if it
        # raises). The rest is found by runpy inside the run, as python -m does.
        top = target.name.split(".", 1)[0]
        if not top or not all(part.isidentifier() for part in target.name.split(".")):
            raise TargetError(f"not a module name: {target.name!r}")
        sys.path.insert(0, os.getcwd())  # as python -m does
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError) as exc:
            raise TargetError(f"module {target.name!r} not found ({exc})") from None
        finally:
            sys.path.remove(os.getcwd())
        if spec is None:
            raise TargetError(f"module {target.name!r} not found")
        return
    path = Path(target.name)
    if not path.exists():
        raise TargetError(f"script not found: {target.name}")
    if path.is_dir():
        raise TargetError(f"{target.name} is a directory, not a script")
    if not os.access(path, os.R_OK):
        raise TargetError(f"script not readable: {target.name} (permission denied)")
    if path.is_file():  # NB: not a pipe (`<(cat train.py)`): it can be read only once
        with io.open_code(str(path)) as f:
            compile(f.read(), os.path.abspath(path), "exec", dont_inherit=True)


def run_target(target: Target) -> Outcome:
    """Runs the target in this process with its own ``sys.argv`` and ``sys.path[0]``, then waits
    for the non-daemon threads it left running, as Python does before it exits.
    Its exceptions are printed the way Python prints them, without gpuwatch's frames; the exit
    code follows Python's rules (``SystemExit(n)`` keeps n, an exception gives 1, Ctrl-C 130,
    SIGTERM/SIGHUP 128 + the signal). ``sys.argv``, ``sys.path`` and ``__main__`` are restored
    whatever the script did to them."""
    outcome = _run_main(target)
    try:
        wait_for_threads()
    except KeyboardInterrupt:
        print("KeyboardInterrupt while waiting for the script's threads", file=sys.stderr)
        return Outcome(130, False, "KeyboardInterrupt")
    except Terminated as exc:
        return Outcome(exc.exit_code, False, f"stopped by {exc}")
    return outcome


def wait_for_threads() -> None:
    """Joins every non-daemon thread but this one and gpuwatch's own (``OwnThread``), as the interpreter
    does at exit (``threading._shutdown``): first the stdlib's thread-exit callbacks (they tell
    ``concurrent.futures`` pools to finish their queued work), then the threads, until none is
    left (a thread may start another)."""
    # NB: private but stable since Python 3.9. The callbacks stay registered (they are
    # idempotent, and the interpreter runs them again at its exit), and the pools' "interpreter
    # shutting down" flags they set are put back afterwards: the process goes on (it writes the
    # report; in a test or a notebook it lives on), and its own pools must keep working.
    callbacks = getattr(threading, "_threading_atexits", None)
    if isinstance(callbacks, list):
        for callback in list(callbacks):
            callback()
        _reopen_pools()
    me = threading.current_thread()
    while True:
        waiting = [
            t
            for t in threading.enumerate()
            if t is not me and not t.daemon and t.is_alive() and not is_own(t)
        ]
        if not waiting:
            return
        for t in waiting:
            t.join()


def _reopen_pools() -> None:
    """Clears the module-wide shutdown flags concurrent.futures' exit callbacks set."""
    for name, flag in (
        ("concurrent.futures.thread", "_shutdown"),
        ("concurrent.futures.process", "_global_shutdown"),
    ):
        module = sys.modules.get(name)
        if module is not None and getattr(module, flag, None) is True:
            setattr(module, flag, False)


@contextmanager
def importable_beside(target: Target) -> Iterator[None]:
    """While inside, the folder the target's imports will start from (the script's, or the
    working directory for ``-m``) is first on ``sys.path``: ``--input`` names a module beside
    the script (``data.Batches``), resolved as the profile starts, before the script runs."""
    folder = os.getcwd() if target.module else os.path.dirname(os.path.abspath(target.name))
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        if folder in sys.path:
            sys.path.remove(folder)


def _run_main(target: Target) -> Outcome:
    saved_argv = sys.argv[:]
    saved_path_list, saved_path = sys.path, sys.path[:]
    main_module = sys.modules.get("__main__")
    _KEPT.clear()  # NB: a run in this process before (a notebook's, a test's) is over
    try:
        try:
            if target.module:
                sys.argv = ["-m", *target.args]  # runpy puts the module's path in argv[0]
                sys.path.insert(0, os.getcwd())
                try:
                    try:
                        _KEPT.append(
                            runpy.run_module(target.name, run_name="__main__", alter_sys=True)
                        )
                    except BaseException as exc:  # sys.exit() at its end, an error
                        _keep_main_of(exc)
                        raise
                except ImportError as exc:
                    if not _is_the_target_missing(exc, target.name):
                        raise
                    print(f"gpuwatch: error: {exc}", file=sys.stderr)
                    return Outcome(1, False, f"ImportError: {exc}"[:500])
            else:
                script = os.path.abspath(target.name)
                sys.argv = [target.name, *target.args]
                sys.path[0] = os.path.dirname(script)
                _exec_script(script)
        finally:
            _reopen_closed_streams()  # the script closed sys.stderr: Python still exits well
        return Outcome(0, True)
    except Terminated as exc:
        return Outcome(exc.exit_code, False, f"stopped by {exc}")
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return Outcome(0, True)
        if isinstance(code, int):
            return Outcome(code, True)
        print(code, file=sys.stderr)
        return Outcome(1, True)
    except KeyboardInterrupt as raised:  # Ctrl-C: where the script was, as Python shows it
        _print_user_traceback(users_exception(raised), raised)
        return Outcome(130, False, "KeyboardInterrupt")
    except BaseException as raised:  # the script's own error: show it as Python would
        error = users_exception(raised)
        # NB: an error no op raised (the optimizer's device check) is explained from its
        # frames here, the last place that has them; loaded only where a profile runs.
        session = sys.modules.get("profilers.session")
        if session is not None:
            session.explain_escaped(error)
        refused = fullgraph_refused(error)
        if refused is not None:
            # NB: not the traceback: dynamo's message lists every frame it skipped (15 lines
            # and more), none of which the user can act on. What they can do is one option.
            print(refused, file=sys.stderr)
        else:
            _print_user_traceback(error, raised)
        return Outcome(1, False, f"{type(error).__name__}: {error}".splitlines()[0][:500])
    finally:
        sys.argv = saved_argv
        # NB: the whole list, and the list object itself: a script may clear or replace
        # sys.path, and gpuwatch still has reports to render after it.
        saved_path_list[:] = saved_path
        sys.path = saved_path_list
        if main_module is not None:
            sys.modules["__main__"] = main_module


def _is_the_target_missing(exc: ImportError, name: str) -> bool:
    """runpy's "No module named pkg.mod" for the target itself (not an import inside it)."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing is None and isinstance(exc.__cause__, ModuleNotFoundError):
        missing = exc.__cause__.name
    if missing is None:
        text = str(exc)
        return text.startswith("No module named") and repr(name) in text
    return missing == name or name.startswith(missing + ".")


def _exec_script(path: str) -> None:
    """Like ``python path``: a fresh ``__main__`` module, ``__file__`` absolute, ``argv[0]`` as
    typed (runpy.run_path would overwrite argv[0] with the path it is given)."""
    with io.open_code(path) as f:
        source = f.read()
    code = compile(source, path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__spec__ = None
    sys.modules["__main__"] = main
    _KEPT.append(main)
    exec(code, main.__dict__)


#: NB: the script's ``__main__`` (its globals, for ``-m``) lives until the process ends (or the
#: next run in it starts), as under plain python: dropped when the run ends, a global the script
#: holds (its model) would be freed before the report reads GPU memory "at end", or not, as
#: reference cycles decide.
_KEPT: list[object] = []


def _keep_main_of(exc: BaseException) -> None:
    """Keeps (:data:`_KEPT`) the globals of the ``__main__`` module whose run ``exc`` ended:
    ``runpy.run_module`` hands them back only when the module returns (NB: read off the
    module's frame in the traceback, the one place left that has them)."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            _KEPT.append(frame.f_globals)
            return
        tb = tb.tb_next


#: gpuwatch's and the profiler's own code: never part of the script's traceback.
_OURS = (_PACKAGE + os.sep, os.path.join(os.path.dirname(_PACKAGE), "profilers") + os.sep)


def _is_ours(filename: str) -> bool:
    return (
        filename.startswith(_OURS)
        or filename == runpy.__file__
        or filename.startswith("<frozen runpy")
    )


def _raised_in_ours(exc: BaseException) -> bool:
    frames = list(traceback.walk_tb(exc.__traceback__))
    return bool(frames) and _is_ours(frames[-1][0].f_code.co_filename)


def users_exception(exc: BaseException) -> BaseException:
    """The exception the script's code raised. When a handler of the profiler failed while
    handling it (a RecursionError leaves the profiler no stack either: its note of the error
    recurses again), that second error is the profiler's, not the script's: the first one is."""
    while (
        exc.__context__ is not None
        and not exc.__suppress_context__
        and _raised_in_ours(exc)
        and _raised_in_ours(exc.__context__)
    ):
        exc = exc.__context__
    return exc


def _users_frames(frames: traceback.StackSummary) -> list[traceback.FrameSummary]:
    """The ``frames`` of a traceback from the script's first frame down to where it entered
    gpuwatch's or the profiler's code (an op reaching the profiler's dispatch mode): those below
    are the profiler's machinery, which plain ``python`` would not have run."""
    start = 0
    while start < len(frames) and _is_ours(frames[start].filename):
        start += 1  # gpuwatch's and runpy's frames above the script's first
    stop = start
    while stop < len(frames) and not _is_ours(frames[stop].filename):
        stop += 1
    return list(frames[start:stop])


def _print_user_traceback(exc: BaseException, raised: BaseException | None = None) -> None:
    """Prints ``exc`` as Python would, without gpuwatch's or the profiler's frames; ``raised``
    is what reached gpuwatch when ``exc`` is an earlier error in its context (its frames down
    to the profiler are the script's frames of ``exc`` too)."""
    # NB: frames from TracebackException keep their column positions, so Python's carets
    # (^^^^ under the failing expression) show; StackSummary.extract(walk_tb(...)) drops them.
    shown = traceback.TracebackException.from_exception(exc)
    own = _users_frames(shown.stack)
    if raised is not None and raised is not exc:
        # NB: the earlier error's own traceback starts where the profiler caught it: the
        # script's frames are those of what was raised, down to the profiler.
        own = _users_frames(traceback.TracebackException.from_exception(raised).stack)
        shown.__context__ = None
    shown.stack = traceback.StackSummary.from_list(own)
    for chained in (shown.__cause__, shown.__context__):
        if chained is not None:
            chained.stack = traceback.StackSummary.from_list(
                [f for f in chained.stack if not _is_ours(f.filename)]
            )
    sys.stderr.write("".join(shown.format()))


def _reopen_closed_streams() -> None:
    """A script that closed ``sys.stdout`` or ``sys.stderr`` closed only its Python object (the
    file descriptor stays open, as Python leaves it): give gpuwatch's lines, and the
    interpreter's exit, a working one on the same descriptor, or on /dev/null without one."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is not None and not getattr(stream, "closed", False):
            continue
        try:
            os.fstat(fd)
            fresh = open(fd, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
        except OSError:
            fresh = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
        setattr(sys, name, fresh)
