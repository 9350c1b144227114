"""Builds and loads the C++ half of ``--fake-cuda`` (guard.cpp): CUDA's device guard
and CUDA hooks for fake GPUs, on a CPU-only torch and on a CUDA build (with or without real GPUs),
compiled once per torch build with the system's compiler and cached under
``~/.cache/gpuwatch/fake-cuda``."""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from profilers.errors import FakeCudaUnavailable as FakeCudaUnavailable

_GUARD_SOURCE = Path(__file__).with_name("guard.cpp")


# -- the device guard -----------------------------------------------------------------------------


def _build_key() -> str:
    """The torch build and the guard's source: a new torch or a new guard means a new build."""
    torch_build = (
        f"{torch.__version__}{torch._C._GLIBCXX_USE_CXX11_ABI}{os.path.realpath(torch.__file__)}"
    )
    return hashlib.sha256(_GUARD_SOURCE.read_bytes() + torch_build.encode()).hexdigest()[:16]


_STANDARDS = {201703: "c++17", 202002: "c++20", 202302: "c++23"}


def cxx_standard(include: Path) -> str:
    """The C++ standard torch's headers ask for: the newest ``__cplusplus`` their entry header
    requires (torch 2.9-2.13: C++17, 2.14 on: C++20), so the guard builds as torch's own
    extensions do; C++17 where the header says nothing.

    NB: torch/csrc/api/include/torch/all.h opens with ``#error C++NN or later ... is required``
    under ``__cplusplus < NNNNNNL``; 2.14's c10/util/intrusive_ptr.h uses std::strong_ordering."""
    needed = 201703
    try:
        text = (include / "torch" / "csrc" / "api" / "include" / "torch" / "all.h").read_text()
    except OSError:
        return _STANDARDS[needed]
    for found in re.findall(r"__cplusplus\s*<\s*(\d{6})L", text):
        if int(found) in _STANDARDS:
            needed = max(needed, int(found))
    return _STANDARDS[needed]


def guard_library(cache: Path | None = None) -> Path:
    """The compiled guard library for this torch, built on first use (about a second)."""
    if cache is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        cache = Path(base) / "gpuwatch" / "fake-cuda"
    lib = cache / f"gpuwatch_fake_cuda_guard-{_build_key()}.so"
    if lib.exists():
        return lib
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        raise FakeCudaUnavailable(
            "needs a C++ compiler once, to build its CUDA device guard for this "
            "torch: none found (install g++, or set CXX)"
        )
    torch_dir = Path(torch.__file__).parent
    include, libdir = torch_dir / "include", torch_dir / "lib"
    if not (include / "c10" / "core" / "impl" / "FakeGuardImpl.h").exists():
        raise FakeCudaUnavailable(
            f"needs torch's C++ headers, which this torch does not ship ({include})"
        )
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
        os.close(fd)
    except OSError as exc:
        raise FakeCudaUnavailable(
            f"cannot write its build cache {cache}: {exc.strerror or exc}"
        ) from None
    cmd = [
        compiler,
        "-O1",
        "-shared",
        "-fPIC",
        f"-std={cxx_standard(include)}",
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
        raise FakeCudaUnavailable(f"could not run {compiler}: {exc}") from None
    if done.returncode != 0:
        os.unlink(tmp)
        first = next((ln for ln in done.stderr.splitlines() if "error" in ln), done.stderr[:200])
        raise FakeCudaUnavailable(
            f"could not build its CUDA device guard with {compiler}: {first.strip()}"
        )
    os.replace(tmp, lib)
    return lib


_GUARD_LOCK = threading.Lock()
_GUARD: str | None = None
_LIB: Any = None
_HOOKS_DEPTH = 0
"""How many ``cuda_hooks`` blocks are open (the hooks are swapped while it is above 0)."""


def install_guard() -> str:
    """Makes CUDA device guards work in this process, once: ``"fake"`` (c10's FakeGuardImpl,
    for good, on a CPU-only torch or a CUDA build that sees no GPU) or ``"real"`` (a CUDA build
    that sees GPUs keeps its own guard, lent to the fake one only while a harness is on).

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
    """ATen's CUDA hooks (and, where real GPUs are seen, CUDA's device guard) say there are
    ``devices`` fake GPUs while the block runs; what was there before is given back after.

    On a CPU-only torch the hooks are a bare interface, rebuilt in place; on a CUDA build they
    are torch's own ``CUDAHooks``, which ask the CUDA runtime (and with no GPU fail with "no
    NVIDIA driver"): their vtable is swapped for the fake one's and back (guard.cpp)."""
    global _HOOKS_DEPTH
    if _GUARD is None:
        install_guard()
    lend_guard = _GUARD == "real"
    with _GUARD_LOCK:
        # NB: only the outermost block swaps; an inner one (a check inside a run) must not
        # give the hooks back while the outer harness still needs them.
        _HOOKS_DEPTH += 1
        if _HOOKS_DEPTH == 1:
            if lend_guard:
                _LIB.gpuwatch_fake_cuda_guard_on()
            _LIB.gpuwatch_fake_cuda_hooks_on(devices)
    try:
        yield
    finally:
        with _GUARD_LOCK:
            _HOOKS_DEPTH -= 1
            if _HOOKS_DEPTH == 0:
                _LIB.gpuwatch_fake_cuda_hooks_off()
                if lend_guard:
                    _LIB.gpuwatch_fake_cuda_guard_off()


def check_fake_cuda(devices: int = 1) -> None:
    """Builds, loads and tries the C++ half (hooks on and off) before a run, so that what stops
    ``--fake-cuda`` here is a :class:`FakeCudaUnavailable` before the script starts."""
    try:
        install_guard()
        with cuda_hooks(devices):
            pass
    except OSError as exc:  # the library would not load (a stale or foreign build)
        raise FakeCudaUnavailable(f"could not load its CUDA device guard: {exc}") from None
