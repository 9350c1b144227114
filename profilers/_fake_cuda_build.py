"""Builds and loads the C++ half of ``--fake-cuda`` (fake_cuda_guard.cpp): CUDA's device guard
and CUDA hooks for a CPU-only torch, compiled once per torch build with the system's compiler and
cached under ``~/.cache/gpuwatch/fake-cuda``."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch


class FakeCudaUnavailable(RuntimeError):
    """--fake-cuda cannot run here; the message is one line saying what is missing."""


_GUARD_SOURCE = Path(__file__).with_name("fake_cuda_guard.cpp")


# -- the device guard -----------------------------------------------------------------------------


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpuwatch" / "fake-cuda"


def _build_key() -> str:
    """The torch build and the guard's source: a new torch or a new guard means a new build."""
    h = hashlib.sha256()
    h.update(_GUARD_SOURCE.read_bytes())
    h.update(torch.__version__.encode())
    h.update(str(torch._C._GLIBCXX_USE_CXX11_ABI).encode())
    h.update(os.path.realpath(torch.__file__).encode())
    return h.hexdigest()[:16]


def guard_library(cache: Path | None = None) -> Path:
    """The compiled guard library for this torch, built on first use (about a second)."""
    cache = cache or _cache_dir()
    lib = cache / f"gpuwatch_fake_cuda_guard-{_build_key()}.so"
    if lib.exists():
        return lib
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        raise FakeCudaUnavailable(
            "--fake-cuda needs a C++ compiler once, to build its CUDA device guard for this "
            "torch: none found (install g++, or set CXX)"
        )
    torch_dir = Path(torch.__file__).parent
    include, libdir = torch_dir / "include", torch_dir / "lib"
    if not (include / "c10" / "core" / "impl" / "FakeGuardImpl.h").exists():
        raise FakeCudaUnavailable(
            f"--fake-cuda needs torch's C++ headers, which this torch does not ship ({include})"
        )
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
        os.close(fd)
    except OSError as exc:
        raise FakeCudaUnavailable(
            f"--fake-cuda cannot write its build cache {cache}: {exc.strerror or exc}"
        ) from None
    cmd = [
        compiler,
        "-O1",
        "-shared",
        "-fPIC",
        "-std=c++17",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-I{include}",
        str(_GUARD_SOURCE),
        f"-L{libdir}",
        "-ltorch_cpu",
        "-lc10",
        f"-Wl,-rpath,{libdir}",
        "-o",
        tmp,
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except OSError as exc:
        os.unlink(tmp)
        raise FakeCudaUnavailable(f"--fake-cuda could not run {compiler}: {exc}") from None
    if done.returncode != 0:
        os.unlink(tmp)
        first = next((ln for ln in done.stderr.splitlines() if "error" in ln), done.stderr[:200])
        raise FakeCudaUnavailable(
            f"--fake-cuda could not build its CUDA device guard with {compiler}: {first.strip()}"
        )
    os.replace(tmp, lib)
    return lib


_GUARD_LOCK = threading.Lock()
_GUARD: str | None = None
_LIB: Any = None


def install_guard() -> str:
    """Makes CUDA device guards work in this process, once: ``"fake"`` (c10's FakeGuardImpl,
    on a CPU-only torch) or ``"real"`` (a CUDA build that sees a GPU keeps its own guard).

    NB: autograd sizes its device threads at the first backward of the process; a guard
    installed after one cannot give CUDA tensors a device thread (run_profiled installs it
    before the script starts)."""
    global _GUARD, _LIB
    with _GUARD_LOCK:
        if _GUARD is None:
            _LIB = ctypes.CDLL(str(guard_library()))
            result = _LIB.gpuwatch_install_fake_cuda_guard()
            _GUARD = "real" if result == 2 else "fake"
        return _GUARD


@contextmanager
def cuda_hooks(devices: int) -> Iterator[None]:
    """ATen's CUDA hooks say CUDA is there while the block runs (a CPU-only torch)."""
    if _GUARD != "fake":
        yield
        return
    if not _LIB.gpuwatch_fake_cuda_hooks_on(devices):
        raise FakeCudaUnavailable(
            "--fake-cuda: this torch has CUDA hooks of its own but sees no GPU; use a CPU-only "
            "torch (pip install torch --index-url https://download.pytorch.org/whl/cpu)"
        )
    try:
        yield
    finally:
        _LIB.gpuwatch_fake_cuda_hooks_off()
