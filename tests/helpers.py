"""Shared by the tests that run gpuwatch as a user does: the subprocess runner, the same command
run in this process, and the ``--live`` app against a real child."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: ``python -m gpuwatch``: the module entry point (the console script ``gpuwatch`` is the other).
GPUWATCH = [sys.executable, "-m", "gpuwatch"]

#: The variables a launcher sets for each rank: a run of ours must not inherit them.
RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def default_signals() -> None:
    """``preexec_fn`` for a child that must see SIGINT, SIGTERM and SIGHUP at their defaults,
    however the suite was started (a background job of a non-interactive shell hands every
    child SIGINT ignored)."""
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def run(
    args: list[str],
    cwd: Path | str | None = None,
    timeout: float = 180,
    env: Mapping[str, str | None] | None = None,
    **kw: Any,
) -> subprocess.CompletedProcess[str]:
    """``args`` in a process of its own, its output captured (never raises on a non-zero exit),
    with no rank variables and default signal dispositions. ``env`` adds to (or, with a None
    value, removes from) this process's environment."""
    full = dict(os.environ)
    for var in RANK_VARS:
        full.pop(var, None)
    for key, value in (env or {}).items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    kw.setdefault("preexec_fn", default_signals)
    return subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full, check=False, **kw
    )


def run_gpuwatch(args: list[str], cwd: Path | str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m gpuwatch ARGS`` in ``cwd``, in a process of its own, 200 columns wide."""
    return run([*GPUWATCH, *args], cwd, env={"COLUMNS": "200", **env})


@contextmanager
def captured() -> Iterator[list[str]]:
    """Everything written to stdout and stderr in the block, at the descriptor level (the
    script's print, gpuwatch's lines, and what C code writes), whatever pytest captures: the
    list yielded holds both texts once the block is left."""
    texts: list[str] = []
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved_fds = os.dup(1), os.dup(2)
        saved_streams = sys.stdout, sys.stderr
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        try:
            yield texts
        finally:
            for stream in (sys.stdout, sys.stderr):
                if not stream.closed:
                    stream.flush()
            sys.stdout, sys.stderr = saved_streams
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            os.close(saved_fds[0])
            os.close(saved_fds[1])
            for f in (out, err):
                f.seek(0)
                texts.append(f.read().decode(errors="backslashreplace"))


def gpuwatch_here(
    args: list[str], cwd: Path | str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``gpuwatch ARGS`` run by the CLI's ``main()`` in this process, as ``run_gpuwatch`` would
    in a process of its own: the same exit code, stdout and stderr (torch is imported here
    already: seconds less than a subprocess). For runs that end in no ``os._exit``, no signal
    and no process of their own. Usable from fixtures of any scope."""
    from gpuwatch.cli.main import main

    saved_env = {k: os.environ.get(k) for k in ("COLUMNS", *RANK_VARS, *(env or {}))}
    saved_cwd = os.getcwd()
    os.environ["COLUMNS"] = "200"
    for var in RANK_VARS:
        os.environ.pop(var, None)
    os.environ.update(env or {})
    os.chdir(cwd)
    try:
        with captured() as texts:
            code = main(list(args))
    finally:
        os.chdir(saved_cwd)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(["gpuwatch", *args], code, *texts)


def script_here(path: Path, args: list[str], cwd: Path | str) -> subprocess.CompletedProcess[str]:
    """``python PATH ARGS`` run in this process (``runpy``, as ``__main__``, its folder first on
    ``sys.path``), its output captured as a process's would be; it must exit 0. torch's global
    random state and the modules the script imported from its folder are put back after it."""
    import runpy

    import torch

    folder = str(path.parent)
    saved_argv, saved_path, saved_cwd = sys.argv[:], sys.path[:], os.getcwd()
    before = set(sys.modules)
    sys.argv = [str(path), *args]
    sys.path.insert(0, folder)
    os.chdir(cwd)
    try:
        with torch.random.fork_rng(devices=[]), captured() as texts:
            try:
                runpy.run_path(str(path), run_name="__main__")
            except SystemExit as exc:
                assert exc.code in (None, 0), f"{path.name} exited {exc.code}"
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        for name in set(sys.modules) - before:
            if (getattr(sys.modules[name], "__file__", None) or "").startswith(folder):
                del sys.modules[name]
    return subprocess.CompletedProcess([str(path), *args], 0, *texts)


def refuses_fullgraph_under_a_mode() -> bool:
    """Whether this torch raises for fullgraph=True under a dispatch mode (2.13 and 2.15 do;
    2.9 runs the function eager, silently: then gpuwatch's report says it ran eager)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Plain(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    torch._dynamo.reset()
    f = torch.compile(lambda x: x + 1, backend="eager", fullgraph=True)
    try:
        with Plain():
            f(torch.ones(1))
    except RuntimeError:
        return True
    return False
