"""``gpuwatch top --once`` and ``--json``: one snapshot as text or JSON."""

from __future__ import annotations

import io
import json

from rich import box
from rich.console import Console, Group
from rich.table import Table

from gpuwatch import _format as fmt
from gpuwatch.nvml.samples import Snapshot


def snapshot_json(snap: Snapshot) -> str:
    return json.dumps(snap.to_dict(), indent=2)


def snapshot_renderable(snap: Snapshot) -> Group:
    """An nvidia-smi-like pair of tables: one row per GPU, then the processes."""
    gpus = Table(
        title=f"gpuwatch  {snap.time:%Y-%m-%d %H:%M:%S}  driver {snap.driver_version or fmt.NA}",
        box=box.SQUARE,
        title_justify="left",
    )
    for col, justify in (
        ("GPU", "right"),
        ("Name", "left"),
        ("Util", "right"),
        ("Memory", "right"),
        ("Temp", "right"),
        ("Power / Limit", "right"),
        ("Fan", "right"),
        ("SM / Mem clock", "right"),
        ("Perf", "right"),
        ("PCIe RX / TX", "right"),
    ):
        gpus.add_column(col, justify=justify)  # type: ignore[arg-type]
    for g in snap.gpus:
        if g.lost:
            gpus.add_row(str(g.index), g.name or fmt.NA, "[bold red]GPU LOST[/]", *[""] * 7)
            continue
        gpus.add_row(
            str(g.index),
            g.name or fmt.NA,
            fmt.pct(g.gpu_util_pct),
            f"{fmt.size(g.memory_used_bytes)} / {fmt.size(g.memory_total_bytes)}",
            fmt.num(g.temperature_c, "C"),
            f"{fmt.num(g.power_w, 'W')} / {fmt.num(g.power_limit_w, 'W')}",
            fmt.pct(g.fan_pct),
            f"{fmt.num(g.sm_clock_mhz, ' MHz')} / {fmt.num(g.mem_clock_mhz, ' MHz')}",
            fmt.NA if g.pstate is None else f"P{g.pstate}",
            f"{fmt.rate(g.pcie_rx_bytes_per_s)} / {fmt.rate(g.pcie_tx_bytes_per_s)}",
        )
    procs = Table(title="Processes", box=box.SQUARE, title_justify="left")
    for col, justify in (
        ("GPU", "right"),
        ("PID", "right"),
        ("User", "left"),
        ("Type", "left"),
        ("GPU mem", "right"),
        ("SM", "right"),
        ("CPU", "right"),
        ("Host mem", "right"),
        ("Command", "left"),
    ):
        procs.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    rows = snap.processes
    for p in rows:
        procs.add_row(
            str(p.gpu_index),
            str(p.pid),
            p.user or fmt.NA,
            p.type,
            fmt.size(p.gpu_memory_bytes),
            fmt.pct(p.sm_util_pct),
            fmt.pct(p.cpu_pct),
            fmt.size(p.host_memory_bytes),
            p.command or p.name or fmt.NA,
        )
    if not rows:
        procs.add_row("", "", "", "", "", "", "", "", "no processes are using the GPUs")
    return Group(gpus, procs)


def snapshot_text(snap: Snapshot, width: int = 200, color: bool = False) -> str:
    """The snapshot as text; plain unless ``color`` (ANSI) is asked for."""
    out = io.StringIO()
    console = Console(
        file=out, width=width, color_system="standard" if color else None, force_terminal=color
    )
    console.print(snapshot_renderable(snap))
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"
