"""Current Python stack of another process, through ``py-spy dump``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil


class StackDumpError(RuntimeError):
    """py-spy could not read the stack; the message is one line, fit for a user."""


def find_py_spy() -> str | None:
    """py-spy from PATH, or beside this interpreter (a venv that was not activated)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else None


def dump_stack(pid: int, timeout_s: float = 15.0, native: bool = False) -> str:
    """The text of ``py-spy dump --pid PID``; StackDumpError when the process is gone, is not
    Python, or py-spy lacks permission."""
    exe = find_py_spy()
    if exe is None:
        raise StackDumpError("py-spy is not installed (pip install py-spy)")
    if not psutil.pid_exists(pid):
        raise StackDumpError(f"process {pid} has exited")
    cmd = [exe, "dump", "--pid", str(pid)]
    if native:
        cmd.append("--native")
    env = dict(os.environ, RUST_BACKTRACE="0")
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise StackDumpError(f"py-spy did not answer within {timeout_s:.0f} s") from exc
    if done.returncode == 0:
        return done.stdout
    raise StackDumpError(explain_failure(pid, done.stderr + done.stdout))


def explain_failure(pid: int, output: str) -> str:
    """One clear line from py-spy's error output."""
    text = output.lower()
    if "permission denied" in text or "operation not permitted" in text:
        return (
            f"py-spy has no permission to read process {pid}: run as root or as its owner, "
            "or allow ptrace (sysctl kernel.yama.ptrace_scope=0)"
        )
    if "failed to find python version" in text or "not a python" in text:
        return f"process {pid} is not a Python process (py-spy found no Python interpreter in it)"
    gone = ("no such file", "no such process", "check that the process is running")
    if any(s in text for s in gone):
        return f"process {pid} has exited"
    first = next((line.strip() for line in output.splitlines() if line.strip()), "unknown error")
    return f"py-spy failed on process {pid}: {first.removeprefix('Error: ')}"


def _own_files() -> tuple[str, ...]:
    """gpuwatch's and the profiler's source files, as package-relative paths (py-spy prints
    ``gpuwatch/profile/runner.py`` or a full path ending so)."""
    import gpuwatch

    root = Path(gpuwatch.__file__).resolve().parent.parent
    return tuple(
        str(p.relative_to(root))
        for package in ("gpuwatch", "profilers")
        for p in (root / package).rglob("*.py")
    )


def as_the_users(dump: str, command: str) -> str:
    """A ``py-spy dump`` of the ``--live`` child as the user expects it: their command on the
    ``Process`` line (not gpuwatch's child launcher), and neither gpuwatch's frames (the runner,
    the dispatch mode) nor its threads (named ``gpuwatch-*``) in the stacks."""
    own = _own_files()
    out: list[str] = []
    skipping_thread = False
    for line in dump.splitlines():
        if line.startswith("Process "):
            pid = line.split(":", 1)[0]
            out.append(f"{pid}: {command}")
            continue
        if line.startswith("Thread "):
            skipping_thread = '"gpuwatch' in line
            if not skipping_thread:
                out.append(line)
            continue
        if skipping_thread:
            continue
        frame = line.strip()
        if frame.endswith(")") and "(" in frame:
            where = frame.rsplit("(", 1)[1].rstrip(")").rsplit(":", 1)[0]
            if where.startswith("<frozen runpy") or where.endswith(own):
                continue
        out.append(line)
    return "\n".join(out) + ("\n" if dump.endswith("\n") else "")


def users_dumper(dumper: Callable[[int], str], command: str) -> Callable[[int], str]:
    """``dumper`` whose dumps read as the user's own (:func:`as_the_users`)."""
    return lambda pid: as_the_users(dumper(pid), command)
