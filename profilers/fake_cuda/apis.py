"""The everyday CUDA API of a training script, on the fake GPU: printing and formatting its
tensors, ``torch.save``, the memory statistics, the RNG state, NVTX ranges; and
one line naming the API for what cannot be simulated."""

from __future__ import annotations

import collections
import contextlib
import functools
import random
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, NoReturn

import torch
import torch._utils as torch_utils
import torch.backends.cudnn as cudnn
import torch.cuda.memory
import torch.cuda.nvtx
import torch.cuda.random
import torch.nn.functional as F
import torch.serialization as serialization
from torch.types import Device

# NB: NotSimulated is an AttributeError, as torch's own "has no attribute" was, so that
# ``hasattr`` probes still say False.
from profilers.errors import NotSimulated as NotSimulated
from profilers.fake_cuda.patch_list import RNG
from profilers.fake_cuda.printing import fake_format, fake_repr
from profilers.fake_cuda.torch_api import index_of
from profilers.registry import hide, patcher

if TYPE_CHECKING:
    from profilers.fake_cuda.harness import FakeCuda
    from profilers.fake_cuda.mode import GpuTensor

set_attr = patcher("fake_cuda")
"""``owner.name = value`` until ``stack`` closes, on the registry's stack (profilers/registry.py)."""


def patch_printing(stack: ExitStack, harness: FakeCuda) -> None:
    """``print(t)``, ``repr``, ``str`` and ``f"{t:.4f}"`` of the fake GPU's tensors."""
    fake = harness.fake_type

    def ours(t: object) -> bool:
        return getattr(t, "fake_mode", None) is harness.fake_mode

    set_attr(
        stack, fake, "__repr__", fake_repr(fake.__repr__, ours, lambda: harness.mode_type(harness))
    )
    set_attr(stack, fake, "__format__", fake_format(fake.__format__, ours))


# -- torch.save ----------------------------------------------------------------------------------


def patch_save(stack: ExitStack, harness: FakeCuda) -> None:
    """``torch.save`` of the fake GPU's tensors (a state_dict, a model, an optimizer's state).

    NB: on a GPU, torch.save copies each *storage* to the host once, whole, however many
    tensors view it (tied weights, a slice, a ``detach()``): its pickler keeps one entry per
    storage (``_save``'s ``id_map``, keyed by ``storage._cdata``), writes each with
    ``storage.cpu()`` and tags it with its device (``location_tag``; torch/serialization.py).
    Here each fake GPU storage is copied once per save (a ``copy_`` of all its bytes: the copy
    the profiler counts) to a host storage tagged with the fake tensor's device, and each
    tensor is saved as a view of it, so tensors that shared a storage share it again once
    loaded. ``torch.save`` is wrapped only to know where one save begins and ends."""
    fake = harness.fake_type
    devices: dict[int, tuple[int, weakref.ref[torch.UntypedStorage]]] = {}
    """Placeholder host storages (by address) -> the fake GPU they stand for."""
    saving = threading.local()
    """``copies``: while a torch.save runs on this thread, its fake GPU storages (by
    ``_cdata``) -> their host copies (one per storage per save, as torch's ``id_map``)."""

    def host_storage(self: GpuTensor) -> torch.UntypedStorage:
        copies: dict[int, torch.UntypedStorage] | None = getattr(saving, "copies", None)
        fake_storage = self.untyped_storage()
        storage = None if copies is None else copies.get(fake_storage._cdata)
        if storage is None:
            whole = fake_storage.nbytes() // self.element_size()
            host = torch.empty(whole * self.element_size(), dtype=torch.uint8)
            # NB: the copy to the host a GPU makes, counted by the profiler as a GPU's is: the
            # whole storage as bytes (storage.cpu() -> at::storage_copy: a uint8 copy_).
            host.copy_(self.detach().as_strided((whole,), (1,), 0).view(torch.uint8))
            storage = host.untyped_storage()
            if copies is not None:  # NB: None: pickled outside torch.save, each on its own
                copies[fake_storage._cdata] = storage
            devices[storage.data_ptr()] = (self.fake_device.index or 0, weakref.ref(storage))
        return storage

    original_save: Callable[..., None] = torch.save

    @functools.wraps(original_save)
    def save(*args: object, **kwargs: object) -> None:
        outer = getattr(saving, "copies", None)
        saving.copies = {}
        try:
            original_save(*args, **kwargs)
        finally:
            saving.copies = outer

    def __reduce_ex__(self: GpuTensor, protocol: int) -> object:
        if getattr(self, "fake_mode", None) is not harness.fake_mode:
            return original_reduce(self, protocol)
        host = torch.empty(0, dtype=self.dtype)
        host.set_(host_storage(self), self.storage_offset(), tuple(self.shape), self.stride())
        if getattr(self, "_is_param", False):
            return (
                torch._utils._rebuild_parameter,
                (host, self.requires_grad, collections.OrderedDict()),
            )
        if self.requires_grad and self.is_leaf:
            host.requires_grad_()
        return host.__reduce_ex__(protocol)  # type: ignore[no-untyped-call]

    original_tag = serialization.location_tag

    def location_tag(storage: torch.UntypedStorage | torch.TypedStorage) -> str:
        found = devices.get(storage.data_ptr()) if storage.device.type == "cpu" else None
        if found is not None and found[1]() is not None:
            return f"cuda:{found[0]}"
        return str(original_tag(storage))

    original_reduce: Callable[[torch.Tensor, int], object] = fake.__reduce_ex__
    set_attr(stack, fake, "__reduce_ex__", __reduce_ex__)
    set_attr(stack, serialization, "location_tag", location_tag)
    set_attr(stack, torch, "save", save)
    set_attr(stack, serialization, "save", save)


def patch_load(stack: ExitStack, harness: FakeCuda) -> None:
    """``torch.load`` of a checkpoint saved on a GPU, with no ``map_location`` or one that names
    a GPU: torch restores each storage onto its GPU (torch/serialization.py ``_deserialize``: a
    ``storage.to(device)`` of all its bytes), which a fake GPU's storage cannot do
    (``torch.UntypedStorage(..., device="cuda")`` is refused; pytorch/examples'
    word_language_model died at its ``torch.load(f)``).

    Here ``map_location`` is followed as torch follows it (``_get_restore_location``); each
    storage bound for a GPU stays on the host while the file is read and moves, once and whole
    (the copy the profiler counts), when its first tensor is rebuilt; every tensor of it is a
    view of the moved bytes, so tied weights stay tied."""
    loading = threading.local()
    """``bound``: while a torch.load runs on this thread, id(host storage) -> (the storage, its
    GPU); ``moved``: id(host storage) -> its bytes on that GPU."""

    def restore(user: object) -> Callable[[torch.UntypedStorage, str], object]:
        # NB: a device in map_location, or a dict's, is its name, as torch's own restore takes it
        def place(storage: torch.UntypedStorage, location: str) -> object:
            where = location
            if callable(user):
                result = user(storage, location)
                if result is not None:
                    return result
            elif isinstance(user, dict):
                where = str(user.get(location, location))
            elif user is not None:
                where = str(user)
            device = torch.device(where)
            if device.type != "cuda":
                return serialization.default_restore_location(storage, where)  # type: ignore[no-untyped-call]  # torch's, untyped
            loading.bound[id(storage)] = (storage, device)
            return storage

        return place

    original_load: Callable[..., object] = torch.load

    @functools.wraps(original_load)
    def load(f: object, map_location: object = None, *args: object, **kwargs: object) -> object:
        outer = getattr(loading, "bound", None), getattr(loading, "moved", None)
        loading.bound, loading.moved = {}, {}
        try:
            return original_load(f, restore(map_location), *args, **kwargs)
        finally:
            loading.bound, loading.moved = outer

    original_rebuild = torch_utils._rebuild_tensor

    def rebuild(
        storage: torch.TypedStorage, storage_offset: int, size: Sequence[int], stride: Sequence[int]
    ) -> object:
        bound = getattr(loading, "bound", None) or {}
        untyped = getattr(storage, "_untyped_storage", None)
        found = bound.get(id(untyped))
        if found is None:
            return original_rebuild(storage, storage_offset, size, stride)  # type: ignore[no-untyped-call]  # torch's, untyped
        moved = loading.moved.get(id(untyped))
        if moved is None:
            host = torch.empty((0,), dtype=torch.uint8).set_(found[0])
            moved = loading.moved[id(untyped)] = host.to(found[1])
        whole = moved.view(storage.dtype) if moved.numel() else moved.to(storage.dtype)
        return whole.as_strided(size, stride, storage_offset)

    set_attr(stack, torch_utils, "_rebuild_tensor", rebuild)
    set_attr(stack, torch, "load", load)
    set_attr(stack, serialization, "load", load)


# -- memory, RNG, NVTX, and what is not simulated ------------------------------------------------


def _index(harness: FakeCuda, device: Device) -> int:
    index = index_of(device) if device is not None else harness.current_device()
    return harness.current_device() if index < 0 else index


def patch_memory(stack: ExitStack, harness: FakeCuda) -> None:
    """torch.cuda's own memory functions (``memory_allocated()``, ``memory_stats()``,
    ``mem_get_info()``, ``empty_cache()``, ...), answered by the fake GPU at the C entry points
    they call (profilers/fake_cuda/memory.py)."""
    memory = harness.memory
    c = torch._C
    for name, fn in {
        "_cuda_memoryStats": lambda device: memory.stats(_index(harness, device)),
        "_cuda_resetPeakMemoryStats": lambda device: memory.reset_peak(_index(harness, device)),
        "_cuda_resetAccumulatedMemoryStats": lambda device: None,
        "_cuda_emptyCache": memory.empty_cache,
        "_cuda_ipc_collect": lambda: None,
    }.items():
        set_attr(stack, c, name, fn)
    set_attr(stack, torch.cuda, "empty_cache", torch.cuda.memory.empty_cache)
    # NB: torch/cuda/memory.py holds its own references to these (``from . import ...``).
    set_attr(stack, torch.cuda.memory, "is_initialized", lambda: True)
    set_attr(stack, torch.cuda.memory, "_lazy_init", lambda: None)

    def mem_get_info(device: int) -> tuple[int, int]:  # free: what the allocator has not reserved
        return memory.capacity_bytes - memory.reserved[device], memory.capacity_bytes

    cudart = types.SimpleNamespace(cudaMemGetInfo=mem_get_info)  # torch.cuda.cudart()'s
    set_attr(stack, torch.cuda, "cudart", lambda: cudart)


class FakeRng:
    """``torch.cuda``'s RNG state per fake GPU, kept in ``torch.cuda.default_generators`` (the
    fake GPU's generators: a CUDA generator's 16 bytes, the seed then the Philox offset)."""

    def __init__(self, harness: FakeCuda) -> None:
        self.harness = harness

    def _generator(self, device: Device = None) -> torch.Generator:
        return torch.cuda.default_generators[_index(self.harness, device)]

    def get_rng_state(self, device: Device = "cuda") -> torch.Tensor:
        return self._generator(device).get_state()

    def set_rng_state(self, new_state: torch.Tensor, device: Device = "cuda") -> None:
        self._generator(device).set_state(new_state)

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [self.get_rng_state(i) for i in range(self.harness.devices)]

    def set_rng_state_all(self, new_states: Iterable[torch.Tensor]) -> None:
        for i, state in enumerate(new_states):
            self.set_rng_state(state, i)

    def manual_seed(self, seed: int) -> None:
        self._generator().manual_seed(int(seed) & (2**64 - 1))

    def manual_seed_all(self, seed: int) -> None:
        for i in range(self.harness.devices):
            self._generator(i).manual_seed(int(seed) & (2**64 - 1))

    def seed(self) -> None:
        self.manual_seed(random.getrandbits(63))

    def seed_all(self) -> None:
        self.manual_seed_all(random.getrandbits(63))

    def initial_seed(self) -> int:
        return int(self._generator().initial_seed())


def patch_rng(stack: ExitStack, harness: FakeCuda) -> None:
    rng = FakeRng(harness)
    for owner in (torch.cuda, torch.cuda.random):
        for name in RNG:
            set_attr(stack, owner, name, getattr(rng, name))


def patch_attention(stack: ExitStack) -> None:
    """``F.scaled_dot_product_attention`` on fake GPU tensors runs PyTorch's math path (the
    ops of attention, which both modes run), as a CPU build of torch does there. NB: on a CUDA
    build its choice of a fused kernel asks cuDNN's version of the real CUDA library first
    (sdp_utils.cpp), which the fake GPU's hooks cannot answer."""
    fused: Callable[..., torch.Tensor] = F.scaled_dot_product_attention
    math = torch.ops.aten._scaled_dot_product_attention_math.default

    def scaled_dot_product_attention(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> object:
        options: dict[str, object] = {"scale": scale, "enable_gqa": enable_gqa}
        if query.device.type != "cuda":
            return fused(query, key, value, attn_mask, dropout_p, is_causal, **options)
        autocast = torch.is_autocast_enabled("cuda")
        if autocast:
            query, key, value, attn_mask = _autocast_cuda(query, key, value, attn_mask)
        # NB: once cast, the math runs in the inputs' dtype, as the GPU's kernel does
        with torch.autocast("cuda", enabled=False) if autocast else contextlib.nullcontext():
            attn_mask = _additive(attn_mask, query.dtype)
            out, _ = math(query, key, value, attn_mask, dropout_p, is_causal, **options)
        return out

    set_attr(stack, F, "scaled_dot_product_attention", scaled_dot_product_attention)


def _additive(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean attention mask as the additive one attention uses (0 where kept, -inf where
    masked), in the query's dtype; any other mask as it is.

    NB: aten/src/ATen/native/transformers/attention.cpp: ``scaled_dot_product_attention``
    converts a boolean mask (``convert_boolean_attn_mask``: ``where(mask, 0, -inf)``) before
    it calls the kernel it chose; the math kernel itself adds the mask it is given (a boolean
    one passed straight to it added 1 and 0: wrong values under real values)."""
    if not isinstance(mask, torch.Tensor) or mask.dtype is not torch.bool:
        return mask
    masked = torch.scalar_tensor(float("-inf"), dtype=dtype, device=mask.device)
    return torch.where(mask, 0.0, masked)


def _autocast_cuda(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Attention's tensors as ``autocast("cuda")`` hands them to it: each floating-point CUDA
    tensor but a double in the autocast dtype, the rest as they are.

    NB: aten/src/ATen/autocast_mode.cpp lists ``scaled_dot_product_attention`` as
    ``lower_precision_fp`` for CUDA (``cached_cast`` of every eligible argument, then the op
    with autocast excluded): on a GPU its output under ``autocast(dtype=float16)`` is half
    whatever its inputs were. The math op it stands for here is not listed."""
    dtype = torch.get_autocast_dtype("cuda")
    done: dict[int, torch.Tensor] = {}  # self-attention's one tensor, cast once

    def cast(t: torch.Tensor) -> torch.Tensor:
        on_gpu = t.is_floating_point() and t.device.type == "cuda"
        if not on_gpu or t.dtype in (dtype, torch.float64):
            return t
        if id(t) not in done:
            done[id(t)] = t.to(dtype)
        return done[id(t)]

    return cast(query), cast(key), cast(value), None if mask is None else cast(mask)


class FakeNvtx:
    """NVTX ranges on the fake GPU: kept (their nesting depth, as NVTX returns it), shown
    nowhere."""

    def __init__(self) -> None:
        self._depth = threading.local()
        self._next_id = 0

    def rangePushA(self, msg: str) -> int:  # noqa: N802  # NVTX's names
        depth = getattr(self._depth, "n", 0)
        self._depth.n = depth + 1
        return depth

    def rangePop(self) -> int:  # noqa: N802
        depth = getattr(self._depth, "n", 0)
        if depth == 0:
            return -1
        self._depth.n = depth - 1
        return depth - 1

    def rangeStartA(self, msg: str) -> int:  # noqa: N802
        self._next_id += 1
        return self._next_id

    def rangeEnd(self, range_id: int) -> None:  # noqa: N802
        pass

    def markA(self, msg: str) -> None:  # noqa: N802
        pass

    def deviceRangeStart(self, msg: str, stream: int = 0) -> int:  # noqa: N802
        return self.rangeStartA(msg)

    def deviceRangeEnd(self, range_handle: object, stream: int = 0) -> None:  # noqa: N802
        pass


def _torch_cuda_caller() -> str:
    """The outermost ``torch.cuda`` function on the stack: the API the script called."""
    found = "torch.cuda"
    frame = sys._getframe(2)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith("torch.cuda"):
            found = f"{module}.{frame.f_code.co_name}()"
        elif found != "torch.cuda":
            break
        frame = frame.f_back  # type: ignore[assignment]
    return found


def patch_unsimulated(stack: ExitStack) -> None:
    """What the fake GPU does not simulate says so in one line naming the API
    (``torch._C._cuda_*`` that a CPU build lacks; NVTX is kept)."""

    def __getattr__(name: str) -> NoReturn:
        if name.startswith("_cuda_"):
            raise NotSimulated(_torch_cuda_caller(), f"torch._C.{name}")
        raise AttributeError(f"module 'torch._C' has no attribute '{name}'")

    if "__getattr__" not in vars(torch._C):
        set_attr(stack, torch._C, "__getattr__", __getattr__)
    # NB: a CUDA build has these entry points, and they would answer from the real runtime (a
    # real GPU's state, or "no NVIDIA driver"). Those the harness has not replaced (still C
    # builtins here, as this patch comes last) are hidden while it is on, so that both builds
    # answer alike: the __getattr__ above names them, as on a CPU-only build, which lacks them.
    for name, value in list(vars(torch._C).items()):
        if name.startswith("_cuda_") and isinstance(value, types.BuiltinFunctionType):
            hide("fake_cuda", stack, torch._C, name)

    set_attr(stack, torch.cuda.nvtx, "_nvtx", FakeNvtx())
    # NB: as on a CPU-only build, which has no cuDNN: a CUDA build would ask its cuDNN library
    # (nn.LSTM's flatten_parameters does), which cannot load without a GPU
    set_attr(stack, cudnn, "is_available", lambda: False)
    set_attr(stack, cudnn, "is_acceptable", lambda tensor: False)
