"""How good the GPU model is, measured: each op's GPU time and each step's, measured
on the GPU this runs on, against what the model (profilers/timing/gpu_model/) predicts for it.

    python benchmarks/gpu_model_accuracy.py [--json OUT.json] [--markdown OUT.md]
        [--steps 20] [--warmup 3] [--workloads demo-naive cnn ...] [--gpu NAME]
    python benchmarks/gpu_model_accuracy.py --stand-in   # no GPU: the pipeline, known durations

Per workload (accuracy_workloads.py: the single-GPU demo naive and fixed, a small ResNet-ish
net, a small transformer in bfloat16 and float32):

1. the step, unprofiled: a CUDA event at each optimizer step; the wall time between two, after
   ``--warmup`` steps, the median over ``--steps``;
2. each op: the profiler's own CUDA-event timer (profilers/timing/cuda_events.py: two events
   on the op's stream) in a dispatch mode, and the model's prediction for the GPU named by
   ``torch.cuda.get_device_name()`` (``--gpu`` overrides): a copy over the bus at the bus's
   rate, any other op its roofline. NB: events around an op the GPU reaches idle would time
   the host's launch too (the start event runs at once, the kernel comes when the host has
   launched it), so a spin kernel (``torch.cuda._sleep``) keeps the queue ahead of the host:
   every op's start event waits behind it and times the kernel alone.

The model is not tuned to anything here: this script only measures. Output: per workload and
op class (matmul, conv, attention, elementwise, reduction, norm, copy h2d, copy d2h, other)
the count, measured and predicted totals, the median and p90 of predicted/measured; per step
the GPU time measured and predicted and the error; as text, JSON (``--json``) and markdown
for the README (``--markdown``).

``--stand-in`` runs the same pipeline on a machine without a GPU: fake ``cuda:0`` tensors, a
stand-in for the CUDA calls whose every op takes exactly :data:`TICK_NS` (a GPU-bound step:
the step is its ops), and the stand-in workload's fixed ops, predicted for ``--gpu`` (H100).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from benchmarks import accuracy_table as table  # noqa: E402
from benchmarks import accuracy_workloads as workloads  # noqa: E402
from profilers.stats import OpCount  # noqa: E402
from profilers.timing.cuda_events import CudaTimer, TorchCuda  # noqa: E402
from profilers.timing.gpu_model.rates import copy_ns  # noqa: E402
from profilers.timing.gpu_model.roofline import kernel_ns, op_cost  # noqa: E402
from profilers.timing.gpu_model.specs import GpuSpec, UnknownGpuError, gpu_spec  # noqa: E402

TICK_NS = 10_000
"""The stand-in GPU: every op takes exactly this long (10 µs)."""

SLEEP_CYCLES = 1 << 22
"""Each half of the spin that keeps the GPU ahead of the host: about 2 ms at 2 GHz, dozens of
ops' host time under the measuring mode."""


def _name(func: Any) -> str:
    packet = getattr(func, "overloadpacket", func)
    return str(getattr(packet, "__name__", packet)).removesuffix("_")


def _may_launch(func: Any) -> bool:
    """Whether the op can run a kernel: metadata ops (``prim.device``, ``aten.size``,
    ``is_pinned``) return something other than tensors; ``_local_scalar_dense`` (``.item()``)
    copies one value back; an op that returns nothing works in place (``_foreach_add_``,
    ``_fused_adamw_``: the optimizers' kernels)."""
    if getattr(func, "namespace", "") == "prim":
        return False
    if _name(func) == "_local_scalar_dense":
        return True
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.returns:
        return True
    return any("Tensor" in str(r.type) for r in schema.returns)


def _is_pinned(t: Any) -> bool:
    try:
        return bool(t.is_pinned())
    except Exception:  # NB: fake tensors do not implement it (the stand-in): pageable
        return False


def predict(spec: GpuSpec, func: Any, args: Any, kwargs: Any, out: Any) -> tuple[str, int] | None:
    """The op's class and predicted ns on ``spec``; None for an op the model says launches no
    kernel (a view, ``empty``). A copy across the bus goes at the bus's rate (pinned or
    staged, as its host tensor is), the rest is the roofline: as under ``--fake-cuda --gpu``."""
    name = _name(func)
    src = dst = None
    if name == "_local_scalar_dense":
        src = args[0]
    elif name in ("_to_copy", "copy") and isinstance(out, torch.Tensor):
        src, dst = (args[1], args[0]) if name == "copy" else (args[0], out)
    direction = None
    if isinstance(src, torch.Tensor):
        to_host = dst is None or dst.device.type == "cpu"
        if src.device.type == "cpu" and not to_host:
            direction, host = "h2d", src
        elif src.device.type != "cpu" and to_host:
            direction, host = "d2h", dst
    if direction is not None:
        assert isinstance(src, torch.Tensor)
        nbytes = src.numel() * src.element_size()
        pinned = host is not None and _is_pinned(host)
        ns = copy_ns(spec, direction, nbytes, pinned)
    else:
        cost = op_cost(func, args, kwargs, out)
        if cost.flops == 0 and cost.nbytes == 0:
            return None
        ns = kernel_ns(spec, cost)
    pointwise = torch.Tag.pointwise in getattr(func, "tags", ())
    return table.op_class(name, pointwise, direction), ns


class Backlog:
    """Keeps a spin kernel ahead of the host on the current stream: in two halves with an
    event between, renewed whenever the first half is over, so each op is queued behind at
    least half a spin."""

    def __init__(self) -> None:
        self.half: Any = None

    def keep(self) -> None:
        if self.half is None or self.half.query():
            torch.cuda._sleep(SLEEP_CYCLES)
            self.half = torch.cuda.Event()  # type: ignore[no-untyped-call]
            self.half.record()
            torch.cuda._sleep(SLEEP_CYCLES)


class Measure(TorchDispatchMode):
    """Times each op that can run a kernel with the profiler's CUDA timer and predicts it."""

    def __init__(self, spec: GpuSpec, timer: CudaTimer, backlog: Backlog | None) -> None:
        super().__init__()
        self.spec = spec
        self.timer = timer
        self.backlog = backlog
        self.step = 0
        self.ops: list[tuple[int, str, str, OpCount, int]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not _may_launch(func):
            return func(*args, **kwargs)
        if self.backlog is not None:
            self.backlog.keep()
        began = self.timer.begin(args, kwargs)
        if began is None:  # an op on the host
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        entry = OpCount()
        self.timer.queue(self.timer.end(began, entry))
        found = predict(self.spec, func, args, kwargs, out)
        if found is not None:
            self.ops.append((self.step, found[0], _name(func), entry, found[1]))
        return out


class StandInEvent:
    def __init__(self) -> None:
        self.at_ns = 0

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: StandInEvent) -> float:
        return (end.at_ns - self.at_ns) / 1e6


class StandInCuda(TorchCuda):
    """The timer's CUDA calls on a machine without a GPU: fake ``cuda:0`` tensors are GPU
    tensors, one stream, and a clock that moves :data:`TICK_NS` from each op's start event to
    its end event (the timer records them in pairs)."""

    def __init__(self) -> None:
        from torch._subclasses.fake_tensor import FakeTensor

        super().__init__()
        self.tensor_types = (torch.Tensor, torch.nn.Parameter, FakeTensor)
        self._current = lambda index: (0, index, 1)
        self.record = self._record
        self.clock_ns = 0
        self._records = 0

    def _record(self, event: StandInEvent, stream: Any) -> None:
        self._records += 1
        if self._records % 2 == 0:  # an end event: the op took a tick
            self.clock_ns += TICK_NS
        event.at_ns = self.clock_ns

    def make_stream(self, key: tuple[int, int, int]) -> Any:
        return key

    def current_device(self) -> int:
        return 0

    def new_event(self) -> StandInEvent:
        return StandInEvent()

    def synchronize(self, device: int) -> None:
        pass


class Gpu:
    """Where the measuring runs: the real GPU, or the stand-in (fake tensors, its clock)."""

    def __init__(self, stand_in: bool) -> None:
        self.stand_in = stand_in
        self.api: TorchCuda = StandInCuda() if stand_in else TorchCuda()
        self.device = torch.device("cuda", 0)

    @contextlib.contextmanager
    def tensors(self) -> Iterator[None]:
        """The stand-in's fake tensors (``cuda:0`` without a GPU); nothing on a GPU."""
        if not self.stand_in:
            yield
            return
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        with FakeTensorMode(shape_env=ShapeEnv()):
            yield

    def marks(self) -> tuple[Callable[[], None], Callable[[], list[int]]]:
        """``mark()`` at each step's end, and ``walls()``: ns between consecutive marks."""
        if self.stand_in:
            api = self.api
            assert isinstance(api, StandInCuda)
            at: list[int] = []
            return (lambda: at.append(api.clock_ns)), lambda: [
                b - a for a, b in zip(at, at[1:], strict=False)
            ]
        events: list[Any] = []

        def mark() -> None:
            events.append(torch.cuda.Event(enable_timing=True))  # type: ignore[no-untyped-call]
            events[-1].record()

        def walls() -> list[int]:
            torch.cuda.synchronize()
            return [
                round(a.elapsed_time(b) * 1e6) for a, b in zip(events, events[1:], strict=False)
            ]

        return mark, walls


def measure(
    gpu: Gpu, spec: GpuSpec, build: Callable[[torch.device], workloads.Run], steps: int, warmup: int
) -> tuple[list[table.OpTime], list[int]]:
    """One workload: its steps' wall times run plain, then its ops timed and predicted."""
    total = warmup + steps
    with gpu.tensors():
        run = build(gpu.device)
        run(warmup, lambda: None)  # the first steps pay for cuDNN's choices, the allocator
        mark, walls = gpu.marks()
        # NB: the stand-in's clock moves only under the timer: its plain run is timed too
        plain = Measure(spec, CudaTimer(gpu.api), None) if gpu.stand_in else None
        with plain if plain is not None else contextlib.nullcontext():
            run(total, mark)
        walls_ns = walls()[warmup - 1 : total - 1]
        timer = CudaTimer(gpu.api)
        mode = Measure(spec, timer, None if gpu.stand_in else Backlog())

        def step_done() -> None:
            mode.step += 1

        with mode:
            run(total, step_done)
        timer.resolve(wait=True)
    ops = [
        table.OpTime(step, cls, name, round(entry.ms * 1e6), predicted)
        for step, cls, name, entry, predicted in mode.ops
        if warmup <= step < total
    ]
    return ops, walls_ns


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="write the tables as JSON here")
    ap.add_argument("--markdown", metavar="PATH", help="write the README's tables here")
    ap.add_argument("--steps", type=int, default=20, help="steps measured (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="steps first, not measured (3)")
    ap.add_argument("--workloads", nargs="+", choices=sorted(workloads.WORKLOADS))
    ap.add_argument("--gpu", help="the model's GPU (default: the device's own name)")
    ap.add_argument(
        "--stand-in", action="store_true", help="no GPU: the pipeline with known op durations"
    )
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 1:
        ap.error("--steps and --warmup must be at least 1")
    if not args.stand_in and not torch.cuda.is_available():
        print("error: no CUDA GPU here (run on one, or --stand-in to test the pipeline)",
              file=sys.stderr)  # fmt: skip
        return 2
    device_name = "stand-in (no GPU)" if args.stand_in else torch.cuda.get_device_name(0)
    try:
        spec = gpu_spec(args.gpu or ("H100" if args.stand_in else device_name))
    except UnknownGpuError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    gpu = Gpu(args.stand_in)
    chosen = {"stand-in": workloads.stand_in} if args.stand_in else workloads.WORKLOADS
    names = args.workloads or list(chosen)
    results, every = [], []
    for name in names:
        ops, walls = measure(gpu, spec, chosen[name], args.steps, args.warmup)
        results.append(table.workload_dict(name, ops, walls))
        every += ops
    info = {
        "device_name": device_name,
        "spec": spec.name,
        "source": spec.source,
        "torch": torch.__version__,
        "stand_in": args.stand_in,
        "steps": args.steps,
        "warmup": args.warmup,
    }
    result = table.result_dict(info, results, every)
    print(table.render_text(result), end="")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table.render_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
