"""``--fake-cuda``: an unmodified CUDA script on a CPU-only machine, every copy and sync counted.

How it holds together:

* **The device guard.** c10 ships ``FakeGuardImpl``; a few lines of C++ (``fake_cuda_guard.cpp``,
  compiled once per torch build and loaded with ctypes) register it as CUDA's device guard. With
  it, autograd starts a device thread per fake GPU, so ``loss.backward()`` runs on autograd's
  device threads as it does on a GPU, and device guards on ``cuda`` work.
* **GPU tensors are fake, host tensors are real.** :class:`FakeCudaMode` (a dispatch mode at the
  bottom of every thread's mode stack, under the profiler's) sends every op that touches a GPU
  tensor or makes one to a ``FakeTensorMode`` (shapes, dtypes and devices, no data, no memory),
  and runs everything else for real: data loading, numpy, host-side logic behave as without us.
* **Values that come back to the host are placeholders.** ``.item()``, ``float(t)``, ``bool(t)``
  give 0 / 0.0 / False; ``.cpu()`` and ``.tolist()`` give zeros; an op whose output size depends on
  GPU values (``nonzero``, ``t[mask]``, ``masked_select``, ``unique``) keeps every element (the
  largest size it could have). Control flow that depends on GPU values follows the placeholders;
  :attr:`FakeCuda.placeholders` counts them and the report says so.
* **``torch.cuda``** says what a machine with ``devices`` GPUs says (``is_available()``,
  ``device_count()``, ``current_device()``, ``set_device()``, ``get_device_name()``,
  ``synchronize()``, events and streams); pinned host memory is remembered per allocation, so
  ``pin_memory()``, ``DataLoader(pin_memory=True)`` and ``non_blocking`` copies classify as on a
  GPU.

Nothing here decides what is a copy or a sync: the profiler's own rules (``_ops.py``) see the
same ops with the same devices as on a GPU.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

from profilers._patches import lift_on_the_host
from profilers._torch_private import THREAD_BOOTSTRAP

DEVICE_NAME = "gpuwatch fake CUDA device"
MAX_DEVICES = 8
"""c10's FakeGuardImpl has eight devices."""

_GUARD_SOURCE = Path(__file__).with_name("fake_cuda_guard.cpp")
_aten = torch.ops.aten


class FakeCudaUnavailable(RuntimeError):
    """--fake-cuda cannot run here; the message is one line saying what is missing."""


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
def _cuda_hooks(devices: int) -> Iterator[None]:
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


# -- placeholders and pinned memory ---------------------------------------------------------------


@dataclass
class Placeholders:
    """What the script got back from the fake GPU that was not a real value."""

    values: int = 0
    """Scalars read on the host (``.item()``, ``float(t)``, ``bool(t)``, ``if t:``)."""
    host_copies: int = 0
    """Tensors copied to the host (``.cpu()``, ``.tolist()``, ``.numpy()`` after them): zeros."""
    sizes: int = 0
    """Outputs whose size depends on GPU values (``nonzero``, ``t[mask]``, ``unique``): every
    element kept."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def note(self, kind: str) -> None:
        with self._lock:
            setattr(self, kind, getattr(self, kind) + 1)

    def to_dict(self) -> dict[str, int]:
        return {"values": self.values, "host_copies": self.host_copies, "sizes": self.sizes}


class PinnedMemory:
    """Host allocations made pinned (``pin_memory()``, ``pin_memory=True``, a non_blocking copy
    to the host), by storage address; a freed allocation stops counting."""

    def __init__(self) -> None:
        self._by_ptr: dict[int, weakref.ref[Any]] = {}
        self._lock = threading.Lock()

    def add(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        with self._lock:
            self._by_ptr[ptr] = weakref.ref(storage, functools.partial(self._drop, ptr))
        return t

    def _drop(self, ptr: int, ref: weakref.ref[Any]) -> None:
        with self._lock:
            if self._by_ptr.get(ptr) is ref:
                del self._by_ptr[ptr]

    def __contains__(self, t: torch.Tensor) -> bool:
        try:
            ptr = t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            return False
        ref = self._by_ptr.get(ptr)
        return ref is not None and ref() is not None


# -- the mode -------------------------------------------------------------------------------------


def _is_cuda(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return False


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[Any]:
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a
    yield from kwargs.values()


Handler = Callable[["FakeCudaMode", Any, tuple[Any, ...], dict[str, Any]], Any]
_HANDLERS: dict[Any, Handler] = {}


def _handles(*ops: Any) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for op in ops:
            _HANDLERS[op] = fn
        return fn

    return register


class FakeCudaMode(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's, untyped
    """Runs ops on GPU tensors on fake tensors and the rest for real (see the module's text)."""

    def __init__(self, harness: FakeCuda) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.harness = harness
        self.fake = harness.fake_mode

    def is_fake(self, t: Any) -> bool:
        return isinstance(t, self.harness.fake_type)

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        handler = _HANDLERS.get(func)
        if handler is not None:
            return handler(self, func, args, kwargs)
        device = kwargs.get("device")
        if _is_cuda(device):
            self.harness.check_device(device)
        elif not any(self.is_fake(t) for t in _tensors(args, kwargs)):
            if kwargs.get("pin_memory"):  # torch.empty(..., pin_memory=True) and the like
                kwargs = {**kwargs, "pin_memory": False}
                return self.harness.pinned.add(func(*args, **kwargs))
            return func(*args, **kwargs)
        return self.on_fake(func, args, kwargs)

    def on_fake(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        from torch._subclasses.fake_tensor import (
            DataDependentOutputException,
            DynamicOutputShapeException,
        )

        # NB: host tensors go in as fake tensors made here: given real ones, FakeTensorMode would
        # run the op for real on them ("constant propagation"), which a CUDA op cannot do here.
        args, kwargs = tree_map_only(torch.Tensor, self.to_fake, (args, kwargs))
        try:
            with self.fake:
                return func(*args, **kwargs)
        except DataDependentOutputException:
            returns = func._schema.returns
            if len(returns) == 1 and str(returns[0].type) in ("bool", "int", "float"):
                self.harness.placeholders.note("values")
                return {"bool": False, "int": 0, "float": 0.0}[str(returns[0].type)]
            raise NotImplementedError(
                f"gpuwatch --fake-cuda: {func} reads GPU values, which a fake GPU does not have"
            ) from None
        except DynamicOutputShapeException:
            raise NotImplementedError(
                f"gpuwatch --fake-cuda: the size of {func}'s output depends on GPU values, "
                "which a fake GPU does not have"
            ) from None

    def to_fake(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, self.harness.fake_type):
            return t
        return self.fake.from_tensor(t, static_shapes=True)

    def fake_empty(self, shape: Any, like: torch.Tensor, dtype: torch.dtype | None = None) -> Any:
        with self.fake:
            return torch.empty(shape, dtype=dtype or like.dtype, device=like.device)

    def host_placeholder(self, src: torch.Tensor, dtype: Any, pinned: bool) -> torch.Tensor:
        self.harness.placeholders.note("host_copies")
        out = torch.zeros(tuple(src.shape), dtype=dtype or src.dtype)
        return self.harness.pinned.add(out) if pinned else out


def _device_of(kwargs: dict[str, Any]) -> torch.device | None:
    d = kwargs.get("device")
    return torch.device(d) if d is not None else None


@_handles(_aten._to_copy.default)
def _to_copy(mode: FakeCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    src = args[0]
    dst = _device_of(kwargs)
    if mode.is_fake(src) and dst is not None and dst.type == "cpu":
        # NB: with non_blocking=True a copy to the host allocates pinned memory
        # (aten/src/ATen/native/TensorConversions.cpp).
        return mode.host_placeholder(
            src,
            kwargs.get("dtype"),
            bool(kwargs.get("non_blocking")) or bool(kwargs.get("pin_memory")),
        )
    if dst is not None and dst.type == "cuda":
        mode.harness.check_device(dst)
    elif not mode.is_fake(src):
        return func(*args, **kwargs)
    return mode.on_fake(func, args, kwargs)


@_handles(_aten.copy_.default)
def _copy_(mode: FakeCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    dst, src = args[0], args[1]
    if mode.is_fake(dst):
        return mode.on_fake(func, args, kwargs)
    if mode.is_fake(src):  # to a real host tensor: the values are placeholders
        mode.harness.placeholders.note("host_copies")
        return dst.zero_()
    return func(*args, **kwargs)


@_handles(_aten._local_scalar_dense.default)
def _item(mode: FakeCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    t = args[0]
    if not mode.is_fake(t):
        return func(*args, **kwargs)
    mode.harness.placeholders.note("values")
    if t.dtype == torch.bool:
        return False
    if t.dtype.is_floating_point:
        return 0.0
    if t.dtype.is_complex:
        return 0j
    return 0


@_handles(_aten.is_pinned.default)
def _is_pinned(mode: FakeCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    t = args[0]
    if mode.is_fake(t) or t.device.type != "cpu":
        return False
    return t in mode.harness.pinned


@_handles(_aten._pin_memory.default)
def _pin(mode: FakeCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    t = args[0]
    if mode.is_fake(t):
        return mode.on_fake(_aten.clone.default, (t,), {})
    return mode.harness.pinned.add(t.clone())


# Ops whose output size depends on the values: every element is kept (the largest output).


@_handles(_aten.nonzero.default)
def _nonzero(mode: FakeCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    t = args[0]
    if not mode.is_fake(t):
        return func(*args, **kwargs)
    mode.harness.placeholders.note("sizes")
    return mode.fake_empty((t.numel(), t.dim()), t, torch.long)


@_handles(_aten.masked_select.default)
def _masked_select(
    mode: FakeCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    t, mask = args[0], args[1]
    if not (mode.is_fake(t) or mode.is_fake(mask)):
        return func(*args, **kwargs)
    mode.harness.placeholders.note("sizes")
    n = torch.Size(torch.broadcast_shapes(t.shape, mask.shape)).numel()  # type: ignore[no-untyped-call]
    return mode.fake_empty((n,), t if mode.is_fake(t) else mask, t.dtype)


@_handles(_aten._unique2.default, _aten.unique_consecutive.default)
def _unique(mode: FakeCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    t = args[0]
    if not mode.is_fake(t):
        return func(*args, **kwargs)
    mode.harness.placeholders.note("sizes")
    names = [a.name for a in func._schema.arguments]
    given = dict(zip(names, args, strict=False)) | kwargs
    dim = given.get("dim")
    n = t.numel() if dim is None else t.shape[dim]
    values = mode.fake_empty((n,) if dim is None else tuple(t.shape), t)
    inverse = mode.fake_empty(
        tuple(t.shape) if given.get("return_inverse") else (0,), t, torch.long
    )
    counts = mode.fake_empty((n,) if given.get("return_counts") else (0,), t, torch.long)
    return values, inverse, counts


@_handles(_aten.repeat_interleave.Tensor)
def _repeat_interleave(
    mode: FakeCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    repeats = args[0]
    if not mode.is_fake(repeats):
        return func(*args, **kwargs)
    size = kwargs.get("output_size")
    if size is None:
        mode.harness.placeholders.note("sizes")
        size = repeats.numel()  # each element once: the repeat counts are GPU values
    return mode.fake_empty((size,), repeats, repeats.dtype)


def _mask_indices(mode: FakeCudaMode, indices: Any, like: torch.Tensor) -> tuple[list[Any], bool]:
    """Boolean masks among ``indices`` as the long indices they stand for: a real host mask's
    own (exact), a GPU mask's every element (a placeholder)."""
    out: list[Any] = []
    placeholder = False
    for i in indices:
        if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8):
            if mode.is_fake(i):
                placeholder = True
                n = i.numel()
                out.extend(mode.fake_empty((n,), i, torch.long) for _ in range(i.dim()))
            else:
                out.extend(i.nonzero().unbind(1))
        else:
            out.append(i)
    return out, placeholder


@_handles(_aten.index.Tensor)
def _index(mode: FakeCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    t, indices = args[0], args[1]
    if not mode.is_fake(t) and not any(mode.is_fake(i) for i in indices if i is not None):
        return func(*args, **kwargs)
    new, placeholder = _mask_indices(mode, indices, t)
    if placeholder:
        mode.harness.placeholders.note("sizes")
    return mode.on_fake(func, (t, new, *args[2:]), kwargs)


@_handles(_aten.index_put_.default, _aten.index_put.default, _aten._index_put_impl_.default)
def _index_put(mode: FakeCudaMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    t, indices = args[0], args[1]
    if not mode.is_fake(t):
        return func(*args, **kwargs)
    if any(
        mode.is_fake(i) and i.dtype in (torch.bool, torch.uint8) for i in indices if i is not None
    ):
        # Which elements a GPU mask selects is a GPU value: the write is taken as done.
        if func is _aten.index_put.default:
            return mode.on_fake(_aten.clone.default, (t,), {})
        return t
    new, _ = _mask_indices(mode, indices, t)
    return mode.on_fake(func, (t, new, *args[2:]), kwargs)


# -- torch.cuda as a machine with GPUs shows it ---------------------------------------------------


class _Properties:
    def __init__(self, index: int) -> None:
        self.name = DEVICE_NAME
        self.index = index
        self.major, self.minor = 9, 0
        self.total_memory = 80 * 1024**3
        self.multi_processor_count = 132
        self.is_integrated = False
        self.is_multi_gpu_board = False

    def __repr__(self) -> str:
        return f"_CudaDeviceProperties(name='{self.name}', simulated by gpuwatch --fake-cuda)"


class FakeEvent:
    """``torch.cuda.Event`` on a fake GPU: records and waits at once; no time passes on it."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        self.enable_timing = enable_timing

    def record(self, stream: Any = None) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: Any) -> float:
        return 0.0


class FakeStream:
    """``torch.cuda.Stream`` on a fake GPU: ops on it are counted as on any stream."""

    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        self.device = torch.device("cuda", _index_of(device))
        self.priority = priority

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> Any:
        return event or FakeEvent()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _index_of(device: Any) -> int:
    if device is None:
        return HARNESS.current_device() if HARNESS is not None else 0
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.index is None:
        return HARNESS.current_device() if HARNESS is not None else 0
    return d.index


HARNESS: FakeCuda | None = None


class FakeCuda:
    """The harness: ``with FakeCuda(devices=1):`` makes ``cuda`` a fake GPU in this process."""

    def __init__(self, devices: int = 1) -> None:
        if not 1 <= devices <= MAX_DEVICES:
            raise FakeCudaUnavailable(f"--fake-cuda takes 1 to {MAX_DEVICES} GPUs, not {devices}")
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

        self.devices = devices
        self.guard = install_guard()
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        self.fake_type = FakeTensor
        self.placeholders = Placeholders()
        self.pinned = PinnedMemory()
        self._stack: ExitStack | None = None

    # -- devices ----------------------------------------------------------------------------

    def current_device(self) -> int:
        """The calling thread's current GPU: the device guard's, which C++ uses for "cuda"
        with no index (``.cuda()``, ``.to("cuda")``)."""
        return int(torch._C._accelerator_getDeviceIndex())

    def set_device(self, device: Any) -> None:
        index = _index_of(device)
        if index < 0:
            return
        self.check_device(torch.device("cuda", index))
        torch._C._accelerator_setDeviceIndex(index)

    def check_device(self, device: Any) -> None:
        d = torch.device(device)
        if d.index is not None and not 0 <= d.index < self.devices:
            raise RuntimeError(
                f"CUDA error: invalid device ordinal (cuda:{d.index}; this fake machine has "
                f"{self.devices} GPU{'s' if self.devices != 1 else ''}: --fake-gpus N for more)"
            )

    def mark(self, report: Any) -> None:
        """Says in ``report`` that its GPUs were simulated, and what the script got back that
        was a placeholder (``options.fake_cuda``; the devices' names)."""
        report.options["fake_cuda"] = {
            "devices": self.devices,
            "placeholders": self.placeholders.to_dict(),
        }
        for entry in report.devices:
            if str(entry.get("device", "")).startswith("cuda"):
                entry["name"] = DEVICE_NAME

    # -- entering -----------------------------------------------------------------------------

    def __enter__(self) -> FakeCuda:
        global HARNESS
        if HARNESS is not None:
            raise RuntimeError("--fake-cuda is already on in this process")
        stack = ExitStack()
        try:
            stack.enter_context(_cuda_hooks(self.devices))
            self._patch_cuda(stack)
            if self.guard == "fake":  # every run starts on GPU 0, as a new process does
                torch._C._accelerator_setDeviceIndex(0)
                stack.callback(torch._C._accelerator_setDeviceIndex, 0)
            self._patch_threads(stack)
            # NB: torch.tensor(data, device="cuda") then makes the tensor on the host and moves
            # it with a _to_copy the modes see, as FakeTensorMode itself arranges.
            lift_on_the_host(stack)
            stack.enter_context(FakeCudaMode(self))
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        HARNESS = self
        return self

    def __exit__(self, *exc: object) -> None:
        global HARNESS
        HARNESS = None
        assert self._stack is not None
        self._stack.close()

    def _patch_threads(self, stack: ExitStack) -> None:
        from torch.utils._python_dispatch import (
            _get_current_dispatch_mode_stack,
            _pop_mode,
            _push_mode,
        )

        original = getattr(threading.Thread, THREAD_BOOTSTRAP, None)
        if original is None:
            return
        harness = self

        # NB: a thread's modes start empty; the fake GPU goes under any other mode the thread
        # enters (the profiler's), whichever wrapper runs first.
        def _bootstrap_inner(thread: threading.Thread) -> None:
            if HARNESS is not harness:
                original(thread)
                return

            def run() -> None:
                above = list(_get_current_dispatch_mode_stack())
                for _ in above:
                    _pop_mode()
                with FakeCudaMode(harness):
                    for m in above:
                        _push_mode(m)
                    try:
                        target()
                    finally:
                        for _ in above:
                            _pop_mode()
                for m in above:
                    _push_mode(m)

            target = thread.run
            thread.run = run  # type: ignore[method-assign]
            original(thread)

        _set(stack, threading.Thread, THREAD_BOOTSTRAP, _bootstrap_inner)

    def _patch_cuda(self, stack: ExitStack) -> None:
        import torch._subclasses.fake_tensor as fake_tensor
        import torch.cuda

        cuda = torch.cuda
        n = self.devices

        def get_device_name(device: Any = None) -> str:
            self.check_device(torch.device("cuda", _index_of(device)))
            return DEVICE_NAME

        def get_device_properties(device: Any = None) -> _Properties:
            self.check_device(torch.device("cuda", _index_of(device)))
            return _Properties(_index_of(device))

        class _DeviceContext:
            def __init__(self, device: Any) -> None:
                self.index = -1 if device is None else _index_of(device)
                self.prev = 0

            def __enter__(self) -> None:
                self.prev = harness.current_device()
                if self.index >= 0:
                    harness.set_device(self.index)

            def __exit__(self, *exc: object) -> None:
                harness.set_device(self.prev)

        harness = self

        def synchronize(device: Any = None) -> None:
            pass

        def empty_cache() -> None:
            pass

        patches: dict[str, Any] = {
            "is_available": lambda: True,
            "device_count": lambda: n,
            "current_device": self.current_device,
            "set_device": self.set_device,
            "is_initialized": lambda: True,
            "_lazy_init": lambda: None,
            "init": lambda: None,
            "synchronize": synchronize,
            "get_device_name": get_device_name,
            "get_device_properties": get_device_properties,
            "get_device_capability": lambda device=None: (9, 0),
            "is_bf16_supported": lambda including_emulation=True: True,
            "empty_cache": empty_cache,
            "device": _DeviceContext,
            "Event": FakeEvent,
            "Stream": FakeStream,
            "current_stream": lambda device=None: FakeStream(device),
            "default_stream": lambda device=None: FakeStream(device),
            "stream": lambda s=None: s if s is not None else FakeStream(),
        }
        for name, value in patches.items():
            _set(stack, cuda, name, value)
        accel = torch.accelerator
        for name, value in {
            "is_available": lambda: True,
            "current_accelerator": lambda check_available=False: torch.device("cuda"),
            "device_count": lambda: n,
            "current_device_index": self.current_device,
            "synchronize": synchronize,
        }.items():
            if hasattr(accel, name):
                _set(stack, accel, name, value)
        # NB: FakeTensor's first CUDA tensor makes a real one to set up the CUDA context.
        _set(stack, fake_tensor, "init_gpu_context", lambda device: None)
        for name, fn in {
            "manual_seed": lambda seed: None,
            "manual_seed_all": lambda seed: None,
            "seed": lambda: None,
            "seed_all": lambda: None,
        }.items():
            _set(stack, cuda, name, fn)
        _set(stack, nn.Module, "_apply", _module_apply(nn.Module._apply, self))

        # NB: FakeTensor.tolist() reads element by element (an .item() each); on a GPU,
        # tolist() is one copy to the host, and so it is here.
        def tolist(t: torch.Tensor) -> Any:
            return t.to("cpu").tolist()

        _set(stack, self.fake_type, "tolist", tolist)


def _module_apply(apply: Callable[..., Any], harness: FakeCuda) -> Callable[..., Any]:
    """``nn.Module._apply`` for a module holding fake GPU tensors: each parameter replaced by a
    new one (PyTorch's own path under ``torch.__future__.set_overwrite_module_params_on_
    conversion(True)``), a parameter the conversion leaves as it is kept. PyTorch would swap
    them in place, which fake tensors do not allow (``model.to(device)`` a second time,
    ``model.cpu()``)."""
    fake = harness.fake_type

    def _apply(module: nn.Module, fn: Callable[[Any], Any], recurse: bool = True) -> Any:
        own = [*module._parameters.values(), *module._buffers.values()]
        if not any(isinstance(t, fake) for t in own):
            return apply(module, fn, recurse)
        if recurse:
            for child in module.children():
                child._apply(fn)
        for key, param in module._parameters.items():
            if param is None:
                continue
            with torch.no_grad():
                applied = fn(param)
            if applied is param:
                continue
            new = nn.Parameter(applied, param.requires_grad)
            if param.grad is not None:
                with torch.no_grad():
                    new.grad = fn(param.grad)
            module._parameters[key] = new
        for key, buf in module._buffers.items():
            if buf is not None:
                module._buffers[key] = fn(buf)
        return module

    return _apply


def _set(stack: ExitStack, owner: Any, name: str, value: Any) -> None:
    sentinel = object()
    original = getattr(owner, name, sentinel)
    setattr(owner, name, value)
    if original is sentinel:
        stack.callback(delattr, owner, name)
    else:
        stack.callback(setattr, owner, name, original)


@contextmanager
def fake_cuda(devices: int = 1) -> Iterator[FakeCuda]:
    """``with fake_cuda():`` the code inside runs against ``devices`` fake GPUs."""
    with FakeCuda(devices) as harness:
        yield harness
