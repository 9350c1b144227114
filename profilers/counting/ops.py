"""What each aten op means for host/device traffic: pure functions keyed by op.

A classifier sees the op's arguments and output (shapes, devices, dtypes; never values) and says
which copy it made, if any, and whether the host had to wait. The registry refuses duplicates, so
every op has exactly one meaning.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TypeGuard, cast

import torch
from torch._ops import OpOverload

from profilers.names import COPY_TO_DEVICE, COPY_TO_HOST, DATA_DEPENDENT, ITEM


@dataclass(frozen=True, slots=True)
class Transfer:
    """What one op did: a copy (``direction`` set) and/or a host wait (``sync`` set)."""

    direction: str | None
    nbytes: int | None = 0
    """None: the copy's size is symbolic (unknown until the data exists)."""
    pageable: bool = False
    """The host side of the copy is ordinary (unpinned) memory."""
    non_blocking: bool = False
    sync: str | None = None
    src: str | None = None
    dst: str | None = None
    dtype: str | None = None
    """The source's dtype, ``"float32"`` style."""
    made_by: str | None = None
    """The factory op that made the host data inside this op (``lift_fresh``), if any."""


IsPinned = Callable[[torch.Tensor], bool]
Args = tuple[object, ...]  # an op's positional arguments
Kwargs = Mapping[str, object]  # its keyword arguments
Scope = Callable[[], AbstractContextManager[object]]  # a context to run inside (a mode...)
Call = Callable[..., object]  # what runs an op (the OpOverload, its C++ op, a redispatch)
Classifier = Callable[[Args, Kwargs, object, IsPinned], "Transfer | list[Transfer] | None"]
"""An op's rule: what it moved and/or waited for (a list where it did several things)."""

CLASSIFIERS: dict[OpOverload, Classifier] = {}


def _ops(*names: str) -> list[OpOverload]:
    """The overloads that exist in this torch build (``"aten.nonzero.default"`` style names)."""
    found = []
    for name in names:
        ns, op, overload = name.split(".")
        packet = getattr(getattr(torch.ops, ns), op, None)
        ov = getattr(packet, overload, None) if packet is not None else None
        if ov is not None:
            found.append(ov)
    return found


def classifies(*names: str) -> Callable[[Classifier], Classifier]:
    def register(fn: Classifier) -> Classifier:
        for op in _ops(*names):
            if op in CLASSIFIERS:
                raise ValueError(f"{op} already has a classifier")
            CLASSIFIERS[op] = fn
        return fn

    return register


#: Ops that only read metadata: skipped before any other work, and not counted as ops.
METADATA_OPS = frozenset(
    _ops(
        "prim.device.default",
        "prim.layout.default",
        "aten.size.default",
        "aten.size.int",
        "aten.sym_size.default",
        "aten.sym_size.int",
        "aten.stride.default",
        "aten.stride.int",
        "aten.sym_stride.default",
        "aten.sym_stride.int",
        "aten.sym_numel.default",
        "aten.sym_storage_offset.default",
        "aten.numel.default",
        "aten.dim.default",
        "aten.is_pinned.default",
        "aten.is_contiguous.default",
        "aten.is_contiguous.memory_format",
        "aten.is_same_size.default",
        "aten.is_nonzero.default",
    )
)


def _is_host(device: torch.device) -> bool:
    return device.type == "cpu"


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def device_of(t: torch.Tensor) -> torch.device:
    """Where ``t`` lives, read so that another thread cannot change the answer.

    NB: ``FakeTensor.device`` answers ``meta`` while its FakeTensorMode is inside a kernel, and
    that flag is one attribute of the mode, shared by every thread: while a training thread ran
    an op on a user's own FakeTensorMode, a logger thread's ``.item()`` was read as a ``meta``
    tensor and its sync lost (about 3 runs in 7). ``fake_device`` is the tensor's own."""
    fake = getattr(t, "fake_device", None)
    return fake if isinstance(fake, torch.device) else t.device


def nbytes_of(t: torch.Tensor) -> int | None:
    """``t.nbytes``, or None when its size is symbolic (a data-dependent shape under a
    FakeTensorMode with a ShapeEnv: no number exists until the data does)."""
    if any(not isinstance(s, int) for s in t.shape):
        return None
    return int(t.nbytes)


def _empty(t: torch.Tensor) -> bool:
    """Whether ``t`` has no elements (a size known to be 0; a symbolic size is not).

    NB: a copy of no elements moves nothing and waits for nothing: ``copy_impl``
    (aten/src/ATen/native/Copy.cpp) returns before ``copy_stub`` when the TensorIterator over
    the destination has ``numel() == 0``, so CUDA's copy kernel (and the stream sync of
    ``at::cuda::memcpy_and_sync``) never runs; ``_to_copy`` copies through ``copy_``."""
    return any(isinstance(s, int) and s == 0 for s in t.shape)


def direction(src: torch.device, dst: torch.device) -> str | None:
    """``h2d``, ``d2h``, ``p2p`` (two GPUs), ``d2d`` (one GPU), or None (host to host)."""
    if src.type == "meta" or dst.type == "meta":
        return None
    if _is_host(src):
        return None if _is_host(dst) else "h2d"
    if _is_host(dst):
        return "d2h"
    same = src.type == dst.type and (src.index or 0) == (dst.index or 0)
    return "d2d" if same else "p2p"


def _copy(
    src: torch.Tensor, dst: torch.Tensor, non_blocking: bool, is_pinned: IsPinned
) -> Transfer | None:
    src_device, dst_device = device_of(src), device_of(dst)
    way = direction(src_device, dst_device)
    if way is None or _empty(dst):
        return None
    if way == "d2d" and src.dtype != dst.dtype:
        return None  # a cast on one GPU, not a copy
    nbytes = nbytes_of(src)
    s, d, dt = str(src_device), str(dst_device), _dtype(src)
    if way == "h2d":
        # NB: a blocking H2D copy ends in a stream synchronize (at::cuda::memcpy_and_sync, which
        # set_sync_debug_mode flags). non_blocking from pageable memory is staged by the driver
        # while the host waits for the staging, but no stream sync: counted as pageable, no sync.
        return Transfer(
            way,
            nbytes,
            not is_pinned(src),
            non_blocking,
            None if non_blocking else COPY_TO_DEVICE,
            s,
            d,
            dt,
        )
    if way == "d2h":
        pageable = not is_pinned(dst)
        # NB: a non_blocking D2H copy into pageable memory is finished by CUDA before
        # cudaMemcpyAsync returns, so the host waits even though PyTorch flags nothing.
        sync = COPY_TO_HOST if (not non_blocking or pageable) else None
        return Transfer(way, nbytes, pageable, non_blocking, sync, s, d, dt)
    return Transfer(way, nbytes, False, non_blocking, None, s, d, dt)


@classifies("aten._to_copy.default")
def _to_copy(args: Args, kwargs: Kwargs, out: object, is_pinned: IsPinned) -> Transfer | None:
    src = args[0]
    if not isinstance(src, torch.Tensor) or not isinstance(out, torch.Tensor):
        return None
    non_blocking = bool(kwargs.get("non_blocking", False))
    if non_blocking and _is_host(device_of(out)) and not _is_host(device_of(src)):
        # NB: with non_blocking=True, _to_copy to the host allocates its output pinned
        # (aten/src/ATen/native/TensorConversions.cpp), so the copy stays asynchronous: decided
        # from the op, whatever is_pinned() of the output says.
        return _copy(src, out, True, lambda _: True)
    return _copy(src, out, non_blocking, is_pinned)


@classifies("aten.lift_fresh.default")
def _lift_fresh(args: Args, kwargs: Kwargs, out: object, is_pinned: IsPinned) -> Transfer | None:
    """``torch.tensor(data, device="cuda")`` (also ``as_tensor``, ``new_tensor`` and the legacy
    constructors) from Python data: a blocking copy from pageable host memory, made by the data.

    NB: ``internal_new_from_data`` (torch/csrc/utils/tensor_new.cpp) fills a host tensor and
    moves it with ``.to(device)`` while the Python dispatch key is excluded, so no mode sees the
    copy; the ``lift_fresh`` after it, on the moved tensor, is the only op that reaches one. Its
    input on a GPU means that copy was made. Under the fake GPU's lift switch the input is on the
    host and the ``_to_copy`` after it is the copy (counted there, not here)."""
    t = args[0] if args else None
    if not isinstance(t, torch.Tensor) or _is_host(device_of(t)) or device_of(t).type == "meta":
        return None
    if _empty(t):
        return None
    dt = _dtype(t)
    return Transfer(
        "h2d", nbytes_of(t), True, False, COPY_TO_DEVICE, "cpu", str(device_of(t)), dt, "lift_fresh"
    )


@classifies("aten.copy_.default", "aten.copy.default")
def _copy_(args: Args, kwargs: Kwargs, out: object, is_pinned: IsPinned) -> Transfer | None:
    dst, src = args[0], args[1]
    if not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor):
        return None
    non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
    return _copy(src, dst, non_blocking, is_pinned)


@classifies("aten._local_scalar_dense.default")
def _item(args: Args, kwargs: Kwargs, out: object, is_pinned: IsPinned) -> Transfer | None:
    # NB: .item(), float(t), int(t), bool(t) and `if t:` all reach _local_scalar_dense, which on a
    # GPU copies one element to the host and synchronises (at::cuda::memcpy_and_sync).
    t = args[0]
    if not isinstance(t, torch.Tensor) or _is_host(device_of(t)):
        return None
    return Transfer("d2h", t.element_size(), True, False, ITEM, str(device_of(t)), "cpu", _dtype(t))


def _data_dependent(t: object) -> Transfer | None:
    if isinstance(t, torch.Tensor) and _on_gpu(t):
        return Transfer(None, sync=DATA_DEPENDENT)
    return None


@classifies(
    "aten.nonzero.default",
    "aten.nonzero_numpy.default",
    "aten.masked_select.default",
    "aten._unique.default",
    "aten._unique2.default",
    "aten.unique_dim.default",
    "aten.unique_consecutive.default",
    "aten.unique_dim_consecutive.default",
)
def _shape_from_values(
    args: Args, kwargs: Kwargs, out: object, is_pinned: IsPinned
) -> Transfer | None:
    # NB: the output size depends on the values, so the GPU must finish and report it before the
    # host can allocate the output (set_sync_debug_mode flags each of these).
    return _data_dependent(args[0])


@classifies("aten.repeat_interleave.Tensor", "aten.repeat_interleave.self_Tensor")
def _repeat_interleave(
    args: Args, kwargs: Kwargs, out: object, is_pinned: IsPinned
) -> Transfer | None:
    if kwargs.get("output_size") is not None:
        return None  # the caller said the size: no wait
    return _data_dependent(args[0])


def _is_mask(i: object) -> TypeGuard[torch.Tensor]:
    return isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)


def _indices_moved(
    self: torch.Tensor, indices: Sequence[object], out: object, is_pinned: IsPinned
) -> list[Transfer] | None:
    """What indexing a GPU tensor with ``indices`` does before any kernel runs: the copies of
    index tensors held on the host, then the sync where a mask on the GPU needs ``nonzero``.

    NB: aten/src/ATen/native/IndexingUtils.h (expandTensors): a boolean mask becomes long
    indices by ``nonzero``: on the GPU that waits for the count; on the host it is computed
    there into pinned memory and copied with non_blocking=True. An integer index on the host
    is copied with a plain, blocking ``index.to(self.device)``."""
    moved: list[Transfer] = []
    gpu_mask = False
    dst = str(device_of(self))
    for pos, i in enumerate(indices):
        if not isinstance(i, torch.Tensor) or device_of(i).type == "meta":
            continue
        if _is_mask(i):
            if not _is_host(device_of(i)):
                gpu_mask = True
                continue
            n = _mask_count(i, pos, indices, out)
            if n == 0:
                continue  # no index selected: nothing to copy (see _empty)
            moved.append(
                Transfer("h2d", n * 8 * max(i.dim(), 1), False, True, None, "cpu", dst, "int64")
            )
        elif _is_host(device_of(i)) and not _empty(i):
            pageable = not is_pinned(i)
            moved.append(
                Transfer(
                    "h2d", nbytes_of(i), pageable, False, COPY_TO_DEVICE, "cpu", dst, _dtype(i)
                )
            )
    if gpu_mask:
        moved.append(Transfer(None, sync=DATA_DEPENDENT))
    return moved or None


def _mask_count(mask: torch.Tensor, pos: int, indices: Sequence[object], out: object) -> int:
    """How many elements a host mask selects: read off ``out`` when the mask is the only
    index (its selected rows are out's dimension ``pos``), else counted on the host."""
    others = [i for i in indices if i is not None]
    if isinstance(out, torch.Tensor) and len(others) == 1 and pos < out.dim():
        return int(out.shape[pos])
    return int(mask.count_nonzero())


def _on_gpu(t: object) -> TypeGuard[torch.Tensor]:
    if not isinstance(t, torch.Tensor):
        return False
    device = device_of(t)
    return not _is_host(device) and device.type != "meta"


@classifies("aten.index.Tensor")
def _index(args: Args, kwargs: Kwargs, out: object, is_pinned: IsPinned) -> list[Transfer] | None:
    # NB: t[mask] dispatches only aten.index.Tensor; the nonzero that turns the mask into
    # indices runs inside it, so the rule must recognise the index itself.
    if not _on_gpu(args[0]):
        return None
    # NB: cast, not checked: the schema's ``Tensor?[] indices`` (a list, or None in an empty list)
    return _indices_moved(args[0], cast("list[object]", args[1]) or (), out, is_pinned)


@classifies("aten.index_put_.default", "aten.index_put.default", "aten._index_put_impl_.default")
def _index_put(
    args: Args, kwargs: Kwargs, out: object, is_pinned: IsPinned
) -> list[Transfer] | None:
    self, indices = args[0], cast("list[object]", args[1])  # the schema's Tensor?[] (as _index)
    if not _on_gpu(self):
        return None
    values = args[2] if len(args) > 2 else kwargs.get("values")
    accumulate = bool(args[3] if len(args) > 3 else kwargs.get("accumulate", False))
    masks = [i for i in indices if _is_mask(i)]
    # NB: TensorAdvancedIndexing.cpp (index_put_, canDispatchToMaskedFill): one mask on self's
    # device, no other index tensor, accumulate=False and a one-element value on the host (what
    # `t[mask] = 0.0` passes) goes to masked_fill_: no nonzero, no wait.
    if (
        not accumulate
        and len(masks) == 1
        and device_of(masks[0]) == device_of(self)
        and all(i is None or i is masks[0] for i in indices)
        and isinstance(values, torch.Tensor)
        and values.numel() == 1
        and _is_host(device_of(values))
    ):
        return None
    return _indices_moved(self, indices, None, is_pinned)


def classify(
    func: OpOverload, args: Args, kwargs: Kwargs, out: object, is_pinned: IsPinned
) -> Transfer | list[Transfer] | None:
    """The transfer and/or sync ``func(*args, **kwargs) -> out`` made; None for a plain op."""
    fn = CLASSIFIERS.get(func)
    return None if fn is None else fn(args, kwargs, out, is_pinned)


def default_is_pinned(t: torch.Tensor) -> bool:
    """``t.is_pinned()``; False where a tensor type cannot say (fake tensors)."""
    try:
        return bool(t.is_pinned())
    except (RuntimeError, NotImplementedError):
        return False
