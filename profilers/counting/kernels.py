"""The fast path of ``--no-kernel-timing``: Python runs for the ops that copy, sync or
communicate, and for no other.

A dispatch mode makes every op enter Python (3-9 µs each on a CPU); the copies and syncs come from
a few dozen ops. Those get a Python kernel each (``torch.library``) at the ``PreDispatch`` key,
above autograd and every Python mode; every other op gets a fallthrough there; the key is switched
on per thread (the dispatcher's thread-local include set). An intercepted op is counted by the
mode's rules and recorder, then run below the key with the key excluded, so the ops it calls are
not counted again. Measured in benchmarks/counting_paths.py.

What it does not see (the report says ``counting: "copies"``): ops other than those, so no op
counts per line and no kernel time; ops that a Python mode or tensor subclass issues inside its own
``__torch_dispatch__`` (torch switches the key off in there). Ops of libraries loaded after the
profile started have no fallthrough and pass the key's own C++ fallback (about 0.5 µs each). Calls
of the counted ops that other ops make inside themselves (a CPU ``addmm`` copying its bias into its
output) reach it too, where a mode sees only the outer op: each costs a Python call, and counts
only if its rule finds a transfer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from time import perf_counter_ns as _ns
from types import FrameType
from typing import Any, cast

import torch

from profilers.counting.comm import COMM_NAMESPACES, CommRule, comm_rule
from profilers.counting.ops import CLASSIFIERS, Args, Classifier, Kwargs
from profilers.counting.recorder import Recorder
from profilers.counting.threads import ThreadState
from profilers.memory.failure import failed
from profilers.registry import switch
from profilers.timing.charge import timed_on_fast_path, untimed
from profilers.torch_private import (
    OpOverload,
    composite_implicit,
    dispatch_get_all_op_names,
    dispatch_key_pre_dispatch,
    dispatch_key_set,
    eval_frame,
    exclude_dispatch_key_guard,
    fallthrough_kernel,
    implicit_key,
    include_dispatch_key_guard,
    keyset_full_after,
    set_code_exec_strategy,
    tracing_context,
)

KEY = "PreDispatch"

DECOMPOSED = frozenset(
    f"aten::{name}"
    for name in "to item is_nonzero type_as _to_cpu pin_memory where argwhere".split()
)
"""Ops made of counted ops by a CompositeImplicitAutograd kernel (``to`` of ``_to_copy``,
``item`` of ``_local_scalar_dense``...): decomposed before a Python mode takes them whole (see
_decomposing_kernel)."""

_CPU = torch.device("cpu")

_WRAPPED_DTYPES: dict[type, torch.dtype] = {
    bool: torch.bool,
    int: torch.int64,
    float: torch.float64,
    complex: torch.complex128,
}
"""The dtype of a wrapped number (a Python scalar torch made a 0-dim CPU tensor), which a Python
kernel receives back as the scalar."""


def missing() -> str | None:
    """What this torch lacks for the fast path, or None when it has everything."""
    needed = {
        "torch._C.DispatchKey.PreDispatch": dispatch_key_pre_dispatch,
        "torch._C._IncludeDispatchKeyGuard": include_dispatch_key_guard,
        "torch._C._ExcludeDispatchKeyGuard": exclude_dispatch_key_guard,
        "torch._C._dispatch_keyset_full_after": keyset_full_after,
        "torch.library.fallthrough_kernel": fallthrough_kernel,
    }
    lacking = [name for name, hook in needed.items() if hook is None]
    if not hasattr(OpOverload, "redispatch"):
        lacking.append("torch._ops.OpOverload.redispatch")
    return ", ".join(lacking) or None


def counted_ops() -> dict[OpOverload, Classifier | CommRule]:
    """OpOverload -> its classifier or collective rule: the ops the fast path intercepts."""
    ops: dict[OpOverload, Classifier | CommRule] = dict(CLASSIFIERS)
    for namespace in COMM_NAMESPACES:
        for name in dispatch_get_all_op_names():
            if not name.startswith(f"{namespace}::"):
                continue
            op = _overload(name)
            rule = comm_rule(op) if op is not None else None
            if op is not None and rule is not None:
                ops[op] = rule
    return ops


def _overload(qualified: str) -> OpOverload | None:
    """``"c10d::allreduce_"`` -> ``torch.ops.c10d.allreduce_.default``, or None."""
    namespace, _, rest = qualified.partition("::")
    name, _, overload = rest.partition(".")
    try:
        op = getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")
    except (AttributeError, RuntimeError):
        return None
    return op if isinstance(op, OpOverload) else None


class CountingKernels:
    """The fast path's registrations for one profile: :meth:`install` on entry (undone by the
    stack); :meth:`on_thread` switches the key on, for the profile's thread (or its step
    window) and for each thread the script starts."""

    def __init__(self, recorder: Recorder) -> None:
        key, include = dispatch_key_pre_dispatch, include_dispatch_key_guard
        exclude, after, keyset = exclude_dispatch_key_guard, keyset_full_after, dispatch_key_set
        assert key is not None and include is not None and exclude is not None  # missing()
        assert after is not None and keyset is not None
        self.recorder = recorder
        self._pre, self._include, self._exclude = key, include, exclude
        self._after, self._key = after(key), keyset(key)

    def install(self, stack: ExitStack) -> None:
        ops = {_qualified(op): (op, rule) for op, rule in counted_ops().items()}
        by_namespace: dict[str, list[str]] = {}
        for name in dispatch_get_all_op_names():
            by_namespace.setdefault(name.partition("::")[0], []).append(name)
        make_library: Any = torch.library.Library  # NB: torch's, untyped
        libraries: list[Any] = []

        def destroy() -> None:
            for lib in reversed(libraries):
                lib._destroy()

        switch("profiler", stack, "torch.library kernels at PreDispatch", destroy)
        for namespace, names in sorted(by_namespace.items()):
            lib = make_library(namespace, "IMPL")
            libraries.append(lib)
            for name in names:
                found = ops.get(name)
                if found is not None:
                    op, rule = found
                    kernel = (
                        self._collective_kernel(op, rule)
                        if isinstance(rule, CommRule)
                        else self._kernel(op, rule)
                    )
                    _hidden_from_dynamo(kernel)
                    lib.impl(name.partition("::")[2], kernel, KEY, with_keyset=True)
                    continue
                if name.partition(".")[0] in DECOMPOSED:
                    whole = _overload(name)
                    if whole is not None and composite_implicit(whole):  # and, as any other op,
                        kernel = self._decomposing_kernel(whole)  # a fallthrough at the key
                        _hidden_from_dynamo(kernel)
                        lib.impl(name.partition("::")[2], kernel, "Python", with_keyset=True)
                try:
                    lib.impl(name.partition("::")[2], fallthrough_kernel, KEY)
                except RuntimeError:
                    pass  # an op with a kernel of its own there already: it keeps it

    @contextmanager
    def on_thread(self) -> Iterator[None]:
        """The key switched on for this thread (threads start with it off)."""
        with self._include(self._pre):
            yield

    def _decomposing_kernel(self, op: OpOverload) -> Callable[..., object]:
        """``to``, ``item``... at the Python key, which they reach whole only where autograd
        (which decomposes them first everywhere else) is off and a Python mode or tensor
        subclass is there (inference mode under --fake-cuda's mode, say): the mode's own code
        runs with the counting key off, so the ``_to_copy`` it would make of ``to`` is never
        seen. Here the op is decomposed first, with the key on, and the mode gets its parts,
        as it does outside inference mode. Never reached otherwise: free."""
        decompose = op._op_dk
        implicit = implicit_key
        assert implicit is not None  # composite_implicit(op) said so

        def kernel(keyset: object, *args: object, **kwargs: object) -> object:
            return decompose(implicit, *args, **kwargs)

        return kernel

    def _kernel(self, op: OpOverload, rule: Classifier) -> Callable[..., object]:  # noqa: C901 - the fast path per op, one closure
        recorder = self.recorder
        after, key = self._after, self._key
        name = str(op).removeprefix("aten.")
        tensor_args = _tensor_positions(op)
        handle = getattr(op, "_handle", None)
        redispatch = getattr(handle, "redispatch_boxed", None) or op.redispatch
        exclude = self._exclude
        getframe = sys._getframe
        is_item = name == "_local_scalar_dense.default"
        is_cast = name == "_to_copy.default"

        def kernel(keyset: torch._C.DispatchKeySet, *args: object, **kwargs: object) -> object:
            enter = _ns()
            ks = keyset & after
            for i in tensor_args:
                if i < len(args) and type(args[i]) in _WRAPPED_DTYPES:
                    # A Python number torch made a tensor (CPU arithmetic casting its scalar):
                    # never a transfer, so run, uncounted, as the mode never sees it either.
                    if is_item:
                        out = args[0]  # a number's .item(): the number itself
                    elif is_cast and i == 0:
                        out = _cast_number(args[0], kwargs)
                    else:
                        out = None
                    if out is None:
                        args = _rewrap(args, tensor_args)
                        start = _ns()
                        with exclude(key):
                            out = redispatch(ks, *args, **kwargs)
                        enter += _ns() - start  # NB: the op's own run is the script's time
                    _untimed(recorder, enter)
                    return out
            start = _ns()
            with exclude(key):  # what the op calls inside is its own business
                try:
                    out = redispatch(ks, *args, **kwargs)
                except BaseException as exc:  # explained, our frames out (profilers/memory/)
                    raise failed(recorder, getframe(1), name, op, args, kwargs, exc)  # noqa: B904
            end = _ns()
            if not recorder.active or _tracing():
                return out
            # NB: the op runs first and its rule looks at it after; most calls are copies
            # within a device (torch's own, inside other ops) and stop here, before the
            # frame walk: they cost a Python call and a rule, no more.
            try:
                found = rule(args, kwargs, out, recorder.is_pinned)
                if found is None:
                    _untimed(recorder, enter + end - start)
                    return out
                try:
                    st: ThreadState = recorder.local.s
                except AttributeError:
                    st = recorder.state()
                if st.in_comm:
                    return out  # DataParallel's comm functions count their own copies
                try:
                    frame: FrameType | None = getframe(1)
                except ValueError:  # a C++ thread with no Python frames (autograd's device threads)
                    frame = None
                line, walk, made_at = recorder.counted_line(st, frame)
                recorder.apply_found(line, found, args, walk, made_at)
                if st.clock is not None:  # the host half of the time view (a wait, if any)
                    timed_on_fast_path(st.clock, line, found, enter, start, end)
            except Exception as exc:  # never into the user's code: the op ran, uncounted
                recorder.internal_error(name, exc)
            return out

        return kernel

    def _collective_kernel(self, op: OpOverload, rule: CommRule) -> Callable[..., object]:
        """A collective, counted with the host's time in it (the wait, where the backend
        blocks), at the line that called it."""
        recorder = self.recorder
        after, key = self._after, self._key
        name = str(op)
        handle = getattr(op, "_handle", None)
        redispatch = getattr(handle, "redispatch_boxed", None) or op.redispatch
        exclude = self._exclude

        def kernel(keyset: torch._C.DispatchKeySet, *args: object, **kwargs: object) -> object:
            ks = keyset & after

            def run(*a: object, **k: object) -> object:
                with exclude(key):
                    return redispatch(ks, *a, **k)

            if not recorder.active or _tracing():
                return run(*args, **kwargs)
            try:
                try:
                    frame: FrameType | None = sys._getframe(1)
                except ValueError:
                    frame = None
                line = recorder.line_for(frame)
            except Exception as exc:  # never into the user's code: the op runs uncounted
                recorder.internal_error(name, exc)
                return run(*args, **kwargs)
            return recorder.collective(line, None, rule, run, args, kwargs)

        return kernel


def _qualified(op: OpOverload) -> str:
    """``"aten::add.Tensor"``, ``"aten::_to_copy"``: the dispatcher's name of an overload."""
    return str(op._name)


def _tensor_positions(op: OpOverload) -> tuple[int, ...]:
    """Where the op's schema takes a single Tensor (a wrapped number arrives there as a scalar)."""
    return tuple(
        i
        for i, a in enumerate(op._schema.arguments)
        if not a.kwarg_only and str(a.type) in ("Tensor", "Tensor?")
    )


def _rewrap(args: Args, positions: tuple[int, ...]) -> Args:
    """``args`` with each scalar where a Tensor belongs made a 0-dim CPU tensor again: of the
    first operand's dtype for the others (an op casts its sources to it), else of a wrapped
    number's own (double, long, bool, complex double)."""
    out = list(args)
    base = args[0] if isinstance(args[0], torch.Tensor) else None
    for i in positions:
        v: Any = out[i] if i < len(out) else None
        if type(v) in _WRAPPED_DTYPES:
            dtype = base.dtype if base is not None and i > 0 else _WRAPPED_DTYPES[type(v)]
            # NB: scalar_tensor, 2.3x cheaper than torch.tensor (which our factory patch
            # wraps too); on the CPU whatever the default device (a wrapped number's place)
            out[i] = torch.scalar_tensor(v, dtype=dtype, device=_CPU)
    return tuple(out)


def _untimed(recorder: Recorder, enter_ns: int) -> None:
    """The calling thread's step clock, if it has one, takes the time since ``enter_ns`` (and
    the cost around the kernel) out of its gap: an intercepted call that counted nothing."""
    st: ThreadState | None = getattr(recorder.local, "s", None)
    clock = None if st is None else st.clock
    if clock is not None:
        now = _ns()
        untimed(clock, now - enter_ns, now)


_INT_RANGES: dict[torch.dtype, tuple[int, int]] = {
    dt: (torch.iinfo(dt).min, torch.iinfo(dt).max)
    for dt in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
}

_FLOAT32_MAX = torch.finfo(torch.float32).max


def _cast_number(v: Any, kwargs: Kwargs) -> torch.Tensor | None:
    """The 0-dim CPU tensor that ``_to_copy`` makes of the wrapped number ``v`` (CPU arithmetic
    casting a Python number to its tensor's dtype: ``y + 1`` on float32), made at once where
    that is exactly the cast's result: the op's redispatch and the rewrap cost 12 µs of the
    20 µs such a call spent here. None: anywhere else (another device, a pinned result, a
    value the cast wraps or rounds to infinity, where making the number checks for overflow
    and raises), where the op runs."""
    device = cast("torch.device | None", kwargs.get("device"))  # NB: the schema's, not checked
    if (device is not None and device.type != "cpu") or kwargs.get("pin_memory"):
        return None
    kind = type(v)
    dtype = cast("torch.dtype | None", kwargs.get("dtype")) or _WRAPPED_DTYPES[kind]
    if kind is complex:
        exact = dtype == torch.complex128
    elif dtype == torch.float64:
        exact = True
    elif dtype == torch.float32:
        exact = kind is not float or -_FLOAT32_MAX <= v <= _FLOAT32_MAX  # NB: False for NaN
    else:
        bounds = _INT_RANGES.get(dtype)
        exact = kind is not float and bounds is not None and bounds[0] <= v <= bounds[1]
        exact = exact or (dtype == torch.bool and kind is bool)
    return torch.scalar_tensor(v, dtype=dtype, device=_CPU) if exact else None


def _hidden_from_dynamo(kernel: Callable[..., object]) -> None:
    """Marks ``kernel`` (its code, shared by every op's closure) for dynamo to skip, with all it
    calls. NB: between a compiled function's graphs its ops run eagerly with dynamo's frame
    callback on, so an op there that reaches the key hands our kernel's frame to dynamo, which
    compiled it and broke the user's graph at our ``perf_counter_ns`` ("Attempted to call
    function marked as skipped", a graph break the run without gpuwatch does not have). Where
    this torch cannot mark code, dynamo still traces it: the run is slower, its counts the
    same."""
    if set_code_exec_strategy is not None and eval_frame is not None:
        skip = eval_frame._FrameAction.SKIP
        set_code_exec_strategy(kernel.__code__, eval_frame._FrameExecStrategy(skip, skip))


def _tracing() -> bool:
    """torch.compile tracing the user's code (ops on fake tensors that never run)."""
    return tracing_context is not None and tracing_context() is not None
