"""The terminal summary of a profiled run (rich)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpuwatch import _format as fmt
from gpuwatch.analysis.findings import Findings
from gpuwatch.analysis.hints import Hint, hints_order
from gpuwatch.output.collectives import rank_line, summary_parts
from gpuwatch.output.compiled import compiled_lines
from gpuwatch.output.memory import failure_part, memory_part
from gpuwatch.output.timeview import time_lines
from profilers import DIRECTIONS, Line, Report
from profilers.finite import mapping, number

DIRECTION_NAMES = {"h2d": "host→GPU", "d2h": "GPU→host", "d2d": "in one GPU", "p2p": "GPU→GPU"}


def summary(report: Report, findings: Findings, top: int = 5) -> RenderableType:
    """The summary of ``report`` from ``findings`` (its analysis): header, hints, tables."""
    failure = failure_part(report)  # a device mismatch or OOM, right under the header
    parts: list[RenderableType] = [_header(report, findings), *([failure] if failure else [])]
    # NB: the verdict (in the header) and the top fixes first, on the first screen; the
    # memory and the tables after them
    parts += [_hints_part(report, findings.hints), _totals(report), _syncs(report)]
    more = (summary_parts(report, top, findings.spreads), memory_part(report, top))
    parts += [part for part in more if part is not None]
    for title, key, value in (
        ("Top lines by bytes moved", "bytes", lambda s: fmt.size(s.bytes_moved)),
        ("Top lines by syncs", "syncs", lambda s: f"{s.syncs.count:,} ({_causes(s)})"),
        ("Top lines by kernel time", "kernel_time_ms", lambda s: fmt.duration_ms(s.kernel_time_ms)),
        (
            "Top lines by the time of their backward (inside the .backward() line's time)",
            "backward_ms",
            lambda s: f"{fmt.duration_ms(s.backward_ms)} in {s.backward_ops:,} ops",
        ),
    ):
        lines = report.top_lines(key, top)
        if lines:
            parts.append(_lines_table(title, lines, value))
    inside = _library_table(report, top)
    if inside is not None:
        parts.append(inside)
    return Group(*parts)


#: Hints the summary shows (the JSON and ``gpuwatch report`` give the same, in the same order).
HINTS_SHOWN = 12


def _hints_part(report: Report, found: Sequence[Hint]) -> RenderableType:
    if found:
        return _hints(found[:HINTS_SHOWN], len(found))
    if no_gpu_error(report):
        return Text(
            "No hints: the script stopped for want of a GPU (see NO GPU above).", style="yellow"
        )
    if report.gpu_fallback:
        return Text("No hints: the script ran on the CPU (see NO GPU above).", style="yellow")
    return Text("No hints: no line copies or syncs often enough to flag.", style="green")


def _hints(found: Sequence[Hint], total: int | None = None) -> RenderableType:
    """Each hint as a short paragraph under its line, the largest saving first: advice wraps at any
    width, never cut (a table cut it at 80 columns, or whenever stderr was not a terminal)."""
    more = (
        f" ({total - len(found)} more in the HTML report)" if total and total > len(found) else ""
    )
    parts: list[RenderableType] = [Text(f"Hints, {hints_order(found)}{more}", style="italic")]
    for h in found:
        parts.append(Padding(Text(h.where, style="cyan"), (0, 0, 0, 2)))
        parts.append(Padding(Text(h.message), (0, 0, 0, 4)))
        parts.append(Padding(Text(f"evidence: {h.evidence}", style="dim"), (0, 0, 0, 4)))
    return Group(*parts)


def _header(r: Report, found: Findings) -> RenderableType:
    status = "finished" if not r.partial else "did not finish (partial report)"
    if r.error:
        status += f": {r.error}"
    devices = (
        ", ".join(
            f"{d['device']} ({d['name']})"
            if d.get("name") and d["device"] != "cpu"
            else str(d["device"])
            for d in r.devices
        )
        or "none"
    )
    lines = Text()
    lines.append("gpuwatch profile ", style="bold").append(" ".join(r.command) or "(library)")
    ranked = rank_line(r)
    if ranked:
        lines.append(f"\n{ranked}")
    lines.append(f"\n{fmt.duration_ms(r.duration_s * 1000)}, exit code {r.exit_code}, {status}")
    ops = f"{r.totals.ops:,}" if r.counts_ops else "not counted"
    lines.append(f"\ndevices: {devices}    ops: {ops}    kernel time: {kernel_time(r)}")
    for line in compiled_lines(r):  # NB: before the time: it is of the code that ran
        lines.append(f"\n{line}", style="yellow")
    for line in time_lines(r, found) + step_lines(r):
        lines.append(f"\n{line}", style="bold")
    for line in simulated_lines(r) + fallback_lines(r):
        lines.append(f"\n{line}", style="yellow")
    for line in gpu_lines(r):
        lines.append(f"\n{line}")
    for line in internal_error_lines(r):
        lines.append(f"\n{line}", style="yellow")
    return Panel(lines, box=box.ROUNDED, expand=False)


def step_lines(r: Report) -> list[str]:
    """The run per step, first: what one step of it copies, waits for and costs."""
    if not r.steps:
        return []
    window = r.steps.get("window")
    if window is not None and not r.steps.get("seen"):
        return [
            f"--steps {window[0]}:: no step was seen (no optimizer.step(), no profilers.step()), "
            "so nothing was profiled"
        ]
    n = int(r.steps["count"])
    if not n:
        first = window[0] if window is not None else 0
        return [f"step {first} was never reached: the run had {r.steps.get('seen')} steps"]
    t, k = r.totals, len(r.ranks or [0])  # NB: a merged report's totals are its ranks' summed
    copies = sum(t.copies(way).count for way in DIRECTIONS)
    c, w = copies / n / k, t.syncs.count / n / k
    per = (
        f"per step{' per rank' if k > 1 else ''}: {c:.3g} cop{'y' if c == 1 else 'ies'} "
        f"({fmt.size(t.bytes_moved / n / k)}), {w:.3g} sync{'' if w == 1 else 's'}"
    )
    if k > 1:  # each rank's own, from its lines
        syncs = {rank: 0 for rank in map(str, r.ranks or [])}
        for s in r.lines:
            for rank, counts in s.by_rank.items():
                syncs[rank] = syncs.get(rank, 0) + int(number(mapping(counts["syncs"])["count"]))
        per += f" ({min(syncs.values()) / n:.3g}-{max(syncs.values()) / n:.3g} across {k} ranks)"
    if t.kernel_time_ms and not r.options.fake_cuda:
        per += f", kernel time {fmt.duration_ms(t.kernel_time_ms / n / k)}"
    # NB: by the steps a line was seen in where the report says (a one-time model.to(device)
    # makes more copies than there are steps), else by its counts (reports before that field).
    every = [
        s
        for s in r.lines
        if (
            s.steps_active >= n
            if s.steps_active
            else s.syncs.count >= n or s.h2d.count + s.d2h.count >= n
        )
    ]
    which = f"steps {window[0]} to {window[1] - 1}, " if window is not None else ""
    out = [f"{n:,} steps ({which}{r.steps['source']}): {per}"]
    if every:
        lines = ", ".join(f"{s.file}:{s.line}" for s in every[:4])
        out.append(f"lines that copy or sync every step: {lines}{' ...' if len(every) > 4 else ''}")
    return out


def kernel_time(r: Report) -> str:
    """The run's kernel time and how it was measured, or why it was not."""
    if r.options.fake_cuda:
        return "not measured (--fake-cuda: the GPUs were simulated)"
    source = r.options.timing_source
    if source == "off":
        return "not timed"
    return f"{fmt.duration_ms(r.totals.kernel_time_ms)} ({source})"


def simulated_lines(r: Report) -> list[str]:
    """What a --fake-cuda run is: its counts are a GPU run's, the values it read back are not."""
    fake = r.options.fake_cuda
    if not fake:
        return []
    n, ph = fake.devices, fake.placeholders
    held = (
        "values computed on the CPU"
        if fake.values == "real"
        else "placeholder values (--fake-values real to compute them)"
    )
    out = [
        f"SIMULATED: --fake-cuda, {n} fake GPU{'s' if n != 1 else ''}, {held}. Copies, bytes, "
        "syncs and lines are what the script does on a GPU."
    ]
    read = int(ph.get("values", 0)) + int(ph.get("host_copies", 0)) + int(ph.get("sizes", 0))
    if read:
        out.append(
            f"Values read back from the GPU were placeholders: {ph.get('values', 0):,} scalars "
            f"(0), {ph.get('host_copies', 0):,} tensors copied to the host (zeros), "
            f"{ph.get('sizes', 0):,} value-dependent sizes (every element kept); control flow "
            "that depends on them followed the placeholders."
        )
    return out


#: What torch raises when a script asks for a GPU the machine does not have: the CPU build
#: (torch/cuda/__init__.py ``_lazy_init``), a CUDA build with no driver or no device
#: (c10/cuda/CUDAFunctions.cpp, torch/csrc/cuda/Module.cpp), and the CUDA runtime's own texts.
NO_GPU_ERRORS = (
    "Torch not compiled with CUDA enabled",
    "Found no NVIDIA driver on your system",
    "No CUDA GPUs are available",
    "no CUDA-capable device is detected",
    "CUDA driver initialization failed",
    "found no NVIDIA driver",
)


def no_gpu_error(r: Report) -> bool:
    """The script stopped because this machine has no GPU for it (never under --fake-cuda)."""
    error = r.error or ""
    return not r.options.fake_cuda and any(e in error for e in NO_GPU_ERRORS)


def fallback_lines(r: Report) -> list[str]:
    """A script that found no GPU and ran on the CPU, or stopped for want of one: its report is
    no verdict on its GPU run; --fake-cuda counts what it does on one."""
    fb = r.gpu_fallback
    # NB: before the question's line: torch's own lazy init asks device_count() at the
    # script's line, which would read as the script having asked
    if no_gpu_error(r):
        return [
            f"NO GPU: the script stopped for want of a CUDA GPU ({r.error}), which this machine "
            "does not have. Run it with --fake-cuda to count its copies and syncs on a simulated "
            "GPU (gpuwatch profile --fake-cuda ...)."
        ]
    if not fb:
        return []
    return [
        f"NO GPU: the script asked {fb['asked']} at {fb['file']}:{fb['line']}, got "
        f"{fb['answer']!r} and ran on the CPU, so this report shows nothing of what it does on "
        "a GPU. Run it with --fake-cuda to count its copies and syncs on a simulated GPU."
    ]


def internal_error_lines(r: Report) -> list[str]:
    """What the profiler could not count (the ops ran; their copies and syncs are missing)."""
    if not r.internal_errors:
        return []
    total = sum(int(e["count"]) for e in r.internal_errors.values())
    out = [
        f"gpuwatch could not count {total:,} ops (they ran as usual; their copies/syncs are missing):"
    ]
    for op, e in sorted(r.internal_errors.items(), key=lambda kv: -int(kv[1]["count"]))[:5]:
        out.append(f"  {op} x{int(e['count']):,}: {e.get('error', '')}")
    return out


def gpu_source(r: Report) -> str:
    """What the GPU figures are: measured by NVML, or simulated by ``--demo``."""
    if r.options.gpu_stats == "demo":
        return "simulated by --demo, not measured"
    return "mean NVML utilisation"


def used_no_gpu(r: Report) -> bool:
    """GPU stats were taken, but the script used no CUDA device: no GPU's load is its own."""
    sampled = r.options.gpu_stats in ("NVML", "demo")
    return sampled and not any(str(d.get("device", "")).startswith("cuda") for d in r.devices)


def gpu_lines(r: Report) -> list[str]:
    """One line per GPU the script used (busy share, memory peak, its own processes' share),
    or why there is none."""
    source = gpu_source(r)
    out = []
    for gpu, busy, peak_mem, mine in gpu_busy(r):
        line = (
            f"GPU {gpu}: busy {busy:.0f}% of the run ({source}), memory peak {fmt.size(peak_mem)}"
        )
        if mine is not None:
            line += f"; this script's processes: {mine:.0f}% of its SMs"
        out.append(line)
    if not out and used_no_gpu(r):
        out.append("GPU: no CUDA device was used, so no GPU's load is charged to this script")
    scope = r.options.gpu_samples_scope
    if out and isinstance(scope, str):
        out.append(f"(GPU figures cover {scope})")
    return out


def gpu_busy(r: Report) -> list[tuple[int, float, int | None, float | None]]:
    """``(gpu, mean utilisation %, peak memory bytes, mean SM % of the script's own processes
    or None)`` per GPU from the report's samples."""
    out = []
    for gpu in sorted({s["gpu"] for s in r.gpu_samples}):
        samples = [s for s in r.gpu_samples if s["gpu"] == gpu]
        utils = [s["gpu_util_pct"] for s in samples if s.get("gpu_util_pct") is not None]
        mems = [s["memory_used_bytes"] for s in samples if s.get("memory_used_bytes") is not None]
        mine = [s["script_sm_util_pct"] for s in samples if s.get("script_sm_util_pct") is not None]
        if utils:
            share = sum(mine) / len(samples) if mine else None
            out.append((gpu, sum(utils) / len(utils), max(mems) if mems else None, share))
    return out


def _totals(r: Report) -> Table:
    t = Table(title="Copies", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("direction", "count", "bytes", "pageable", "non_block", "throughput"):
        t.add_column(col, justify="left" if col == "direction" else "right", no_wrap=True)
    for way in DIRECTIONS:
        c = r.totals.copies(way)
        t.add_row(
            f"{way}  {DIRECTION_NAMES[way]}",
            f"{c.count:,}",
            fmt.size(c.bytes)
            + (f" +{c.unknown_bytes:,} of unknown size" if c.unknown_bytes else ""),
            f"{c.pageable:,}",
            f"{c.non_blocking:,}",
            fmt.throughput(c.bytes, c.time_ms / 1000) if c.time_ms else "-",
        )
    return t


def _syncs(r: Report) -> RenderableType:
    s = r.totals.syncs
    if not s.count:
        return Text("Syncs: none: the host never waited for a GPU.", style="green")
    t = Table(
        title=f"Syncs: {s.count:,} (the host waited for a GPU)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        min_width=44,
    )
    t.add_column("cause")
    t.add_column("count", justify="right")
    for cause, n in sorted(s.by_cause.items(), key=lambda kv: -kv[1]):
        t.add_row(cause, f"{n:,}")
    return t


def _lines_table(title: str, lines: list[Line], value: Callable[[Line], str]) -> Table:
    where = [f"{s.file}:{s.line}" for s in lines]
    values = [value(s) for s in lines]
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, expand=True)
    t.add_column("line", style="cyan", no_wrap=True, min_width=max(map(len, where)))
    t.add_column("value", justify="right", no_wrap=True, min_width=max(map(len, values)))
    t.add_column("source", no_wrap=True, overflow="ellipsis", ratio=1)
    for w, v, s in zip(where, values, lines, strict=True):
        t.add_row(escape(w), escape(v), escape(s.source or s.function))
    return t


def _library_table(report: Report, top: int) -> Table | None:
    """Where inside a library the top lines' copies and syncs were made (at most three frames a
    line): ``train.py:31`` and ``transformers/trainer.py:2410``; None when no library made any."""
    lines: list[Line] = []
    for key in ("syncs", "bytes"):
        lines += [s for s in report.top_lines(key, top) if s.library and s not in lines]
    if not lines:
        return None
    t = Table(
        title="Made inside libraries (your line, then the library's line that made it)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        expand=True,
    )
    rows = [
        (
            f"{s.file}:{s.line}" if i == 0 else "",
            f"{f.file}:{f.line} {f.function}",
            f"{f.syncs:,}",
            f"{f.copies:,} ({fmt.size(f.copy_bytes)})" if f.copies else "0",
        )
        for s in lines
        for i, f in enumerate(s.library[:3])
    ]
    t.add_column("line", style="cyan", no_wrap=True)
    t.add_column("made at", no_wrap=True, min_width=max(len(r[1]) for r in rows), ratio=1)
    t.add_column("syncs", justify="right", no_wrap=True)
    t.add_column("copies", justify="right", no_wrap=True)
    for row in rows:
        t.add_row(*map(escape, row))
    return t


def _causes(s: Line) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in s.syncs.by_cause.items())


def print_summary(report: Report, top: int, file: TextIO | None, findings: Findings) -> None:
    """The summary on ``file`` (stderr by default); a terminal that went away is no error."""
    from rich.console import Console

    try:
        Console(file=file or sys.stderr, soft_wrap=False).print(summary(report, findings, top=top))
    except OSError:
        pass  # the terminal went away (SIGHUP): the report files are what is left to give
