from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator

import pytest

from tests.helpers import default_signals

#: pytester runs a pytest session in this process (tests of gpuwatch's pytest plugin).
pytest_plugins = ["pytester"]


def _ours_on() -> set[str]:
    """What of ours is on in this process now: patches, switches and globals (the registry's
    list), a dispatch mode on this thread, the fast path's dispatch key on this thread."""
    import sys

    from profilers import registry

    on = set(registry.installed())
    if "torch" in sys.modules:  # NB: never imported here: the TUI's tests run without it
        import torch
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        on.update(f"dispatch mode: {type(m).__name__}" for m in _get_current_dispatch_mode_stack())
        key = getattr(torch._C.DispatchKey, "PreDispatch", None)
        if key is not None and torch._C._dispatch_tls_is_dispatch_key_included(key):
            on.add("dispatch key: PreDispatch included on this thread")
    return on


@pytest.fixture(autouse=True)
def nothing_of_ours_left_on() -> Iterator[None]:
    """After every test nothing of ours is left installed (profilers/registry.py's patches and
    globals, dispatch modes, the fast path's key) and no thread of ours is left running (given a
    few seconds to end). Only what the test added is blamed on it."""
    from profilers import registry

    before = _ours_on()
    threads_before = set(registry.own_threads_alive())
    yield
    left = _ours_on() - before
    deadline = time.monotonic() + 5.0
    running = [t for t in registry.own_threads_alive() if t not in threads_before]
    for t in running:
        t.join(max(0.0, deadline - time.monotonic()))
    running = [t.name for t in running if t.is_alive()]
    assert not left and not running, f"left on after the test: {sorted(left)}, threads {running}"


@pytest.fixture(params=["copies", "every_op"])
def both_paths(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test on both counting paths: ``profilers.profile()`` without kernel timing
    (the fast path: Python kernels for the counted ops only) and with every op counted (the
    dispatch mode). Counts of copies, syncs and collectives must not tell them apart."""
    import profilers

    real = profilers.profile

    def profile(**kw: object) -> profilers.Profile:
        if request.param == "copies":
            kw.setdefault("kernel_timing", False)
        else:
            kw.setdefault("count_ops", True)
        return real(**kw)  # type: ignore[arg-type]

    monkeypatch.setattr(profilers, "profile", profile)
    return str(request.param)


@pytest.fixture(params=["real", "placeholder"])
def both_values(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test with the fake GPU's tensors holding real values and holding placeholders
    (``--fake-values``): the copies, bytes, syncs and lines counted must not tell them apart."""
    from profilers.fake_cuda import harness

    monkeypatch.setattr(harness, "DEFAULT_VALUES", request.param)
    return str(request.param)


class FakeClock:
    """A monotonic clock that only moves when a test says so."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def wait_until(pred: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Yield to the app's event loop until ``pred()`` holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def plain(widget) -> str:
    """What a Static (or any widget) shows, as plain text."""
    import io

    from rich.console import Console

    content = getattr(widget, "content", None)
    if content is None or isinstance(content, str) and not content:
        content = widget.render()
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(content)
    return out.getvalue()


def screen_lines(app) -> list[str]:
    """What the terminal shows, line by line, as plain text (NB: Textual's compositor is private;
    this is what its screenshots are made from)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def read_pty(fd: int) -> bytes:
    """What a pseudo-terminal has for us within 0.1 s (b"" when nothing, or when it closed)."""
    import os
    import select

    ready, _, _ = select.select([fd], [], [], 0.1)
    if not ready:
        return b""
    try:
        return os.read(fd, 65536)
    except OSError:
        return b""


def start_in_pty(
    args: list[str], cwd: object, rows: int = 30, cols: int = 100
) -> tuple[object, int]:
    """``args`` on a new pseudo-terminal of ``rows`` x ``cols`` (its own session, default signal
    dispositions); returns the process and the terminal's master end, to read with read_pty."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "TERM": "xterm-256color"},
        start_new_session=True,
        preexec_fn=default_signals,
    )
    os.close(slave)
    return proc, master


#: Why the fake GPU cannot run here (no compiler), or None when it can.
FAKE_CUDA_MISSING: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    # NB: autograd sizes its device threads at the first backward of the process, so the fake
    # GPU's device guard goes in before any test runs one (see profilers/fake_cuda/harness.py).
    global FAKE_CUDA_MISSING
    _start_prometheus(config)
    _watch_processes_and_the_fake_gpu()
    try:
        from profilers.fake_cuda.harness import FakeCudaUnavailable, install_guard
    except ImportError as exc:  # pragma: no cover - torch missing
        FAKE_CUDA_MISSING = f"torch unavailable: {exc}"
        return
    try:
        install_guard()
    except FakeCudaUnavailable as exc:
        # NB: only a missing component (no C++ compiler) skips the fake GPU's tests. A guard that
        # fails to build where a compiler is there is gpuwatch's failure on this torch (as on
        # 2.14 with C++17): skipping would make a torch matrix green while testing none of them.
        import shutil

        has_compiler = any(shutil.which(c) for c in (os.environ.get("CXX", ""), "c++", "g++") if c)
        if has_compiler or os.environ.get("GPUWATCH_REQUIRE_FAKE_CUDA"):
            raise pytest.UsageError(f"--fake-cuda cannot start on this torch: {exc}") from None
        FAKE_CUDA_MISSING = str(exc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skips the ``alone`` measurements beside another xdist worker."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or "1")
    for item in items:
        if workers > 1 and item.get_closest_marker("alone") is not None:
            item.add_marker(
                pytest.mark.skip(
                    reason="a measurement that needs the machine to itself: beside another "
                    "worker it measures the other worker too (run: python -m pytest -m alone)"
                )
            )


# -- the markers say what a test does ------------------------------------------------------------
#
# ``slow`` (the tests that start processes: ``-m "not slow"`` is the fast tier) and ``fake_cuda``
# (the tests that use the fake GPU: .ci/run runs them again on the CUDA build of torch) are set
# by hand on each test or module. While a test sets up and runs, every process started in this
# process (subprocess, asyncio, a pty's child, a fork) and every entry into the fake GPU is noted;
# a test that did either without its marker fails, naming what it did.

#: What the running test did (None between tests): ("process", argv) and ("fake_cuda", how).
_DID: list[tuple[str, str]] | None = None


def _note(kind: str, what: str) -> None:
    if _DID is not None:
        _DID.append((kind, what))


def _watch_processes_and_the_fake_gpu() -> None:
    """Wraps, for the session, what every process start and the fake GPU's entry go through."""
    import subprocess

    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def _execute_child(self: subprocess.Popen[bytes], args: object, *rest: object, **kw: object):
        argv = [args] if isinstance(args, str | bytes) else list(args)  # type: ignore[call-overload]
        _note("process", " ".join(str(a) for a in argv)[:200])
        if any(str(a) in ("--fake-cuda", "--fake-cuda=1") for a in argv):
            _note("fake_cuda", "a process run with --fake-cuda")
        return execute_child(self, args, *rest, **kw)

    subprocess.Popen._execute_child = _execute_child  # type: ignore[attr-defined]
    fork = os.fork

    def _fork() -> int:
        _note("process", "os.fork()")
        return fork()

    os.fork = _fork
    try:
        from profilers.fake_cuda.harness import FakeCuda
    except ImportError:  # pragma: no cover - torch missing
        return
    enter = FakeCuda.__enter__

    def _enter(self: FakeCuda) -> FakeCuda:
        _note("fake_cuda", "profilers.fake_cuda entered")
        return enter(self)

    FakeCuda.__enter__ = _enter  # type: ignore[method-assign]


def _check_markers(item: pytest.Item, did: list[tuple[str, str]]) -> None:
    problems = []
    processes = [what for kind, what in did if kind == "process"]
    if processes and item.get_closest_marker("slow") is None:
        problems.append(f"it starts a process ({processes[0]}) but is not marked slow")
    fake = [what for kind, what in did if kind == "fake_cuda"]
    if fake and item.get_closest_marker("fake_cuda") is None:
        problems.append(f"it uses the fake GPU ({fake[0]}) but is not marked fake_cuda")
    if problems:
        raise AssertionError(
            "; ".join(problems) + " (pytestmark = pytest.mark.X in its module, or @pytest.mark.X)"
        )


_DID_KEY = pytest.StashKey[list[tuple[str, str]]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):  # type: ignore[no-untyped-def]
    global _DID
    _DID = []
    item.stash[_DID_KEY] = _DID
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    global _DID
    try:
        result = yield
    finally:
        did = item.stash.get(_DID_KEY, [])
        _DID = None
    _check_markers(item, did)
    return result


class _Prometheus:
    """``gpuwatch export --demo`` and a real Prometheus server scraping it, for the session."""

    def __init__(self, tmp: str) -> None:
        import socket
        import subprocess
        import sys

        def free_port() -> int:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                return int(s.getsockname()[1])

        self.exporter_port, self.port = free_port(), free_port()
        exporter_port = self.exporter_port
        self.exporter = subprocess.Popen(
            [sys.executable, "-m", "gpuwatch", "export", "--demo", "--address", "127.0.0.1",
             "--port", str(exporter_port), "--interval", "0.5", "--process-jobs"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        with open(f"{tmp}/prometheus.yml", "w") as f:
            f.write(
                "global:\n  scrape_interval: 250ms\nscrape_configs:\n  - job_name: gpuwatch\n"
                f"    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n"
            )
        self.server = subprocess.Popen(
            ["prometheus", f"--config.file={tmp}/prometheus.yml",
             f"--storage.tsdb.path={tmp}/data", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp,
        )  # fmt: skip

    def stop(self) -> None:
        self.server.kill()
        self.exporter.terminate()
        self.server.wait(10)
        self.exporter.wait(10)


#: The session's Prometheus (tests/test_export.py), or None where Debian's prometheus is missing.
PROMETHEUS: _Prometheus | None = None
_PROMETHEUS_DIR = None


def _start_prometheus(config: pytest.Config) -> None:
    import shutil
    import tempfile

    global PROMETHEUS, _PROMETHEUS_DIR
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # pytest-xdist's controller runs no test; its workers start their own
    if "not slow" in (config.getoption("markexpr", "") or ""):
        return  # its tests are slow ones
    if shutil.which("prometheus") is None or not any(
        "test_export" in str(a) or str(a).rstrip("/").endswith("tests") or a == "."
        for a in (config.args or ["tests"])
    ):
        return
    _PROMETHEUS_DIR = tempfile.TemporaryDirectory(prefix="gpuwatch-prometheus-")
    PROMETHEUS = _Prometheus(_PROMETHEUS_DIR.name)


def pytest_unconfigure(config: pytest.Config) -> None:
    if PROMETHEUS is not None:
        PROMETHEUS.stop()
    if _PROMETHEUS_DIR is not None:
        _PROMETHEUS_DIR.cleanup()
