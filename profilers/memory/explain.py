"""What gpuwatch adds when an op fails with a device mismatch or runs out of GPU memory: the op's
tensors (device, shape, dtype, the line that made or last moved each), and the fix when the
cause is a known mistake. Runs once, when the error passes through the hot path; costs nothing
before."""

from __future__ import annotations

import linecache
import sys
import traceback
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch._ops import OpOverload
from torch.optim import Optimizer

from profilers.memory.gpu_errors import SAME_DEVICE, Args, Kwargs, oom_facts
from profilers.memory.tracker import MOVES, Made, MemoryTracker, by_line

if TYPE_CHECKING:
    from profilers.counting.user_code import UserCode
    from profilers.stats import LineStats

FACTORIES = frozenset(
    {
        "zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint", "randperm",
        "eye", "linspace", "logspace", "scalar_tensor", "empty_strided", "normal", "lift_fresh",
        "lift_fresh_copy", "tensor",
    }
)  # fmt: skip
"""Ops that make a tensor from nothing but sizes: on the CPU unless given ``device=``."""

_MAX_TENSORS = 8


def line_dict(line: LineStats) -> dict[str, object]:
    """A recorder line as the report names lines."""
    return {"file": line.file, "line": line.line, "function": line.function, "source": line.source}


def _tensors(func: OpOverload, args: Args, kwargs: Kwargs) -> list[tuple[str, torch.Tensor]]:
    out: list[tuple[str, torch.Tensor]] = []
    try:
        names = [a.name for a in func._schema.arguments]
    except AttributeError:
        names = []
    given = list(args) + [kwargs[k] for k in kwargs]
    labels = names[: len(args)] + list(kwargs)
    for i, value in enumerate(given):
        label = labels[i] if i < len(labels) else f"arg{i}"
        if isinstance(value, torch.Tensor):
            out.append((label, value))
        elif isinstance(value, (list, tuple)):
            out.extend(
                (f"{label}[{j}]", t) for j, t in enumerate(value) if isinstance(t, torch.Tensor)
            )
    return out


def _key(t: torch.Tensor) -> int | None:
    try:
        return int(t.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _frames(tb: TracebackType | None) -> list[FrameType]:
    """The frames of the failing call, innermost first (the traceback's, then their callers)."""
    out = [frame for frame, _ in traceback.walk_tb(tb)]
    frame = out[0].f_back if out else sys._getframe(2)
    while frame is not None:
        out.insert(0, frame)
        frame = frame.f_back
    return out[::-1]


def _owners(frames: list[FrameType]) -> tuple[list[nn.Module], list[Optimizer]]:
    modules: list[nn.Module] = []
    optimizers: list[Optimizer] = []
    for frame in frames:
        for value in list(frame.f_locals.values()):
            if isinstance(value, nn.Module) and value not in modules:
                modules.append(value)
            elif isinstance(value, Optimizer) and value not in optimizers:
                optimizers.append(value)
    return modules, optimizers


def _in_module(key: int, modules: list[nn.Module]) -> tuple[str, str, nn.Module] | None:
    """(how ``key``'s storage is held, the attribute's path, its module) among ``modules``."""
    for root in modules:
        for path, m in root.named_modules():
            for kind, table in (("parameter", m._parameters), ("buffer", m._buffers)):
                for name, t in table.items():
                    if t is not None and _key(t) == key:
                        return kind, f"{path}.{name}" if path else name, m
            for name, value in vars(m).items():
                if isinstance(value, torch.Tensor) and _key(value) == key:
                    return "attribute", f"{path}.{name}" if path else name, m
    return None


def _in_optimizer(key: int, optimizers: list[Optimizer]) -> tuple[str, Optimizer] | None:
    for opt in optimizers:
        for state in opt.state.values():
            for name, value in state.items():
                if isinstance(value, torch.Tensor) and _key(value) == key:
                    return f"state {name!r}", opt
        for group in opt.param_groups:
            if any(_key(p) == key for p in group["params"]):
                return "parameter", opt
    return None


def _where(made: Made) -> str:
    return f"{made.line.file}:{made.line.line}"


def _fix(
    op: str,
    label: str,
    t: torch.Tensor,
    expected: torch.device,
    made: Made | None,
    modules: list[nn.Module],
    optimizers: list[Optimizer],
) -> str:
    """The fix for tensor ``t`` of the failing op being on the wrong device."""
    dev = t.device
    key = _key(t)
    held = None if key is None else _in_module(key, modules)
    made_at = f" (made at {_where(made)})" if made is not None else ""
    if held is not None:
        kind, path, module = held
        cls = type(module).__name__
        if kind == "attribute":
            name = path.rsplit(".", 1)[-1]
            return (
                f"{path} is a plain attribute of {cls}{made_at}, not a registered buffer: it "
                f"stayed on the {dev} when the model moved to {expected}; register it: "
                f"self.register_buffer({name!r}, ...)"
            )
        return (
            f"{kind} {path} of {cls} is on the {dev}: the module was not moved; call "
            f".to({str(expected)!r}) on the model that holds it"
        )
    owned = None if key is None else _in_optimizer(key, optimizers)
    if owned is not None:
        what, opt = owned
        return (
            f"the optimizer's {what} ({type(opt).__name__}){made_at} is on the {dev}: the "
            f"optimizer was built, stepped or loaded before the model moved to {expected}; "
            "build it (or load its state) after model.to(device)"
        )
    if op.startswith("embedding") and label == "indices" and not t.is_floating_point():
        return (
            f"a {dev} index into an embedding on {expected}{made_at}: move the indices where "
            f"they are made, e.g. .to({str(expected)!r})"
        )
    if made is None:
        return (
            f"{label} is on the {dev}, made before profiling began or by code gpuwatch does "
            f"not see: move it with .to({str(expected)!r})"
        )
    if made.op in FACTORIES and dev.type == "cpu":
        factory = "tensor" if made.op.startswith("lift") else made.op  # torch.tensor(data)
        return (
            f"made on the CPU by torch.{factory} at {_where(made)}: pass device=x.device "
            f"(here {expected})"
        )
    if made.op in MOVES:
        return f"moved to the {dev} at {_where(made)}: move it to {expected} instead"
    return f"made on the {dev} by {made.op} at {_where(made)}: move it to {expected}"


def explain(
    tracker: MemoryTracker | None,
    line: LineStats,
    op: str,
    func: OpOverload,
    args: Args,
    kwargs: Kwargs,
    exc: BaseException,
) -> dict[str, object] | None:
    """The report's ``memory.failure`` for ``exc`` raised by ``func``, or None when it is
    neither a device mismatch nor an out-of-memory error."""
    oom = isinstance(exc, torch.OutOfMemoryError)
    if not oom and not (isinstance(exc, RuntimeError) and SAME_DEVICE in str(exc)):
        return None
    out: dict[str, object] = {
        "kind": "out_of_memory" if oom else "device_mismatch",
        "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
        "op": op,
        **line_dict(line),
    }
    if oom:
        out.update(_oom(tracker, exc))
        return out
    tensors = _tensors(func, args, kwargs)
    # the GPU the op runs on: the first among its tensors
    expected = next((torch.device(t.device) for _, t in tensors if t.device.type != "cpu"), None)
    modules, optimizers = _owners(_frames(exc.__traceback__))
    listed: list[dict[str, object]] = []
    fixes: list[str] = []
    seen: set[str] = set()
    for label, t in tensors:
        dev = str(t.device)
        wrong = expected is not None and t.device != expected and not _cpu_scalar(t, expected)
        if len(listed) >= _MAX_TENSORS and (dev in seen and not wrong):
            continue
        seen.add(dev)
        fix = None
        if wrong:
            assert expected is not None
            made = tracker.of(t) if tracker is not None else None
            fix = _fix(op, label, t, expected, made, modules, optimizers)
            if fix not in fixes:
                fixes.append(fix)
        listed.append(_entry(label, t, tracker, fix))
    return {**out, "tensors": listed, "fixes": fixes}


def _cpu_scalar(t: torch.Tensor, expected: torch.device) -> bool:
    """A 0-dim CPU tensor goes with GPU tensors as a number (TensorIterator allows it)."""
    return t.device.type == "cpu" and t.dim() == 0 and expected.type != "cpu"


def _oom(tracker: MemoryTracker | None, exc: BaseException) -> dict[str, object]:
    facts = oom_facts(exc)
    index, requested, capacity = facts if facts is not None else (0, None, None)
    out: dict[str, object] = {
        "device": f"cuda:{index}",
        "requested_bytes": requested,
        "capacity_bytes": capacity,
        "held_bytes": None,
        "held": [],
    }
    if tracker is None:
        return out
    if capacity is None:  # a GPU's message says its usable size only: the device's own
        out["capacity_bytes"] = tracker.capacity.get(index)
    held = sorted(by_line(tracker.held_now(index)).values(), key=lambda v: -v[1])
    out["held_bytes"] = sum(n for _, n in held)
    out["held"] = [{**line_dict(line), "bytes": n} for line, n in held[:20]]
    return out


GROUPING = "Tensors of the same index must be on the same device"
"""torch's own check, in C++ with no op (``torch._C._group_tensors_by_device_and_dtype``,
aten/src/ATen/native/ForeachUtils.h), that an optimizer's foreach or fused step runs first: each
parameter's gradient and state on the parameter's device, except a float32/64 host tensor (the
``step`` counters), which passes; so a state on another GPU fails here, a host one later, in
the foreach op (TensorIterator's words) or the fused op (its wrapper's)."""

_HOST_FLOATS = (torch.float32, torch.float64)


def explain_grouping(
    tracker: MemoryTracker | None, user: UserCode, exc: BaseException
) -> dict[str, object] | None:
    """The report's ``memory.failure`` for :data:`GROUPING`'s error, which no op raises: the
    failing line is the innermost user frame of ``exc``'s traceback, and the tensors are those
    of the optimizers in its frames whose device is not their parameter's (``user``: the
    recorder's ``UserCode``). None for any other error."""
    if not isinstance(exc, RuntimeError) or GROUPING not in str(exc):
        return None
    # NB: the line from the traceback, not the frame: a frame that holds the profile's `with`
    # is at that line again while the error passes through the profile's exit.
    at = [(f, n) for f, n in traceback.walk_tb(exc.__traceback__) if user(f.f_code.co_filename)]
    if not at:
        return None
    line, lineno = at[-1]
    filename = line.f_code.co_filename
    modules, optimizers = _owners(_frames(exc.__traceback__))
    listed: list[dict[str, object]] = []
    fixes: list[str] = []
    for opt in optimizers:
        for i, p in enumerate(p for g in opt.param_groups for p in g["params"]):
            held = [("grad", p.grad), *opt.state.get(p, {}).items()]
            wrong = [
                (name, t)
                for name, t in held
                if isinstance(t, torch.Tensor)
                and t.device != p.device
                and not (t.device.type == "cpu" and t.dtype in _HOST_FLOATS)  # a step counter
            ]
            if not wrong or len(listed) >= _MAX_TENSORS:
                continue
            listed.append(_entry(f"params[{i}]", p, tracker, None))
            for name, t in wrong:
                made = tracker.of(t) if tracker is not None else None
                fix = _fix("", name, t, p.device, made, modules, optimizers)
                listed.append(_entry(f"{name} of params[{i}]", t, tracker, fix))
                if fix not in fixes:
                    fixes.append(fix)
    if not listed:
        return None  # the same check's dtype half (a bfloat16 state on the host): no device's
    return {
        "kind": "device_mismatch",
        "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
        "op": "the optimizer's grouping by device (before its foreach or fused step)",
        "file": user.display(filename),
        "line": lineno,
        "function": line.f_code.co_name,
        "source": linecache.getline(filename, lineno).strip(),
        "chain": user.chain(line),
        "tensors": listed,
        "fixes": fixes,
    }


def _entry(
    label: str, t: torch.Tensor, tracker: MemoryTracker | None, fix: str | None
) -> dict[str, object]:
    made = tracker.of(t) if tracker is not None else None
    out: dict[str, object] = {
        "arg": label,
        "device": str(t.device),
        "shape": list(t.shape),
        "dtype": str(t.dtype).removeprefix("torch."),
        "made_by": None
        if made is None
        else {"op": made.op, "moved": made.op in MOVES, **line_dict(made.line)},
    }
    if fix is not None:
        out["fix"] = fix
    return out
