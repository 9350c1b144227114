"""The dispatch mode of ``--fake-cuda``: ops on GPU tensors run on fake tensors, the rest for
real; values and sizes the host reads back from the fake GPU are placeholders, counted."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeAlias, TypeGuard, TypeVar

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

from profilers.counting.user_fake import PER_THREAD_FLAG
from profilers.memory.gpu_errors import list_mismatch, mismatch_message
from profilers.timing.fake_time import note_fake_op, note_harness, sim_clock, wall_clock
from profilers.torch_private import OpOverload, fake_device_mismatch

if TYPE_CHECKING:
    from torch._subclasses.fake_tensor import FakeTensor

    from profilers.fake_cuda.harness import FakeCuda
    from profilers.fake_cuda.real import HostBacked

_aten = torch.ops.aten

Op: TypeAlias = "OpOverload[..., object]"
Args = tuple[object, ...]
Kwargs = dict[str, object]
GpuTensor: TypeAlias = "FakeTensor | HostBacked"
"""An op as a mode gets it, its positional and keyword arguments; a fake GPU's tensor."""


def fake_tensor_mode() -> FakeTensorMode:
    """A ``FakeTensorMode`` whose "inside a kernel" flag is per thread.

    NB: FakeTensor.device answers ``meta`` while its mode says it is inside a kernel, and the
    stock flag is one attribute of the mode: while one thread ran a fake op, a fake tensor's
    device read on another thread (the profiler classifying a copy) was ``meta``, and the copy
    was lost, in about one run in three of threads copying while backward ran."""

    class PerThreadFakeTensorMode(FakeTensorMode):  # type: ignore[no-untyped-call]
        in_kernel_invocation = PER_THREAD_FLAG

    return PerThreadFakeTensorMode(allow_non_fake_inputs=True)


# -- the mode -------------------------------------------------------------------------------------


def _is_cuda(device: object) -> TypeGuard[torch.device | str]:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return isinstance(device, str) and device.startswith("cuda")


def _device(device: object) -> torch.device | None:
    """An op's ``device`` argument (None: none given)."""
    return torch.device(device) if isinstance(device, (torch.device, str, int)) else None


def _tensor(arg: object) -> torch.Tensor:
    """An op's argument that its schema says is a tensor."""
    assert isinstance(arg, torch.Tensor), arg
    return arg


def _items(arg: object) -> Sequence[object]:
    """An op's argument that its schema says is a list (``Tensor?[] indices``)."""
    assert isinstance(arg, (list, tuple)), arg
    return arg


def _named(func: Op, args: Args, kwargs: Kwargs) -> dict[str, object]:
    """An op's arguments by their schema's names."""
    return dict(zip([a.name for a in func._schema.arguments], args, strict=False)) | kwargs


def _tensors(args: Args, kwargs: Kwargs) -> Iterator[object]:
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a
    yield from kwargs.values()


_Handler = TypeVar("_Handler", bound=Callable[..., object])


class Handlers(dict["Op", Callable[..., object]]):
    """op -> the function that runs it in a mode, ``(mode, func, args, kwargs)``; a call
    registers one for ``ops`` (``@_handles(op, ...)``)."""

    def __call__(self, *ops: Op) -> Callable[[_Handler], _Handler]:
        def register(fn: _Handler) -> _Handler:
            self.update(dict.fromkeys(ops, fn))
            return fn

        return register


_HANDLERS = _handles = Handlers()


class FakeCudaMode(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's, untyped
    """Runs ops on GPU tensors on fake tensors and the rest for real (see the module's text)."""

    gpuwatch_kept_on_print = True
    """On while a tensor prints: its values are the placeholders (profilers/counting/printing.py)."""

    t0: int | None = None
    """When the op under way entered the mode (sim_clock); None before any (an op the harness
    runs itself, outside the dispatcher, has no time of its own to predict)."""

    def __init__(self, harness: FakeCuda) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.harness = harness
        self.fake = harness.fake_mode
        # NB: one FakeTensorMode for every thread (fake tensors belong to the mode that made
        # them), and its state while an op runs is the mode's, not the thread's: ops on fake
        # tensors are run one at a time (meta computation only, no user code inside).
        self.lock = harness.fake_lock

    def is_fake(self, t: object) -> TypeGuard[torch.Tensor]:
        return isinstance(t, self.harness.fake_type)

    def __torch_dispatch__(
        self, func: Op, types: object, args: Args = (), kwargs: Kwargs | None = None
    ) -> object:
        self.t0 = t0 = sim_clock()  # NB: the simulation's time from here is no host time (--gpu)
        wall0 = wall_clock()
        try:
            kwargs = kwargs or {}
            graphs = self.harness.graphs
            if graphs.busy:  # a CUDA graph capture or replay under way (fake_cuda/graphs.py)
                done, out = graphs.replayed(func)
                if done:
                    out = self.replay(func, args, kwargs, out)
                else:
                    out = self.run(func, args, kwargs)
                # NB: a graph replayed while another is captured is captured with it
                graphs.recorded(func, args, kwargs, out, self.is_fake)
                return out
            return self.run(func, args, kwargs)
        finally:  # every op, on the fake GPU or not: the harness's time is not the script's
            note_harness(t0, func, args, wall0)

    def replay(self, func: Op, args: Args, kwargs: Kwargs, out: object) -> object:
        """A CUDA graph's replay of an op: what it made at capture (placeholders: nothing to
        compute again; real values compute it again, fake_cuda/real.py)."""
        return out

    def run(self, func: Op, args: Args, kwargs: Kwargs) -> object:
        handler = _HANDLERS.get(func)
        if handler is not None:
            return handler(self, func, args, kwargs)
        device = kwargs.get("device")
        if _is_cuda(device):
            self.harness.check_device(device)
        elif not any(self.is_fake(t) for t in _tensors(args, kwargs)):
            if kwargs.get("pin_memory"):  # torch.empty(..., pin_memory=True) and the like
                out = func(*args, **{**kwargs, "pin_memory": False})
                return self.harness.pinned.add(out) if isinstance(out, torch.Tensor) else out
            return func(*args, **kwargs)
        return self.on_fake(func, args, kwargs)

    def on_fake(self, func: Op, args: Args, kwargs: Kwargs) -> object:
        # NB: FakeTensor lets lists of tensors on two devices through; a GPU does not.
        wrong = list_mismatch(func, args, kwargs)
        if wrong is not None:
            raise wrong
        # NB: host tensors go in as fake tensors made here: given real ones, FakeTensorMode would
        # run the op for real on them ("constant propagation"), which a CUDA op cannot do here.
        args, kwargs = tree_map_only(torch.Tensor, self.to_fake, (args, kwargs))
        try:
            with self.lock, self.fake:
                out = func(*args, **kwargs)
            self.harness.memory.note(out, self.harness.fake_type)
            note_fake_op(func, args, kwargs, out, self.t0)  # --gpu NAME: the model's time for it
            return out
        except DataDependentOutputException:
            returns = func._schema.returns
            if len(returns) == 1 and str(returns[0].type) in ("bool", "int", "float"):
                self.harness.graphs.forbid(f"{func} (a GPU value read on the host)")
                self.harness.placeholders.note("values")
                return {"bool": False, "int": 0, "float": 0.0}[str(returns[0].type)]
            raise NotImplementedError(
                f"the fake GPU: {func} reads GPU values, which a fake GPU does not have"
            ) from None
        except DynamicOutputShapeException:
            raise NotImplementedError(
                f"the fake GPU: the size of {func}'s output depends on GPU values, "
                "which a fake GPU does not have"
            ) from None
        except RuntimeError as exc:
            if not fake_device_mismatch(exc):
                raise
            # NB: the RuntimeError a GPU raises, with its text, and no fake-tensor frames
            text = mismatch_message(func, args, kwargs) or str(exc)
            raise RuntimeError(text).with_traceback(None) from None

    def to_fake(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, self.harness.fake_type):
            return t
        return self.fake.from_tensor(t, static_shapes=True)

    def fake_empty(
        self,
        shape: Sequence[int | torch.SymInt],
        like: torch.Tensor,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        with self.lock, self.fake:
            out = torch.empty(shape, dtype=dtype or like.dtype, device=like.device)
        self.harness.memory.note(out, self.harness.fake_type)
        return out


@_handles(_aten._to_copy.default)
def _to_copy(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    src, dst = _tensor(args[0]), _device(kwargs.get("device"))
    if mode.is_fake(src) and dst is not None and dst.type == "cpu":
        if not kwargs.get("non_blocking"):
            mode.harness.graphs.forbid("a copy to the host")
        if src.numel():  # no elements: nothing that a GPU would give differently
            mode.harness.placeholders.note("host_copies")
        dtype = kwargs.get("dtype")
        out = torch.zeros(
            tuple(src.shape), dtype=dtype if isinstance(dtype, torch.dtype) else src.dtype
        )
        # NB: with non_blocking=True a copy to the host allocates pinned memory
        # (aten/src/ATen/native/TensorConversions.cpp).
        pinned = kwargs.get("non_blocking") or kwargs.get("pin_memory")
        return mode.harness.pinned.add(out) if pinned else out
    if dst is not None and dst.type == "cuda":
        mode.harness.check_device(dst)
        if not mode.is_fake(src):
            _h2d_capturable(mode, src, bool(kwargs.get("non_blocking")))
    elif not mode.is_fake(src):
        return func(*args, **kwargs)
    return mode.on_fake(func, args, kwargs)


@_handles(_aten.copy_.default)
def _copy_(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    dst, src = _tensor(args[0]), args[1]
    non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking"))
    if mode.is_fake(dst):
        if isinstance(src, torch.Tensor) and not mode.is_fake(src):
            _h2d_capturable(mode, src, non_blocking)
        return mode.on_fake(func, args, kwargs)
    if mode.is_fake(src):  # to a real host tensor: the values are placeholders
        if not (non_blocking and dst in mode.harness.pinned):
            mode.harness.graphs.forbid("a copy to the host")
        if dst.numel():
            mode.harness.placeholders.note("host_copies")
        return dst.zero_()
    return func(*args, **kwargs)


def _h2d_capturable(mode: FakeCudaMode, src: torch.Tensor, non_blocking: bool) -> None:
    # NB: a graph can hold a copy from pinned host memory (cudaMemcpyAsync, read at each
    # replay); a blocking copy waits, and a copy from pageable memory is refused while capturing.
    if src.device.type == "cpu" and not (non_blocking and src in mode.harness.pinned):
        mode.harness.graphs.forbid("a copy to the GPU from pageable or blocking host memory")


@_handles(_aten._local_scalar_dense.default)
def _item(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    t = args[0]
    if not mode.is_fake(t):
        return func(*args, **kwargs)
    mode.harness.graphs.forbid(".item() (a GPU value read on the host)")
    mode.harness.placeholders.note("values")
    if t.dtype == torch.bool:
        return False
    if t.dtype.is_floating_point:
        return 0.0
    if t.dtype.is_complex:
        return 0j
    return 0


@_handles(_aten.is_pinned.default)
def _is_pinned(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    t = _tensor(args[0])
    if mode.is_fake(t) or t.device.type != "cpu":
        return False
    return t in mode.harness.pinned


@_handles(_aten._pin_memory.default)
def _pin(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    t = _tensor(args[0])
    if mode.is_fake(t):
        return mode.on_fake(_aten.clone.default, (t,), {})
    return mode.harness.pinned.add(t.clone())


# Ops whose output size depends on the values: every element is kept (the largest output).


def _sized_by_values(mode: FakeCudaMode, func: Op) -> None:
    mode.harness.graphs.forbid(f"{func} (an output sized by GPU values)")
    mode.harness.placeholders.note("sizes")


@_handles(_aten.nonzero.default)
def _nonzero(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    t = args[0]
    if not mode.is_fake(t):
        return func(*args, **kwargs)
    _sized_by_values(mode, func)
    return mode.fake_empty((t.numel(), t.dim()), t, torch.long)


@_handles(_aten.masked_select.default)
def _masked_select(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    t, mask = _tensor(args[0]), _tensor(args[1])
    if not (mode.is_fake(t) or mode.is_fake(mask)):
        return func(*args, **kwargs)
    _sized_by_values(mode, func)
    n = torch.Size(torch.broadcast_shapes(t.shape, mask.shape)).numel()  # type: ignore[no-untyped-call]
    return mode.fake_empty((n,), t if mode.is_fake(t) else mask, t.dtype)


@_handles(_aten._unique2.default, _aten.unique_consecutive.default)
def _unique(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    t = args[0]
    if not mode.is_fake(t):
        return func(*args, **kwargs)
    _sized_by_values(mode, func)
    given = _named(func, args, kwargs)
    dim = given.get("dim")
    n = t.shape[dim] if isinstance(dim, int) else t.numel()
    values = mode.fake_empty((n,) if dim is None else tuple(t.shape), t)
    inverse = mode.fake_empty(
        tuple(t.shape) if given.get("return_inverse") else (0,), t, torch.long
    )
    counts = mode.fake_empty((n,) if given.get("return_counts") else (0,), t, torch.long)
    return values, inverse, counts


@_handles(_aten.repeat_interleave.Tensor)
def _repeat_interleave(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    repeats = args[0]
    if not mode.is_fake(repeats):
        return func(*args, **kwargs)
    size = kwargs.get("output_size")
    if not isinstance(size, (int, torch.SymInt)):  # None (the schema's only other value)
        _sized_by_values(mode, func)
        size = repeats.numel()  # each element once: the repeat counts are GPU values
    return mode.fake_empty((size,), repeats, repeats.dtype)


def _mask_indices(mode: FakeCudaMode, indices: Sequence[object]) -> tuple[list[object], bool]:
    """Boolean masks among ``indices`` as the long indices they stand for: a real host mask's
    own (exact), a GPU mask's every element (a placeholder)."""
    out: list[object] = []
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
def _index(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    t, indices = args[0], _items(args[1])
    if not mode.is_fake(t) and not any(mode.is_fake(i) for i in indices if i is not None):
        return func(*args, **kwargs)
    new, placeholder = _mask_indices(mode, indices)
    if placeholder:
        _sized_by_values(mode, func)
    return mode.on_fake(func, (t, new, *args[2:]), kwargs)


@_handles(_aten.index_put_.default, _aten.index_put.default, _aten._index_put_impl_.default)
def _index_put(mode: FakeCudaMode, func: Op, args: Args, kwargs: Kwargs) -> object:
    t, indices = args[0], _items(args[1])
    if not mode.is_fake(t):
        return func(*args, **kwargs)
    if any(
        mode.is_fake(i) and i.dtype in (torch.bool, torch.uint8) for i in indices if i is not None
    ):
        # Which elements a GPU mask selects is a GPU value: the write is taken as done.
        mode.harness.graphs.forbid(f"{func} with a GPU mask (an output sized by GPU values)")
        if func is _aten.index_put.default:
            return mode.on_fake(_aten.clone.default, (t,), {})
        return t
    new, _ = _mask_indices(mode, indices)
    return mode.on_fake(func, (t, new, *args[2:]), kwargs)
