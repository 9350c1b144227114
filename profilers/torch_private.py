"""Every private hook of torch (and of Python) the profiler uses, resolved once, at import.

Each is a name torch does not promise to keep. Resolving them all here means a torch upgrade that
drops or renames one is seen in one place: :data:`MISSING` names what did not resolve, and
``tests/test_torch_private.py`` fails on the supported torch if anything is missing, instead of
the profiler silently counting less. Where one is missing at run time the profiler still works,
with the loss said in each entry below.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch._ops import OpOverload as OpOverload

_FAST = "the fast path of --no-kernel-timing (the dispatch mode counts instead, slower)"

#: Hook name -> what is lost without it.
WHAT_EACH_GIVES: dict[str, str] = {
    "torch._C._dynamo.eval_frame.set_eval_frame": "the profiler's own frames hidden from dynamo "
    "in one C call (torch's slower per-op wrapper stays instead)",
    "torch._C._dynamo.eval_frame.set_code_exec_strategy": "dispatch() marked for dynamo to skip",
    "torch._C._autograd._get_sequence_nr": "backward ops charged to their forward line",
    "torch._C._current_autograd_node": "backward ops charged to their forward line",
    "torch._ops.OpOverload._op": "one Python frame fewer per op (the C++ op called directly)",
    "torch._C._cuda_getCurrentStream": "CUDA events recorded on the op's stream (timing)",
    "torch._C._CudaEventBase": "CUDA events recorded without a Python wrapper (timing)",
    "torch._tensor_str._str": "printing a CUDA tensor counted as a sync",
    "torch.cuda._gpu_trace": "--trace-syncs",
    "torch._C._activate_gpu_trace": "--trace-syncs",
    "threading.Thread._bootstrap_inner": "threads started by the script profiled",
    "torch._C._only_lift_cpu_tensors": "the copy inside torch.tensor(data, device='cuda')",
    "torch._C._set_only_lift_cpu_tensors": "the copy inside torch.tensor(data, device='cuda')",
    "torch._C._dispatch_has_kernel_for_dispatch_key": "copies and syncs of ops that reach the "
    "mode undecomposed in inference mode (to, item, cpu) counted by what they are made of",
    "torch._ops.OpOverload.decompose": "copies and syncs of ops that reach the mode undecomposed "
    "in inference mode (to, item, cpu) counted by what they are made of",
    "torch._C.DispatchKey.PreDispatch": _FAST,
    "torch._C._IncludeDispatchKeyGuard": _FAST,
    "torch._C._ExcludeDispatchKeyGuard": _FAST,
    "torch._C._dispatch_keyset_full_after": _FAST,
    "torch.library.fallthrough_kernel": _FAST,
    "torch._guards.TracingContext.try_get": "torch.compile's tracing told from running code on "
    "the fast path (copies of code being compiled would be counted)",
}

MISSING: list[str] = []
"""The hooks of :data:`WHAT_EACH_GIVES` that this torch does not have."""


def _find(path: str) -> Any:
    """The object at dotted ``path`` (``torch.`` or ``threading.`` first), or None."""
    root, *parts = path.split(".")
    obj: Any = {"torch": torch, "threading": threading}[root]
    for part in parts:
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                import importlib

                obj = importlib.import_module(f"{obj.__name__}.{part}")
            except (ImportError, AttributeError):
                MISSING.append(path)
                return None
    return obj


def _no_eval_frame(callback: Any) -> Any:
    return None


def _no_node() -> Any:
    return None


# -- dynamo: hiding the hot path from torch.compile --------------------------------------------
eval_frame: Any = _find("torch._C._dynamo.eval_frame")
set_eval_frame: Callable[[Any], Any] = (
    _find("torch._C._dynamo.eval_frame.set_eval_frame") or _no_eval_frame
)
set_code_exec_strategy: Any = _find("torch._C._dynamo.eval_frame.set_code_exec_strategy")

# -- autograd: which node a backward op runs for, and which forward op made it ------------------
# NB: autograd makes an op's backward node (numbered from a per-thread counter) before the op
# reaches a dispatch mode, and during backward names the node running; both are C calls.
sequence_nr: Callable[[], int] | None = _find("torch._C._autograd._get_sequence_nr")
current_node: Callable[[], Any] = _find("torch._C._current_autograd_node") or _no_node
if sequence_nr is None:
    current_node = _no_node
BACKWARD_NODES = sequence_nr is not None and current_node is not _no_node
"""Both autograd hooks are there: backward ops can be charged to forward lines."""

# -- ops: calling an OpOverload's C++ op directly ------------------------------------------------
OP_OVERLOAD_HAS_OP = hasattr(torch.ops.aten.add.Tensor, "_op")
if not OP_OVERLOAD_HAS_OP:
    MISSING.append("torch._ops.OpOverload._op")

# -- CUDA timing ----------------------------------------------------------------------------------
cuda_current_stream: Any = _find("torch._C._cuda_getCurrentStream")
cuda_event_base: Any = _find("torch._C._CudaEventBase")

# -- syncs outside the dispatcher -------------------------------------------------------------------
tensor_str: Any = _find("torch._tensor_str")
_find("torch._tensor_str._str")
gpu_trace: Any = _find("torch.cuda._gpu_trace")
activate_gpu_trace: Any = _find("torch._C._activate_gpu_trace")

# -- torch.tensor(data, device=...) --------------------------------------------------------------
only_lift_cpu_tensors: Any = _find("torch._C._only_lift_cpu_tensors")
set_only_lift_cpu_tensors: Any = _find("torch._C._set_only_lift_cpu_tensors")

# -- threads ----------------------------------------------------------------------------------------
THREAD_BOOTSTRAP = "_bootstrap_inner"
_find("threading.Thread._bootstrap_inner")

# -- the fast path: Python kernels for the counted ops only (profilers/counting/kernels.py) ---------------
dispatch_key_pre_dispatch: Any = _find("torch._C.DispatchKey.PreDispatch")
include_dispatch_key_guard: Any = _find("torch._C._IncludeDispatchKeyGuard")
exclude_dispatch_key_guard: Any = _find("torch._C._ExcludeDispatchKeyGuard")
keyset_full_after: Any = _find("torch._C._dispatch_keyset_full_after")
fallthrough_kernel: Any = _find("torch.library.fallthrough_kernel")
tracing_context: Callable[[], Any] | None = _find("torch._guards.TracingContext.try_get")

# -- inference mode: composite ops reach the mode whole (profilers/counting/dispatch.py) ----------------
_has_kernel: Any = _find("torch._C._dispatch_has_kernel_for_dispatch_key")
_find("torch._ops.OpOverload.decompose")
_implicit_key: Any = getattr(torch._C.DispatchKey, "CompositeImplicitAutograd", None)


def composite_implicit(func: Any) -> bool:
    """Whether ``func`` is made of other ops by a CompositeImplicitAutograd kernel."""
    if _has_kernel is None or _implicit_key is None or not hasattr(func, "decompose"):
        return False
    try:
        return bool(_has_kernel(func.name(), _implicit_key))
    except (RuntimeError, AttributeError):
        return False
