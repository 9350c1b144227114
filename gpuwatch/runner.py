"""Runs a user's script or module as ``__main__``, the way ``python script.py`` would."""

from __future__ import annotations

import builtins
import io
import os
import runpy
import sys
import traceback
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType


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
    """Fails early with a clear message, before any profiling starts."""
    if target.module:
        import importlib.util

        sys.path.insert(0, os.getcwd())  # as python -m does
        try:
            spec = importlib.util.find_spec(target.name)
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


_FULLGRAPH_REFUSED = "torch dispatch mode present"
"""In the error torch.compile(fullgraph=True) raises when a dispatch mode is active."""


def run_target(target: Target) -> Outcome:
    """Runs the target in this process with its own ``sys.argv`` and ``sys.path[0]``.

    Its exceptions are printed the way Python prints them, without gpuwatch's frames; the exit
    code follows Python's rules (``SystemExit(n)`` keeps n, an exception gives 1, Ctrl-C 130).
    """
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    main_module = sys.modules.get("__main__")
    try:
        if target.module:
            sys.argv = ["-m", *target.args]  # runpy puts the module's path in argv[0]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target.name, run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(target.name)
            sys.argv = [target.name, *target.args]
            sys.path[0] = os.path.dirname(script)
            _exec_script(script)
        return Outcome(0, True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return Outcome(0, True)
        if isinstance(code, int):
            return Outcome(code, True)
        print(code, file=sys.stderr)
        return Outcome(1, True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", file=sys.stderr)
        return Outcome(130, False, "KeyboardInterrupt")
    except BaseException as exc:  # the script's own error: show it as Python would
        _print_user_traceback(exc)
        if _FULLGRAPH_REFUSED in str(exc):
            print(
                "gpuwatch: torch.compile(fullgraph=True) refuses to run under any dispatch mode, "
                "the profiler's included; profile with fullgraph=False (compiled code then runs "
                "eagerly and is counted)",
                file=sys.stderr,
            )
        return Outcome(1, False, f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
    finally:
        sys.argv = saved_argv
        if target.module:
            if sys.path and sys.path[0] == os.getcwd():
                del sys.path[0]
        elif saved_path0 is not None:
            sys.path[0] = saved_path0
        if main_module is not None:
            sys.modules["__main__"] = main_module


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
    exec(code, main.__dict__)


def _print_user_traceback(exc: BaseException) -> None:
    tb: TracebackType | None = exc.__traceback__
    # Drop the frames of gpuwatch and runpy above the script's first frame.
    here = os.path.dirname(os.path.abspath(__file__))
    while tb is not None and (
        tb.tb_frame.f_code.co_filename.startswith(here)
        or tb.tb_frame.f_code.co_filename == runpy.__file__
        or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")
    ):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)
