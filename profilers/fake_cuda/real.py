"""``--fake-values real``: the fake GPU's tensors hold real values, computed on the host.

A GPU tensor here is a :class:`HostBacked`: a wrapper that says ``cuda:N`` (to autograd,
autocast, device guards, the profiler's rules and the script) around a host tensor holding its
values. :class:`RealCudaMode`, in the placeholder mode's place, runs each op on a GPU tensor on
the host tensors inside and wraps what comes out on the op's GPU. So ``.item()``, ``.cpu()``,
``nonzero()`` and every branch taken on them are what a GPU gives (up to floating-point
differences between its kernels and the CPU's), while the ops the profiler sees, with their
devices, shapes and dtypes, are the placeholder mode's: the copies, syncs and lines it counts
do not change.

What a GPU refuses is refused here too, in a GPU's words: an op mixing tensors of two devices
(a host tensor of one element or more with a GPU tensor, or two GPUs), a device index past the
machine's. Random ops on a GPU draw from that GPU's generator (``torch.cuda.manual_seed``), not
the host's, so a script's host random stream is the one it has on a GPU.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, TypeGuard

import torch

from profilers.fake_cuda.mode import _HANDLERS as placeholder_handlers
from profilers.fake_cuda.mode import (
    FakeCudaMode,
    Handlers,
    _device,
    _h2d_capturable,
    _items,
    _tensor,
)
from profilers.memory.gpu_errors import mixed
from profilers.timing.fake_time import note_fake_op
from profilers.torch_private import OpOverload

if TYPE_CHECKING:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from profilers.fake_cuda.harness import FakeCuda
    from profilers.fake_cuda.mode import Args, Kwargs, Op

_aten = torch.ops.aten


class HostBacked(torch.Tensor):
    """A tensor on a fake GPU whose values are held by a host tensor (``host``)."""

    host: torch.Tensor
    fake_mode: FakeTensorMode | None = None
    """The harness's FakeTensorMode while a real-values harness is on: its parts (printing,
    ``torch.save``) tell the fake GPU's tensors by it, as they do fake tensors."""
    harness: FakeCuda | None = None
    """That harness, while it is on."""

    # NB: as FakeTensor: no Python ``__torch_function__`` on every call, method and attribute
    # read of a GPU tensor (about 8 us each on a loaded 2-core box, outside every mode: under
    # ``--gpu`` it read as the script's host time); every op still reaches the harness's mode.
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @staticmethod
    def __new__(cls, host: torch.Tensor, device: torch.device) -> HostBacked:
        return wrap(host, device)

    @property
    def fake_device(self) -> torch.device:
        """The GPU it is on (the name the harness's parts read on fake tensors too)."""
        return self.device

    def untyped_storage(self) -> torch.UntypedStorage:
        # NB: a wrapper's own storage is empty and one per view; the memory statistics count
        # what a GPU allocates, the host storage every view of it shares.
        return self.host.untyped_storage()

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]  # torch's is typed more narrowly
        cls, func: Op, types: object, args: Args = (), kwargs: Kwargs | None = None
    ) -> object:
        # Reached only where the fake GPU's mode is not on the stack (it handles every op on
        # these tensors before they get here): the op runs through the harness's mode.
        if cls.harness is None:
            raise RuntimeError(f"the fake GPU: {func} on a fake GPU no longer on")
        with RealCudaMode(cls.harness):
            return func(*args, **(kwargs or {}))


def wrap(host: torch.Tensor, device: torch.device) -> HostBacked:
    out: HostBacked = torch.Tensor._make_wrapper_subclass(
        HostBacked,
        host.size(),
        strides=host.stride(),
        storage_offset=host.storage_offset(),
        dtype=host.dtype,
        layout=host.layout,
        device=device,
        requires_grad=host.requires_grad,
    )
    out.host = host
    return out


MIXED_DEVICES_OK = frozenset(
    {
        # NB: indexing takes host indices (and a host value of one element) with a GPU tensor
        # and moves them itself (aten/src/ATen/native/TensorAdvancedIndexing.cpp).
        _aten.index.Tensor,
        _aten.index_put_.default,
        _aten.index_put.default,
        _aten._index_put_impl_.default,
    }
)


@functools.cache
def _with_generator(func: Op) -> Op | None:
    """``func`` if it takes a ``generator`` (a random op), else the overload of a random factory
    that does (``randn.generator`` for ``randn.default``, ``randint.low_generator`` for
    ``randint.low``), or None."""
    if any(a.name == "generator" for a in func._schema.arguments):
        return func
    name = func._overloadname
    wanted = "generator" if name == "default" else f"{name}_generator"
    drawn = getattr(func.overloadpacket, wanted, None) if func.namespace == "aten" else None
    return drawn if isinstance(drawn, OpOverload) else None


class RealCudaMode(FakeCudaMode):  # type: ignore[no-untyped-call]  # torch's, untyped
    """The fake GPU's mode with real values (see the module's text)."""

    def is_fake(self, t: object) -> TypeGuard[torch.Tensor]:
        return type(t) is HostBacked

    def run(self, func: Op, args: Args, kwargs: Kwargs) -> object:
        handler = _HANDLERS.get(func)
        if handler is not None:
            return handler(self, func, args, kwargs)
        return self.on_fake(func, args, kwargs)

    def replay(self, func: Op, args: Args, kwargs: Kwargs, out: object) -> object:
        """A CUDA graph's replay of an op: computed again, written into the tensors it made at
        capture (as a graph's kernels write into the capture's memory)."""
        fresh = self.run(func, args, kwargs)
        for old, new in zip(_leaves(out), _leaves(fresh), strict=False):
            if type(old) is HostBacked and type(new) is HostBacked and old is not new:
                old.host.copy_(new.host)
        return out

    def on_fake(self, func: Op, args: Args, kwargs: Kwargs) -> object:
        """Runs ``func`` on the host tensors inside its GPU tensors; its tensors come out on
        the op's GPU (the common device of its inputs, or the one it was asked to make them
        on). An op with no GPU in it runs as it is."""
        device: torch.device | None = None
        host_dim: torch.device | None = None
        wrappers: dict[int, HostBacked] = {}

        def unwrap(a: object) -> object:
            nonlocal device, host_dim
            if type(a) is HostBacked:
                d = a.device
                if device is None:
                    device = d
                elif d != device:
                    raise mixed(func, args, kwargs, device, d)
                h = a.host
                wrappers[id(h)] = a
                return h
            if isinstance(a, torch.Tensor) and a.dim() and host_dim is None:
                host_dim = a.device  # a host tensor no GPU kernel takes beside GPU tensors
            return a

        new_args = [
            [unwrap(x) for x in a] if isinstance(a, (list, tuple)) else unwrap(a) for a in args
        ]
        new_kwargs = {k: unwrap(v) for k, v in kwargs.items()}
        asked = _device(kwargs.get("device"))
        if asked is not None and asked.type != "cuda":
            if device is None:
                return super().run(func, args, kwargs)
            return func(*new_args, **new_kwargs)  # made on the host from GPU tensors' shapes
        if asked is not None:
            asked = self.gpu(asked)
            if device is not None and asked != device:
                raise mixed(func, args, kwargs, device, asked)
            device = asked
            new_kwargs["device"] = torch.device("cpu")
            if new_kwargs.get("pin_memory"):
                new_kwargs["pin_memory"] = False
        if device is None:
            return super().run(func, args, kwargs)  # no GPU in it: the placeholder mode's way
        if host_dim is not None and func not in MIXED_DEVICES_OK:
            raise mixed(func, args, kwargs, device, host_dim)
        func = _drawing_on(device, func, new_kwargs)
        out = self.on_host(func, new_args, new_kwargs, device)
        if isinstance(out, (bool, int, float)):
            self.harness.graphs.forbid(f"{func} (a GPU value read on the host)")
        out = self.wrap_out(out, device, wrappers)
        note_fake_op(func, args, kwargs, out, self.t0)  # --gpu NAME: the model's time for it
        return out

    def on_host(self, func: Op, args: list[object], kwargs: Kwargs, device: torch.device) -> object:
        """``func`` run on host tensors for ``device``: the host's out of memory is the GPU's."""
        try:
            return func(*args, **kwargs)
        except RuntimeError as exc:  # NB: a GPU raises its own OOM before the host's allocator
            instead = self.harness.memory.host_refused(exc, device.index or 0)
            if instead is None:
                raise
            raise instead from None

    def wrap_out(
        self, out: object, device: torch.device, wrappers: dict[int, HostBacked]
    ) -> object:
        memory = self.harness.memory
        index = device.index or 0

        def one(t: object) -> object:
            if not isinstance(t, torch.Tensor):
                return t
            same = wrappers.get(id(t))
            if same is not None:  # in place, or out=: the GPU tensor it was given
                if same.shape != t.shape or same.stride() != t.stride():
                    raise NotImplementedError(
                        "the fake GPU (real values): an op changed a GPU tensor's shape in "
                        "place (resize_, set_, t_, ...), which real values cannot follow; its "
                        "placeholder values can"
                    )
                return same
            w = wrap(t, device)
            memory.hold(w, index, t.untyped_storage())
            return w

        if isinstance(out, torch.Tensor):
            return one(out)
        if isinstance(out, (list, tuple)):
            return type(out)(one(t) for t in out)
        return out

    def gpu(self, device: torch.device) -> torch.device:
        """``device`` with its index (a bare ``cuda``: the thread's current GPU), checked."""
        d = torch.device(device)
        if d.index is None:
            d = torch.device("cuda", self.harness.current_device())
        self.harness.check_device(d)
        return d


def _drawing_on(device: torch.device, func: Op, kwargs: Kwargs) -> Op:
    """``func``, or its overload that takes a generator (randn(size) is randn.generator(size,
    generator=None)), drawing from ``device``'s generator unless it was given one."""
    drawn = _with_generator(func)
    if drawn is not None and kwargs.get("generator") is None:
        kwargs["generator"] = torch.cuda.default_generators[device.index or 0]
    return func if drawn is None else drawn


def _leaves(out: object) -> list[object]:
    return list(out) if isinstance(out, (list, tuple)) else [out]


# -- ops that move values between the host and the GPU, or read them ---------------------------

_HANDLERS = _handles = Handlers()


def _host_kwargs(kwargs: Kwargs) -> Kwargs:
    return {**kwargs, "device": torch.device("cpu"), "pin_memory": False, "non_blocking": False}


@_handles(_aten._to_copy.default)
def _to_copy(mode: RealCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    src, dst = _tensor(args[0]), _device(kwargs.get("device"))
    on_gpu = type(src) is HostBacked
    if dst is None or (dst.type != "cuda" and not on_gpu):
        return mode.on_fake(func, args, kwargs)  # a dtype change, or host to host
    host = src.host if type(src) is HostBacked else src
    if dst.type == "cuda":
        dst = mode.gpu(dst)
        if not on_gpu:
            _h2d_capturable(mode, src, bool(kwargs.get("non_blocking")))
        return mode.wrap_out(func(host, **_host_kwargs(kwargs)), dst, {})
    # to the host: the values themselves
    non_blocking = bool(kwargs.get("non_blocking"))
    if not non_blocking:
        mode.harness.graphs.forbid("a copy to the host")
    out = func(host, **_host_kwargs(kwargs))
    # NB: with non_blocking=True a copy to the host allocates pinned memory
    # (aten/src/ATen/native/TensorConversions.cpp).
    if (non_blocking or kwargs.get("pin_memory")) and isinstance(out, torch.Tensor):
        mode.harness.pinned.add(out)
    return out


@_handles(_aten.copy_.default)
def _copy_(mode: RealCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    dst, src = _tensor(args[0]), _tensor(args[1])
    non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking"))
    src_gpu = type(src) is HostBacked
    host_src = src.host if type(src) is HostBacked else src
    if type(dst) is HostBacked:
        if not src_gpu:
            _h2d_capturable(mode, src, non_blocking)
        dst.host.copy_(host_src)
        return dst
    if src_gpu:  # to a host tensor: waits unless pinned and non_blocking
        if not (non_blocking and dst in mode.harness.pinned):
            mode.harness.graphs.forbid("a copy to the host")
        dst.copy_(host_src)
        return dst
    return func(*args, **kwargs)


@_handles(_aten._local_scalar_dense.default)
def _item(mode: RealCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    t = args[0]
    if type(t) is not HostBacked:
        return func(*args, **kwargs)
    mode.harness.graphs.forbid(".item() (a GPU value read on the host)")
    return func(t.host)


# NB: pinning reads no GPU value: the placeholder mode's handlers, on this mode's is_fake
_HANDLERS[_aten.is_pinned.default] = placeholder_handlers[_aten.is_pinned.default]
_HANDLERS[_aten._pin_memory.default] = placeholder_handlers[_aten._pin_memory.default]


@_handles(
    _aten.nonzero.default,
    _aten.masked_select.default,
    _aten._unique2.default,
    _aten.unique_consecutive.default,
    _aten.repeat_interleave.Tensor,
)
def _sized(mode: RealCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    gpu = any(type(a) is HostBacked for a in args)
    if gpu and not (func is _aten.repeat_interleave.Tensor and kwargs.get("output_size")):
        mode.harness.graphs.forbid(f"{func} (an output sized by GPU values)")
    return mode.on_fake(func, args, kwargs)


@_handles(_aten.index.Tensor, _aten.index_put_.default, _aten.index_put.default)
def _index(mode: RealCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    if any(
        type(i) is HostBacked and i.dtype in (torch.bool, torch.uint8)
        for i in _items(args[1])
        if i is not None
    ):
        mode.harness.graphs.forbid(f"{func} with a GPU mask (an output sized by GPU values)")
    return mode.on_fake(func, args, kwargs)


@_handles(_aten.native_dropout.default)
def _dropout(mode: RealCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    """Dropout on a GPU tensor draws its mask from the GPU's generator (native_dropout takes
    none: the CPU kernel would draw from the host's)."""
    t, p = args[0], args[1]
    assert isinstance(p, (int, float)), p
    train = args[2] if len(args) > 2 else kwargs.get("train")
    if type(t) is not HostBacked or train is False:
        return mode.on_fake(func, args, kwargs)
    device = t.device
    g = torch.cuda.default_generators[device.index or 0]
    keep = torch.empty_like(t.host, dtype=torch.bool).bernoulli_(1.0 - p, generator=g)
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    out = t.host * keep * scale
    return mode.wrap_out((out, keep), device, {})
