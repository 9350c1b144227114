"""Current Python stack of another process, through ``py-spy dump``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
    """The text of ``py-spy dump --pid PID``.

    Raises:
        StackDumpError: the process is gone, is not Python, or py-spy lacks permission.
    """
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
    if (
        "no such file" in text
        or "no such process" in text
        or "check that the process is running" in text
    ):
        return f"process {pid} has exited"
    first = next((line.strip() for line in output.splitlines() if line.strip()), "unknown error")
    return f"py-spy failed on process {pid}: {first.removeprefix('Error: ')}"
