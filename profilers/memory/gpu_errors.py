"""A device mismatch's and an out-of-memory error's text as PyTorch writes them on a GPU.

NB: two checks raise "Expected all tensors to be on the same device" in torch 2.13 (strings in
libtorch_cpu): the one generated into each CUDA kernel's wrapper, which walks the op's tensor
arguments in order (``c10::impl::check_and_update_common_device``, ATen/core/op_registration/
adaption.h; the wrapper's name from torchgen/dest/register_dispatch_key.py), and TensorIterator's
own, for ops declared ``device_check: NoCheck`` in native_functions.yaml ("found at least two
devices, cuda:0 and cpu!", the text FakeTensor already uses). Which one an op has is read from
the native_functions.yaml torch ships in torchgen/packaged, once, when the first mismatch happens.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping

import torch
from torch._ops import OpOverload

SAME_DEVICE = "Expected all tensors to be on the same device"

_KERNEL_OF = {"embedding": "index_select"}
"""Ops with no CUDA kernel of their own whose check is that of the kernel they call:
``embedding`` is ``weight.index_select(0, indices)`` (aten/src/ATen/native/Embedding.cpp)."""


@functools.cache
def _declarations() -> dict[str, tuple[bool, bool]]:
    """``name.overload`` -> (checked by the wrapper, structured), from native_functions.yaml."""
    import torchgen

    path = os.path.join(
        os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml"
    )
    out: dict[str, tuple[bool, bool]] = {}
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return out
    for block in text.split("\n- func: ")[1:]:
        head = block.split("(", 1)[0].strip()
        checked = "device_check: NoCheck" not in block
        kernel = "structured_delegate:" in block or re.search(r"\n\s+(\w+, )*CUDA\b", block)
        out[head] = (checked and bool(kernel), "structured_delegate:" in block)
    return out


Args = tuple[object, ...]  # an op's positional arguments (counting/ops.py's)
Kwargs = Mapping[str, object]


def _arguments(func: OpOverload, args: Args, kwargs: Kwargs) -> list[tuple[str, object]]:
    """(name, value) of the op's positional arguments, as the wrapper's check walks them."""
    return [
        (a.name, args[i] if i < len(args) else kwargs.get(a.name))
        for i, a in enumerate(func._schema.arguments)
        if not a.kwarg_only
    ]


def mismatch_message(func: OpOverload, args: Args, kwargs: Kwargs) -> str | None:
    """The text a GPU gives ``func`` on these arguments, or None where the op is not checked
    by its wrapper (TensorIterator's text, which FakeTensor's matches, stands then)."""
    name = func._schema.name.removeprefix("aten::")
    overload = func._overloadname
    kernel = _KERNEL_OF.get(name)
    if kernel is not None:
        named = dict(_arguments(func, args, kwargs))
        # embedding(weight, indices) -> index_select(self=weight, dim, index=indices)
        pairs = [("self", named.get("weight")), ("index", named.get("indices"))]
        name, overload, structured = kernel, "", False
    else:
        checked, structured = _declarations().get(
            name if overload == "default" else f"{name}.{overload}", (False, False)
        )
        if not checked:
            return None
        pairs = _arguments(func, args, kwargs)
        if overload == "default":
            overload = ""
    common: torch.device | None = None
    for arg, value in pairs:
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if not isinstance(t, torch.Tensor):
                continue
            if common is None:
                common = t.device
            elif t.device != common:
                method = f"wrapper_CUDA_{name}" if structured else f"wrapper_CUDA_{overload}_{name}"
                return (
                    f"{SAME_DEVICE}, but got {arg} is on {t.device}, different from other "
                    f"tensors on {common} (when checking argument in method {method})"
                )
    return None


def mismatch(a: torch.device, b: torch.device) -> RuntimeError:
    """What a GPU's kernels raise for tensors on two devices (ATen's TensorIterator words)."""
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"{a} and {b}!"
    )


def mixed(
    func: OpOverload, args: Args, kwargs: Kwargs, a: torch.device, b: torch.device
) -> RuntimeError:
    """What a GPU raises for ``func`` on tensors of two devices: its kernel wrapper's words
    where it has one (naming the argument), else TensorIterator's."""
    text = mismatch_message(func, args, kwargs)
    return RuntimeError(text) if text is not None else mismatch(a, b)


def list_mismatch(func: OpOverload, args: Args, kwargs: Kwargs) -> RuntimeError | None:
    """What a GPU raises for an op on lists of tensors (``_foreach_*``, ``_fused_*``) whose
    tensors are on two devices, or None: the wrapper's words where the op is checked by one
    (``_fused_adam_``), else TensorIterator's, from the slow path a foreach kernel takes when
    the tensors of one index are not on one device (ForeachBinaryOpList.cu: each pair goes
    through ``add_``, ``lerp_``, ...; a 0-dim host tensor goes with a GPU one as a number)."""
    lists = [
        v
        for v in (*args, *kwargs.values())
        if isinstance(v, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in v)
    ]
    if not lists:
        return None
    text = mismatch_message(func, args, kwargs)
    if text is not None:
        return RuntimeError(text)
    for i in range(max(len(v) for v in lists)):
        at = [v[i] for v in lists if i < len(v) and isinstance(v[i], torch.Tensor)]
        gpu = next((t.device for t in at if t.device.type == "cuda"), None)
        for t in at if gpu is not None else ():
            if t.device != gpu and not (t.device.type == "cpu" and t.dim() == 0):
                assert gpu is not None
                return mismatch(gpu, t.device)
    return None


def format_size(nbytes: float) -> str:
    """Sizes as CUDA's caching allocator writes them (``format_size``: bytes, KiB, MiB, GiB)."""
    if nbytes < 1024:
        return f"{int(nbytes)} bytes"
    if nbytes < 1024 * 1024:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes < 1024**3:
        return f"{nbytes / 1024**2:.2f} MiB"
    return f"{nbytes / 1024**3:.2f} GiB"


def out_of_memory(index: int, requested: int, capacity: int, allocated: int) -> Exception:
    """``torch.OutOfMemoryError`` as the caching allocator raises it (CUDACachingAllocator.cpp),
    for a simulated GPU of ``capacity`` bytes with ``allocated`` in use."""
    free = max(0, capacity - allocated)
    exc = torch.OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate {format_size(requested)}. GPU {index} has a "
        f"total capacity of {format_size(capacity)} of which {format_size(free)} is free. Of "
        f"the allocated memory {format_size(allocated)} is allocated by PyTorch. (simulated "
        "by gpuwatch --fake-cuda)"
    )
    exc.gpuwatch_oom = (index, requested, capacity)  # type: ignore[attr-defined]
    return exc


_OOM = re.compile(r"Tried to allocate ([\d.]+) (bytes|KiB|MiB|GiB)\. GPU (\d+)")
_UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def oom_facts(exc: BaseException) -> tuple[int, int, int | None] | None:
    """(GPU index, bytes asked for, the GPU's size or None) of an out-of-memory error."""
    exact = getattr(exc, "gpuwatch_oom", None)
    if exact is not None:
        return int(exact[0]), int(exact[1]), int(exact[2])
    m = _OOM.search(str(exc))
    if m is None:
        return None
    return int(m.group(3)), int(float(m.group(1)) * _UNITS[m.group(2)]), None
