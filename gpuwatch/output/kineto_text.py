"""The terminal summary of a torch.profiler trace's analysis (plain text: every figure is a
measured one, read from the trace; the window and definitions are printed with them)."""

from __future__ import annotations

import os
from typing import TextIO

from gpuwatch import _format as fmt
from profilers.kineto.events import Where
from profilers.kineto.result import CAUSES, DeviceTime, RankResult, TraceAnalysis

#: Steps listed in the summary (all of them are in the JSON).
MAX_STEPS = 20
NAME_WIDTH = 90
PIN_WORTH_BYTES = 64 * 1024
"""A pageable copy this large (on average) is worth pinning; a scalar read back is not."""

ADVICE = {
    "input-bound": "the GPU waits for batches: DataLoader(num_workers=N, pin_memory=True, "
    "persistent_workers=True), or prefetch the next batch while this one runs",
    "sync-bound": "the host waits for the GPU and then the GPU waits for the host: take the "
    ".item()/.cpu()/synchronize out of the step (log every N steps, keep values on the GPU)",
    "copy-bound": "blocking copies hold the host: pin the host memory and copy with "
    "non_blocking=True, or keep the data on the GPU",
    "comm-bound": "the GPU waits for collectives: overlap them with compute (DDP buckets, "
    "FSDP prefetch) or check for a slow rank",
    "launch-bound": "the host queues work slower than the GPU runs it: larger batches, "
    "torch.compile or CUDA graphs, fewer small ops",
    "dependency-bound": "the GPU had work queued but waited on another stream or an event: "
    "look at cross-stream waits (wait_stream, events) and the work they wait for",
    "no GPU work": "nothing ran on the GPU in this window: the host's work is all there is",
}


def _dur(ms: float) -> str:
    """A duration as the other outputs write it, but a nonzero one under half a microsecond in
    ns (Kineto writes ns-resolution times: a 130 ns window is not "0 µs")."""
    return f"{ms * 1e6:.0f} ns" if 0 < ms < 0.0005 else fmt.duration_ms(ms)


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "-"


def _short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _where(w: Where, width: int = NAME_WIDTH) -> str:
    """A place in ``width`` characters: a long file path loses its leading folders first, so
    the file, line, function and CPU op stay (two ops on one line stay two rows apart)."""
    full = w.key()
    if len(full) <= width or w.file is None:
        return _short(full, width)
    tail = full[len(w.file) :]
    keep = max(24, width - len(tail) - 1)  # a long op name is cut after the file's last 24
    return _short("…" + w.file[-keep:] + tail, width)


def _shows(d: DeviceTime) -> bool:
    """Whether NCCL kernels ran alone long enough to print (0.1% of the window, as shares are)."""
    return d.wall_ms > 0 and d.comm_ms >= 0.0005 * d.wall_ms


def run_line(r: RankResult, d: DeviceTime) -> str:
    idle = ", ".join(
        f"{c} {_pct(d.idle_by_cause_ms[c], d.wall_ms)}"
        for c in sorted(CAUSES, key=lambda c: -d.idle_by_cause_ms[c])
        if d.idle_by_cause_ms[c] > 0
    )
    # NB: the verdict counts NCCL kernels running alone as comm: said here, or a comm-bound
    # verdict beside a small comm idle share reads as a contradiction
    alone = f"; NCCL kernels alone {_pct(d.comm_ms, d.wall_ms)}" if _shows(d) else ""
    gpu = f"GPU {d.device}" + (f" ({r.gpus[d.device]})" if r.gpus.get(d.device) else "")
    return (
        f"{gpu}: {d.verdict}. busy {_pct(d.busy_ms, d.wall_ms)} "
        f"({_dur(d.busy_ms)} of {_dur(d.wall_ms)}{alone}), idle "
        f"{_pct(d.idle_ms, d.wall_ms)}" + (f": {idle}" if idle else "")
    )


def _steps(r: RankResult) -> list[str]:
    nccl = any(_shows(d) for d in r.run)
    head = f"  {'step':<18}{'wall':>10}{'busy':>8}" + (f"{'nccl':>8}" if nccl else "")
    head += "".join(f"{c[:6]:>8}" for c in CAUSES)
    out = [
        "Steps (share of each step's wall time; loader: host time in __next__"
        + ("; nccl: busy with NCCL kernels alone" if nccl else "")
        + ")"
    ]
    out.append(head + f"  {'loader':>7}  verdict")
    for s in r.steps[:MAX_STEPS]:
        for d in s.devices:
            name = s.name if len(s.devices) == 1 else f"{s.name} GPU {d.device}"
            cells = f"{_pct(d.comm_ms, d.wall_ms):>8}" if nccl else ""
            cells += "".join(f"{_pct(d.idle_by_cause_ms[c], d.wall_ms):>8}" for c in CAUSES)
            out.append(
                f"  {_short(name, 17):<18}{_dur(s.wall_ms):>10}"
                f"{_pct(d.busy_ms, d.wall_ms):>8}{cells}  {_pct(s.input_ms, s.wall_ms):>7}"
                f"  {d.verdict}"
            )
    if len(r.steps) > MAX_STEPS:
        out.append(f"  ... {len(r.steps) - MAX_STEPS} more steps (all of them in --json)")
    return out


def _lines(r: RankResult, top: int) -> list[str]:
    if not r.lines:
        return []
    out = [
        "Idle time by cause and line (the run)"
        if r.has_stacks
        else "Idle time by cause and CPU op (the run; no Python stacks in the trace)"
    ]
    for c in r.lines[:top]:
        out.append(f"  {c.cause:<10}{_dur(c.idle_ms):>10}  {_where(c.where)}")
    return out


def _kernels(r: RankResult, top: int) -> list[str]:
    if not r.kernels:
        return []
    busy = {d.device: d.busy_ms for d in r.run}
    out = ["Top kernels (GPU time; share of the device's busy time)"]
    for k in r.kernels[:top]:
        out.append(
            f"  {_dur(k.total_ms):>10} {_pct(k.total_ms, busy.get(k.device, 0)):>6} "
            f"{k.count:>7,}x  {_short(k.name)}" + (f"  (GPU {k.device})" if len(busy) > 1 else "")
        )
    return out


def _copies(r: RankResult, top: int) -> list[str]:
    if not r.copies:
        return []
    out = ["Copies (direction, host memory, count, bytes, GPU time)"]
    for c in r.copies:
        memory = c.memory or "memory not in trace"
        out.append(
            f"  {c.direction or '?':<4} {memory:<20}{c.count:>7,}  {fmt.size(c.bytes):>10}  "
            f"{_dur(c.gpu_ms)}"
        )
    for c in r.copy_lines[:top]:
        assert c.where is not None
        pin = c.memory == "pageable" and c.bytes >= PIN_WORTH_BYTES * c.count
        fix = "  <- pageable: pin_memory()/pin_memory=True" if pin else ""
        out.append(
            f"    {c.direction} {c.count:,}x {fmt.size(c.bytes)} from {_where(c.where, 70)}{fix}"
        )
    return out


def _comparable(r: RankResult) -> list[str]:
    out = ["Window and definitions (gpuwatch report --json has them in full)"]
    out.append(
        "  window: each ProfilerStep#N's host interval"
        if r.has_steps
        else "  window: the whole trace"
    )
    out.append("  busy: union of kernel, memcpy, memset intervals per device, all streams")
    for a in r.active:
        d = a.to_dict()
        out.append(
            f"  HTA's temporal breakdown window (first to last GPU activity, GPU {a.device}): "
            f"busy {d['busy_pct']}%, idle {d['idle_pct']}%, compute {d['compute_pct']}%"
        )
    for s in r.streams:
        out.append(
            f"  HTA's idle breakdown, GPU {s.device} stream {s.stream}: host_wait "
            f"{_dur(s.host_wait_ms)}, kernel_wait {_dur(s.kernel_wait_ms)}, "
            f"other {_dur(s.other_ms)}"
        )
    return out


def rank_lines(r: RankResult, top: int, ranks: int) -> list[str]:
    where = os.path.basename(r.path) or r.path
    title = f"gpuwatch report: torch.profiler trace {where}"
    if ranks > 1:
        title += f" (rank {r.rank})"
    if not r.has_steps:
        steps = "no ProfilerStep: the whole trace is one window"
    elif len(r.steps) == 1:
        steps = f"1 step ({r.steps[0].name})"
    else:
        steps = f"{len(r.steps)} steps ({r.steps[0].name} to {r.steps[-1].name})"
    wall = sum(s.wall_ms for s in r.steps)
    out = [title, f"{steps}, {_dur(wall)}; measured from the trace"]
    for d in r.run:
        out.append(run_line(r, d))
        if d.verdict in ADVICE:
            out.append(f"  what to try: {ADVICE[d.verdict]}")
    for part in (_steps(r), _lines(r, top), _kernels(r, top), _copies(r, top), _comparable(r)):
        if part:
            out += ["", *part]
    out += [f"note: {n}" for n in r.notes]
    return out


def ranks_lines(analysis: TraceAnalysis) -> list[str]:
    """Several ranks side by side: each one's mean step, busy share and verdict, per GPU, and
    the slowest (the one the others wait for at each collective)."""
    out = [f"{len(analysis.ranks)} ranks (mean step; busy share; verdict, per GPU)"]
    means: dict[int, float] = {}
    for r in analysis.ranks:
        mean = sum(s.wall_ms for s in r.steps) / len(r.steps) if r.steps else 0.0
        means[r.rank] = mean
        for d in r.run:
            out.append(
                f"  rank {r.rank:<4} GPU {d.device:<3}{_dur(mean):>10}"
                f"{_pct(d.busy_ms, d.wall_ms):>8}  {d.verdict}"
            )
    slowest = max(means, key=lambda k: means[k])
    fastest = min(means, key=lambda k: means[k])
    if means[slowest] > means[fastest]:
        out.append(
            f"  slowest: rank {slowest}, {_pct(means[slowest] - means[fastest], means[fastest])} "
            f"longer steps than rank {fastest}"
        )
    return out


def summary_lines(analysis: TraceAnalysis, top: int = 5) -> list[str]:
    out: list[str] = ranks_lines(analysis) if len(analysis.ranks) > 1 else []
    for r in analysis.ranks:
        if out:
            out.append("")
        out += rank_lines(r, top, len(analysis.ranks))
    return out


def print_summary(analysis: TraceAnalysis, top: int = 5, file: TextIO | None = None) -> None:
    print("\n".join(summary_lines(analysis, top)), file=file)
