"""What torch's Python API shows of a fake GPU: device properties, events and streams, and
modules whose parameters move onto and between fake GPUs."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

import torch
from torch import nn
from torch.types import Device

from profilers.fake_cuda.graphs import forbid_while_capturing

DEVICE_NAME = "gpuwatch fake CUDA device"


class Properties:
    def __init__(self, index: int, total_memory: int = 80 * 1024**3) -> None:
        self.name = DEVICE_NAME
        self.index = index
        self.major, self.minor = 9, 0
        self.total_memory = total_memory
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

    def record(self, stream: object = None) -> None:
        pass

    def wait(self, stream: object = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        forbid_while_capturing("torch.cuda.Event.synchronize()")

    def elapsed_time(self, end_event: object) -> float:
        return 0.0


class FakeStream:
    """``torch.cuda.Stream`` on a fake GPU: ops on it are counted as on any stream."""

    def __init__(self, device: Device = None, priority: int = 0, **_: object) -> None:
        self.device = torch.device("cuda", index_of(device))
        self.priority = priority

    def wait_stream(self, stream: object) -> None:
        pass

    def wait_event(self, event: object) -> None:
        pass

    def record_event(self, event: FakeEvent | None = None) -> FakeEvent:
        return event or FakeEvent()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        forbid_while_capturing("torch.cuda.Stream.synchronize()")

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def index_of(device: Device) -> int:
    """The GPU index ``device`` names (None or a bare "cuda": the thread's current GPU)."""
    if isinstance(device, int):
        return device
    index = None if device is None else torch.device(device).index
    return int(torch._C._accelerator_getDeviceIndex()) if index is None else index


class Optimizers:
    """The optimizers made while the fake GPU is on, so that a parameter a module replaces
    (see :func:`module_apply`) is replaced in them too: on a GPU, ``model.to(device)`` after
    ``torch.optim.SGD(model.parameters())`` moves the very parameters the optimizer holds."""

    def __init__(self) -> None:
        self._all: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()

    def patch_init(self, init: Callable[..., None]) -> Callable[..., None]:
        def __init__(opt: torch.optim.Optimizer, *args: object, **kwargs: object) -> None:
            init(opt, *args, **kwargs)
            self._all.add(opt)

        return __init__

    def replace(self, old: torch.Tensor, new: torch.Tensor) -> None:
        for opt in list(self._all):
            for group in opt.param_groups:
                group["params"] = [new if p is old else p for p in group["params"]]
            if old in opt.state:
                opt.state[new] = opt.state.pop(old)


def module_apply(
    apply: Callable[..., object], fake: type[torch.Tensor], optimizers: Optimizers
) -> Callable[..., object]:
    """``nn.Module._apply`` (behind ``.to()``, ``.cuda()``, ``.cpu()``, ``.half()``) for
    modules whose tensors are, or become, fake GPU tensors: each parameter is replaced by a new
    one (PyTorch's own path under ``torch.__future__.set_overwrite_module_params_on_conversion``)
    and the optimizers holding it get the new one, so the script sees what a GPU gives it: the
    same parameters, moved. Weights shared between modules stay shared. PyTorch would swap
    fake tensors in place, which they do not allow. Conversions with no fake tensor in them are
    PyTorch's own."""
    local = threading.local()

    def _apply(
        module: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
    ) -> object:
        own = [
            t for t in (*module._parameters.values(), *module._buffers.values()) if t is not None
        ]
        outermost = getattr(local, "memo", None) is None
        memo: dict[int, tuple[nn.Parameter, nn.Parameter]] = {} if outermost else local.memo
        probe: tuple[torch.Tensor, torch.Tensor] | None = None
        if own and not isinstance(own[0], fake) and id(own[0]) not in memo:
            with torch.no_grad():
                probe = (own[0], fn(own[0]))
            if not isinstance(probe[1], fake) and not any(isinstance(t, fake) for t in own):
                return apply(module, fn, recurse)
        if outermost:
            local.memo = memo
        try:
            _convert(module, fn, recurse, probe, local.memo, optimizers)
        finally:
            if outermost:
                local.memo = None
        return module

    return _apply


def _convert(
    module: nn.Module,
    fn: Callable[[torch.Tensor], torch.Tensor],
    recurse: bool,
    probe: tuple[torch.Tensor, torch.Tensor] | None,
    memo: dict[int, tuple[nn.Parameter, nn.Parameter]],
    optimizers: Optimizers,
) -> None:
    """``module``'s tensors converted by ``fn``, each parameter a new one (:func:`module_apply`)."""
    if recurse:
        for child in module.children():
            child._apply(fn)  # type: ignore[no-untyped-call]  # torch's, untyped

    def applied(t: torch.Tensor) -> torch.Tensor:
        if probe is not None and t is probe[0]:
            return probe[1]
        with torch.no_grad():
            return fn(t)

    for key, param in module._parameters.items():
        if param is None:
            continue
        done = memo.get(id(param))
        if done is not None and done[0] is param:  # a weight shared with a module done
            module._parameters[key] = done[1]
            continue
        out = applied(param)
        if out is param:
            continue
        new = nn.Parameter(out, param.requires_grad)
        if param.grad is not None:
            new.grad = applied(param.grad)
        module._parameters[key] = new
        memo[id(param)] = (param, new)
        optimizers.replace(param, new)
    for key, buf in module._buffers.items():
        if buf is not None:
            module._buffers[key] = applied(buf)
