"""``--fake-cuda``: an unmodified CUDA script on a CPU-only machine, every copy and sync counted.

c10 ships ``FakeGuardImpl``; a few lines of C++ (``guard.cpp``, compiled once per torch build
and loaded with ctypes) register it as CUDA's device guard, so autograd starts a device thread
per fake GPU and ``loss.backward()`` runs on them as on a GPU. The harness's mode, under the
profiler's in every thread, runs each op on a GPU tensor on the fake GPU (real values computed
on the host, ``real.py``, or placeholders, ``mode.py``) and the rest for real; ``torch.cuda``
says what a machine with ``devices`` GPUs says. Nothing here decides what is a copy or a sync:
the profiler's own rules (``counting/ops.py``) see the same ops and devices as on a GPU.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import TYPE_CHECKING

import torch
import torch._subclasses.fake_tensor as fake_tensor
import torch.cuda.comm
import torch.nn.parallel.comm
import torch.optim.optimizer as optimizer
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.types import Device
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode, _push_mode

from profilers.errors import ProfileStateError

# NB: imported for its handlers, which it registers with both modes (what only CUDA's
# kernels do: softmax from half to float, fused optimizer steps)
from profilers.fake_cuda import cuda_kernels as cuda_kernels
from profilers.fake_cuda.apis import (
    patch_attention,
    patch_load,
    patch_memory,
    patch_printing,
    patch_rng,
    patch_save,
    patch_unsimulated,
)
from profilers.fake_cuda.apis import set_attr as _set
from profilers.fake_cuda.build import (
    FakeCudaUnavailable,
    check_fake_cuda,
    cuda_hooks,
    guard_library,
    install_guard,
)
from profilers.fake_cuda.comm import FUNCTIONS as COMM_FUNCTIONS
from profilers.fake_cuda.graphs import Graphs, forbid_while_capturing, patch_graphs_and_generators
from profilers.fake_cuda.memory import DEFAULT_BYTES, FakeMemory, PinnedMemory, Placeholders
from profilers.fake_cuda.mode import FakeCudaMode, GpuTensor, fake_tensor_mode
from profilers.fake_cuda.real import HostBacked, RealCudaMode
from profilers.fake_cuda.torch_api import (
    DEVICE_NAME,
    FakeEvent,
    FakeStream,
    Optimizers,
    Properties,
    index_of,
    module_apply,
)
from profilers.options import FakeCudaRun
from profilers.patches import lift_on_the_host
from profilers.torch_private import THREAD_BOOTSTRAP, require_cuda_init

if TYPE_CHECKING:
    from profilers.report import Report

__all__ = [
    "DEVICE_NAME",
    "FakeCuda",
    "FakeCudaUnavailable",
    "check_fake_cuda",
    "fake_cuda",
    "guard_library",
    "install_guard",
]

VALUES = ("real", "placeholder")
"""What GPU tensors hold (``--fake-values``): real values computed on the host
(profilers/fake_cuda/real.py), or none (fake tensors; what the host reads back is a
placeholder)."""

DEFAULT_VALUES = "real"
"""Real values: on the tiny nanoGPT-like model of benchmarks/fake_values.py they are right for
every branch and faster than placeholders too (FakeTensorMode's own cost per op is the larger);
placeholders stay for models too big to compute on the host."""

MAX_DEVICES = 8
"""c10's FakeGuardImpl has eight devices."""


HARNESS: FakeCuda | None = None


class FakeCuda:
    """The harness: ``with FakeCuda(devices=1):`` makes ``cuda`` a fake GPU in this process, of
    ``memory_bytes`` each (80 GiB unless told), whose tensors hold ``values`` (:data:`VALUES`)."""

    def __init__(
        self, devices: int = 1, *, memory_bytes: int | None = None, values: str | None = None
    ) -> None:
        values = DEFAULT_VALUES if values is None else values
        if not 1 <= devices <= MAX_DEVICES:
            raise FakeCudaUnavailable(f"simulates 1 to {MAX_DEVICES} GPUs, not {devices}")
        if values not in VALUES:
            raise FakeCudaUnavailable(f"holds {' or '.join(VALUES)} values, not {values!r}")
        self.devices = devices
        self.values = values
        install_guard()
        self.fake_mode = fake_tensor_mode()
        self.fake_type: type[GpuTensor] = HostBacked if values == "real" else FakeTensor
        """The type of a GPU tensor here."""
        self.mode_type: type[FakeCudaMode] = RealCudaMode if values == "real" else FakeCudaMode
        """The dispatch mode at the bottom of every thread's stack."""
        self.fake_lock = threading.RLock()
        self.placeholders = Placeholders()
        self.pinned = PinnedMemory()
        self.optimizers = Optimizers()
        self.memory = FakeMemory(devices, memory_bytes or DEFAULT_BYTES)
        self.graphs = Graphs()
        self._stack: ExitStack | None = None

    # -- devices ----------------------------------------------------------------------------

    def current_device(self) -> int:
        """The calling thread's current GPU: the device guard's, which C++ uses for "cuda"
        with no index (``.cuda()``, ``.to("cuda")``)."""
        return int(torch._C._accelerator_getDeviceIndex())

    def set_device(self, device: Device) -> None:
        index = index_of(device)
        if index < 0:
            return
        self.check_device(torch.device("cuda", index))
        torch._C._accelerator_setDeviceIndex(index)

    def check_device(self, device: torch.device | str) -> None:
        d = torch.device(device)
        if d.index is not None and not 0 <= d.index < self.devices:
            raise RuntimeError(
                f"CUDA error: invalid device ordinal (cuda:{d.index}; this fake machine has "
                f"{self.devices} GPU{'s' if self.devices != 1 else ''}; simulate more to use it)"
            )

    def mark(self, report: Report) -> Report:
        """``report`` saying that its GPUs were simulated, and what the script got back that
        was a placeholder (``options.fake_cuda``; the devices' names)."""
        graphs = self.graphs.to_dict() if self.graphs.captures or self.graphs.errors else None
        fake = FakeCudaRun(
            self.devices,
            self.placeholders.to_dict(),
            graphs,
            self.memory.capacity_bytes,
            self.values,
        )
        devices = [
            {**entry, "name": DEVICE_NAME}
            if str(entry.get("device", "")).startswith("cuda")
            else entry
            for entry in report.devices
        ]
        return report.replace(options=report.options.replace(fake_cuda=fake), devices=devices)

    # -- entering -----------------------------------------------------------------------------

    def __enter__(self) -> FakeCuda:
        global HARNESS
        if HARNESS is not None:
            raise ProfileStateError("the fake GPU is already on in this process", "nested")
        stack = ExitStack()
        try:
            # NB: last on the way out: CUDA uninitialized again for torch's C++ side, as before
            stack.callback(require_cuda_init)
            stack.enter_context(cuda_hooks(self.devices))
            self._patch_cuda(stack)
            # every run starts on GPU 0, as a new process does (the fake guard's device)
            torch._C._accelerator_setDeviceIndex(0)
            stack.callback(torch._C._accelerator_setDeviceIndex, 0)
            self._patch_threads(stack)
            # NB: torch.tensor(data, device="cuda") then makes the tensor on the host and moves
            # it with a _to_copy the modes see, as FakeTensorMode itself arranges.
            lift_on_the_host(stack)
            if self.values == "real":
                _set(stack, HostBacked, "fake_mode", self.fake_mode)
                _set(stack, HostBacked, "harness", self)
            stack.enter_context(self.mode_type(self))
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
                with harness.mode_type(harness):
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
        n = self.devices

        def get_device_properties(device: Device = None) -> Properties:
            self.check_device(torch.device("cuda", index_of(device)))
            return Properties(index_of(device), self.memory.capacity_bytes)

        class _DeviceContext:
            def __init__(self, device: Device) -> None:
                self.index = -1 if device is None else index_of(device)
                self.prev = 0

            def __enter__(self) -> None:
                self.prev = harness.current_device()
                if self.index >= 0:
                    harness.set_device(self.index)

            def __exit__(self, *exc: object) -> None:
                harness.set_device(self.prev)

        harness = self

        def synchronize(device: Device = None) -> None:
            forbid_while_capturing("torch.cuda.synchronize()")

        patches: dict[str, object] = {
            "is_available": lambda: True,
            "device_count": lambda: n,
            "current_device": self.current_device,
            "set_device": self.set_device,
            "is_initialized": lambda: True,
            "_lazy_init": lambda: None,
            "init": lambda: None,
            "synchronize": synchronize,
            "get_device_name": lambda device=None: get_device_properties(device).name,
            "get_device_properties": get_device_properties,
            "get_device_capability": lambda device=None: (9, 0),
            "is_bf16_supported": lambda including_emulation=True: True,
            "device": _DeviceContext,
            "Event": FakeEvent,
            "Stream": FakeStream,
            "current_stream": lambda device=None: FakeStream(device),
            "default_stream": lambda device=None: FakeStream(device),
            "stream": lambda s=None: s if s is not None else FakeStream(),
        }
        for name, value in patches.items():
            _set(stack, torch.cuda, name, value)
        # torch.accelerator as torch.cuda says
        for name, value in {
            "is_available": lambda: True,
            "current_accelerator": lambda check_available=False: torch.device("cuda"),
            "device_count": lambda: n,
            "current_device_index": self.current_device,
            "synchronize": synchronize,
        }.items():
            if hasattr(torch.accelerator, name):
                _set(stack, torch.accelerator, name, value)
        # NB: nn.DataParallel's scatter/broadcast/gather are C++ of a CUDA build (absent from a
        # CPU-only torch): on fake GPUs they are the copies they make (fake_cuda/comm.py).
        for module in (torch.nn.parallel.comm, torch.cuda.comm):
            for name, fn in COMM_FUNCTIONS.items():
                if hasattr(module, name):
                    _set(stack, module, name, fn)
        # NB: FakeTensor's first CUDA tensor makes a real one to set up the CUDA context.
        _set(stack, fake_tensor, "init_gpu_context", lambda device: None)
        apply = module_apply(nn.Module._apply, self.fake_type, self.optimizers)
        _set(stack, nn.Module, "_apply", apply)
        init = self.optimizers.patch_init(torch.optim.Optimizer.__init__)
        _set(stack, torch.optim.Optimizer, "__init__", init)
        # NB: an optimizer left to choose (foreach=None, fused=None) takes the foreach path on
        # a GPU, for plain tensors only (torch/optim/optimizer.py, _default_to_fused_or_foreach):
        # fake GPU tensors count as plain here, so the script runs, and fails, as on a GPU.
        plain = [*optimizer._foreach_supported_types, self.fake_type]
        _set(stack, optimizer, "_foreach_supported_types", plain)

        # NB: FakeTensor.tolist() reads element by element (an .item() each); on a GPU,
        # tolist() is one copy to the host, and so it is here.
        _set(stack, self.fake_type, "tolist", lambda t: t.to("cpu").tolist())
        patch_printing(stack, self)
        patch_save(stack, self)
        patch_load(stack, self)
        patch_memory(stack, self)
        patch_graphs_and_generators(stack, self)
        patch_rng(stack, self)
        patch_attention(stack)
        patch_unsimulated(stack)


fake_cuda = FakeCuda
"""``with fake_cuda():`` the code inside runs against fake GPUs (:class:`FakeCuda`)."""
