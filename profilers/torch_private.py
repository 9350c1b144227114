"""Every private hook of torch (and of Python) the profiler uses, resolved once, at import.

Each is a name torch does not promise to keep. Resolving them all here means a torch upgrade that
drops or renames one is seen in one place: :data:`MISSING` names what did not resolve, and
``tests/test_torch_private.py`` fails on the supported torch if anything is missing, instead of
the profiler silently counting less. Where one is missing at run time the profiler still works,
with the loss said in each entry below.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import CodeType, ModuleType
from typing import Any

import torch
from torch._ops import OpOverload as OpOverload
from torch.autograd.graph import Node

_FAST = "the fast path of --no-kernel-timing (the dispatch mode counts instead, slower)"
_FAKE = "--fake-cuda"
_MODE = "the profiler itself (its dispatch mode)"
_PRINT = "printing a CUDA tensor counted as a sync"
_INPUT = (
    "a loader's own ops run at full speed in its wait (else through the mode, its cost taken out)"
)

NATIVE_REQUIRES_INIT = "libtorch_python: torch::utils::set_requires_device_init"
"""A C++ function, not a Python name: called through ctypes (:func:`require_cuda_init`)."""

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
    "torch._C._only_lift_cpu_tensors": "--fake-cuda: torch.tensor(data, device='cuda') made",
    "torch._C._set_only_lift_cpu_tensors": "--fake-cuda: torch.tensor(data, device='cuda') made",
    "torch.autograd._engine_run_backward": "backward ops charged to the line of the backward "
    "call (they go to <no user frame> on a GPU)",
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
    "torch._dynamo.utils.counters": "what dynamo did while the profile ran (report.compiled: "
    "graphs compiled, graph breaks with dynamo's reasons); without it the report says nothing "
    "of torch.compile",
    "torch._dynamo.convert_frame.input_codes": "compiled code that ran eager under a dispatch "
    "mode told apart (report.compiled.ran_eager), graph breaks by line, recompiled functions; "
    "without it only graphs and breaks by reason are said",
    "torch._dynamo.eval_frame._callback_from_stance": "compiled functions run eager under "
    "a dispatch mode of ours counted (report.compiled.eager_calls); without it torch.compile "
    "runs as before the stance: each frame checked and skipped by dynamo, fullgraph=True "
    "refused",
    "torch._dynamo.eval_frame._stance": "the script's own torch.compiler stance kept when it "
    "sets one during the profile",
    "torch._C._dynamo.eval_frame._debug_get_cache_entry_list": "recompiled functions "
    "(report.compiled.recompiled: one cache entry per compiled version); without it none said",
    "torch._C._dispatch_get_all_op_names": _FAST,
    "torch._C.DispatchKeySet": _FAST,
    "torch._C.DispatchKey.CompositeImplicitAutograd": "to, item, cpu counted by their parts "
    "in inference mode (both paths)",
    "torch._ops.OpOverload.redispatch": _FAST,
    "torch._ops.OpOverload._name": "the hot path's per-op cache key (OpOverload hashes in Python)",
    "torch._ops.OpOverload._schema": "the fast path's wrapped numbers; --fake-cuda's outputs",
    "torch._ops.OpOverload._handle": "the fast path's boxed redispatch (a frame fewer per op)",
    "torch._ops.OpOverload._op_dk": "to, item, cpu counted by their parts in inference mode "
    "under a Python mode (fast path)",
    "torch.library.Library._destroy": "the fast path's kernels taken away when the profile ends",
    "torch.utils._python_dispatch.TorchDispatchMode": _MODE,
    "torch.utils._python_dispatch._get_current_dispatch_mode_stack": _FAKE,
    "torch.utils._python_dispatch._push_mode": f"{_PRINT}; {_FAKE}",
    "torch.utils._python_dispatch._pop_mode": f"{_PRINT}; {_FAKE}",
    "torch.utils._python_dispatch._get_current_dispatch_mode": _INPUT,
    "torch.utils._python_dispatch._pop_mode_temporarily": _INPUT,
    "torch.utils._python_dispatch._disable_current_modes": _PRINT,
    "torch._tensor_str._str_intern": _PRINT,
    "torch._tensor_str._tensor_str": _FAKE,
    "torch._tensor_str._add_suffixes": _FAKE,
    "torch._tensor_str.PRINT_OPTS": _FAKE,
    "torch.utils.data.dataloader._BaseDataLoaderIter": "input waits (report.time)",
    "torch._subclasses.fake_tensor.FakeTensorMode": f"scripts' own FakeTensorMode; {_FAKE}",
    "torch._subclasses.fake_tensor.FakeTensor": _FAKE,
    "torch._subclasses.fake_tensor.init_gpu_context": _FAKE,
    "torch._subclasses.fake_tensor.DataDependentOutputException": _FAKE,
    "torch._subclasses.fake_tensor.DynamicOutputShapeException": _FAKE,
    "torch.ops.aten._scaled_dot_product_attention_math.default": "attention on fake GPU tensors on the CUDA build (fake_cuda/apis.py); without it the CUDA build's attention fails under --fake-cuda",
    "torch.Tensor._make_wrapper_subclass": "--fake-values real: a GPU tensor that holds a host tensor; without it only placeholder values",
    "torch._C._disabled_torch_function_impl": "--fake-values real: no Python __torch_function__ on each call of a GPU tensor (as FakeTensor); without it the fake GPU is slower and --gpu's host time holds it",
    "torch._subclasses.fake_tensor.FakeTensorDeviceMismatchError": "an op mixing devices on the "
    "fake GPU told by its type (torch 2.13 on); without it, by the text of FakeTensorMode's "
    "RuntimeError (torch 2.9-2.12)",
    "torch._C.Generator": _FAKE,
    "torch._C._AutoDispatchBelowADInplaceOrView": _FAKE,
    "torch._C._GLIBCXX_USE_CXX11_ABI": f"{_FAKE} (its device guard's build)",
    "torch._C._accelerator_getDeviceIndex": _FAKE,
    "torch._C._accelerator_setDeviceIndex": _FAKE,
    "torch._C._get_default_device": _FAKE,
    "torch._utils._rebuild_parameter": f"{_FAKE} (torch.save of fake tensors)",
    "torch.utils._pytree.tree_flatten": _FAKE,
    "torch.utils._pytree.tree_leaves": _FAKE,
    "torch.utils._pytree.tree_map_only": _FAKE,
    "torch.cuda._lazy_init": _FAKE,
    "torch.cuda.memory._lazy_init": _FAKE,
    "torch.cuda.nvtx._nvtx": _FAKE,
    NATIVE_REQUIRES_INIT: "--fake-cuda leaving CUDA uninitialized for the C++ side when it "
    "ends: without it a later CUDA call in the same process (a pytest session's next test) "
    "skips torch's lazy init and fails on a CPU build with a dispatcher dump instead of "
    "'Torch not compiled with CUDA enabled'",
}

#: Hooks an older release spells otherwise, with what stands in for them there: their absence
#: loses nothing, so it is never said as a loss.
STANDS_IN: dict[str, str] = {
    "torch._subclasses.fake_tensor.FakeTensorDeviceMismatchError": "torch 2.9-2.12: the text of "
    "FakeTensorMode's RuntimeError (fake_device_mismatch below)"
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


def _no_node() -> None:
    return None


# -- dynamo: hiding the hot path from torch.compile --------------------------------------------
eval_frame: ModuleType | None = _find("torch._C._dynamo.eval_frame")
set_eval_frame: Callable[[object], object]
set_eval_frame = _find("torch._C._dynamo.eval_frame.set_eval_frame") or (lambda callback: None)
set_code_exec_strategy: Callable[[CodeType, object], None] | None
set_code_exec_strategy = _find("torch._C._dynamo.eval_frame.set_code_exec_strategy")

# -- autograd: which node a backward op runs for, and which forward op made it ------------------
# NB: autograd makes an op's backward node (numbered from a per-thread counter) before the op
# reaches a dispatch mode, and during backward names the node running; both are C calls.
sequence_nr: Callable[[], int] | None = _find("torch._C._autograd._get_sequence_nr")
current_node: Callable[[], Node | None] = _find("torch._C._current_autograd_node") or _no_node
if sequence_nr is None:
    current_node = _no_node
BACKWARD_NODES = sequence_nr is not None and current_node is not _no_node
"""Both autograd hooks are there: backward ops can be charged to forward lines."""

# -- ops: calling an OpOverload's C++ op directly ------------------------------------------------
OP_OVERLOAD_HAS_OP = hasattr(torch.ops.aten.add.Tensor, "_op")
if not OP_OVERLOAD_HAS_OP:
    MISSING.append("torch._ops.OpOverload._op")

# -- CUDA timing ----------------------------------------------------------------------------------
cuda_current_stream: Callable[[int], tuple[int, int, int]] | None
cuda_current_stream = _find("torch._C._cuda_getCurrentStream")
cuda_event_base: type | None = _find("torch._C._CudaEventBase")

# -- syncs outside the dispatcher -------------------------------------------------------------------
tensor_str: ModuleType | None = _find("torch._tensor_str")
_find("torch._tensor_str._str")
gpu_trace: ModuleType | None = _find("torch.cuda._gpu_trace")
activate_gpu_trace: Callable[[], None] | None = _find("torch._C._activate_gpu_trace")

# -- backward: the line that ran it -----------------------------------------------------------------
ENGINE_RUN_BACKWARD = "_engine_run_backward"
engine_run_backward: Callable[..., object] | None = _find("torch.autograd._engine_run_backward")

# -- torch.tensor(data, device=...) --------------------------------------------------------------
only_lift_cpu_tensors: Callable[[], bool] | None = _find("torch._C._only_lift_cpu_tensors")
set_only_lift_cpu_tensors: Callable[[bool], None] | None
set_only_lift_cpu_tensors = _find("torch._C._set_only_lift_cpu_tensors")

# -- input waits: the mode stepped aside for the loader's own ops -----------------------------------
current_dispatch_mode: Callable[[], object] | None
current_dispatch_mode = _find("torch.utils._python_dispatch._get_current_dispatch_mode")
pop_mode_temporarily: Callable[[], AbstractContextManager[object]] | None
pop_mode_temporarily = _find("torch.utils._python_dispatch._pop_mode_temporarily")

# -- threads ----------------------------------------------------------------------------------------
THREAD_BOOTSTRAP = "_bootstrap_inner"
_find("threading.Thread._bootstrap_inner")

# -- the fast path: Python kernels for the counted ops only (profilers/counting/kernels.py) ---------------
dispatch_key_pre_dispatch: torch._C.DispatchKey | None = _find("torch._C.DispatchKey.PreDispatch")
include_dispatch_key_guard: type[torch._C._IncludeDispatchKeyGuard] | None
include_dispatch_key_guard = _find("torch._C._IncludeDispatchKeyGuard")
exclude_dispatch_key_guard: type[torch._C._ExcludeDispatchKeyGuard] | None
exclude_dispatch_key_guard = _find("torch._C._ExcludeDispatchKeyGuard")
keyset_full_after: Callable[[torch._C.DispatchKey], torch._C.DispatchKeySet] | None
keyset_full_after = _find("torch._C._dispatch_keyset_full_after")
fallthrough_kernel: Callable[[], None] | None = _find("torch.library.fallthrough_kernel")
tracing_context: Callable[[], object] | None = _find("torch._guards.TracingContext.try_get")

# -- the fast path's own calls, and attributes every OpOverload has --------------------------------
dispatch_get_all_op_names: Callable[[], list[str]]
dispatch_get_all_op_names = _find("torch._C._dispatch_get_all_op_names") or list
dispatch_key_set: type[torch._C.DispatchKeySet] | None = _find("torch._C.DispatchKeySet")
_find("torch._ops.OpOverload.redispatch")
_find("torch.library.Library._destroy")
_AN_OP = torch.ops.aten.add.Tensor
for _attr in ("_name", "_schema", "_handle", "_op_dk"):
    if not hasattr(_AN_OP, _attr):  # instance attributes: looked for on one op
        MISSING.append(f"torch._ops.OpOverload.{_attr}")


def unresolved() -> set[str]:
    """Every name of :data:`WHAT_EACH_GIVES` that this torch lacks, resolving those the modules
    above do not (the fake GPU's, the printing's: NB: not at import, as some import heavy
    parts of torch that a profile without them never needs)."""
    for path in WHAT_EACH_GIVES:
        if path == NATIVE_REQUIRES_INIT:
            _native_requires_init()
        elif path not in MISSING and not path.startswith("torch._ops.OpOverload._"):
            _find(path)
    return set(MISSING)


_MANGLED_REQUIRES_INIT = "_ZN5torch5utils24set_requires_device_initEN3c1010DeviceTypeEb"
_CUDA_DEVICE_TYPE = 1  # NB: c10::DeviceType::CUDA, an int8 enum
_requires_init: list[Callable[[int, bool], object] | None] = []


def _native_requires_init() -> Callable[[int, bool], object] | None:
    """``torch::utils::set_requires_device_init`` of libtorch_python (exported, Itanium C++
    names: Linux and macOS), found once; None (and noted missing) where it is not there."""
    if not _requires_init:
        import ctypes
        import os

        found: ctypes._NamedFuncPointer | None = None
        lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
        for name in ("libtorch_python.so", "libtorch_python.dylib"):
            try:
                found = getattr(ctypes.CDLL(os.path.join(lib_dir, name)), _MANGLED_REQUIRES_INIT)
            except (OSError, AttributeError):
                continue
            found.argtypes, found.restype = [ctypes.c_int8, ctypes.c_bool], None
            break
        if found is None and NATIVE_REQUIRES_INIT not in MISSING:
            MISSING.append(NATIVE_REQUIRES_INIT)
        _requires_init.append(found)
    return _requires_init[0]


def require_cuda_init() -> None:
    """Tells torch's C++ side that CUDA is not initialized: the next tensor made on or moved to
    a GPU runs ``torch.cuda._lazy_init`` again. NB: that C++ flag is set once for good by the
    first such call, and under --fake-cuda that call ran the fake's lazy init (a no-op)."""
    fn = _native_requires_init()
    if fn is not None:
        fn(_CUDA_DEVICE_TYPE, True)


# -- inference mode: composite ops reach the mode whole (profilers/counting/dispatch.py) ----------------
_has_kernel: Callable[[str, torch._C.DispatchKey], bool] | None
_has_kernel = _find("torch._C._dispatch_has_kernel_for_dispatch_key")
_find("torch._ops.OpOverload.decompose")
implicit_key: torch._C.DispatchKey | None = _find("torch._C.DispatchKey.CompositeImplicitAutograd")


def composite_implicit(func: OpOverload) -> bool:
    """Whether ``func`` is made of other ops by a CompositeImplicitAutograd kernel."""
    if _has_kernel is None or implicit_key is None or not hasattr(func, "decompose"):
        return False
    try:
        return bool(_has_kernel(func._name, implicit_key))
    except (RuntimeError, AttributeError):
        return False


# -- the fake GPU: an op mixing devices -----------------------------------------------------------
_MISMATCH_TEXT = "Unhandled FakeTensor Device Propagation"
_mismatch_type: list[type[BaseException] | None] = []


def fake_device_mismatch(exc: BaseException) -> bool:
    """Whether ``exc`` is FakeTensorMode's refusal of an op whose tensors are on two devices.

    NB: torch 2.13 raises ``FakeTensorDeviceMismatchError`` (a RuntimeError); torch 2.9-2.12
    raise a plain RuntimeError whose text begins "Unhandled FakeTensor Device Propagation for
    {func}, found two different devices" (torch/_subclasses/fake_tensor.py,
    ``_find_common_device``)."""
    if not _mismatch_type:  # NB: resolved at first use: fake_tensor imports much of torch
        _mismatch_type.append(_find("torch._subclasses.fake_tensor.FakeTensorDeviceMismatchError"))
    cls = _mismatch_type[0]
    if cls is not None:
        return isinstance(exc, cls)
    return isinstance(exc, RuntimeError) and str(exc).startswith(_MISMATCH_TEXT)


# -- torch.compile: what dynamo did while the profile ran (profilers/compiled.py) -------------------


def dynamo_loaded(path: str) -> Any:
    """The object at ``path`` (under ``torch._dynamo``) where the script has imported dynamo,
    else None. NB: never imports it (3 s): a script that compiled anything has."""
    if "torch._dynamo" not in sys.modules:
        return None
    return _find(path)
