"""``gpuwatch top --once`` and ``--json``: one snapshot as text or JSON."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

from rich import box
from rich.console import Console, Group
from rich.table import Table

from gpuwatch import _format as fmt
from gpuwatch.nvml.samples import GpuSample, Snapshot


def snapshot_json(snap: Snapshot) -> str:
    return json.dumps(snap.to_dict(), indent=2)


#: The GPU table's columns that give way, first to last, as the terminal narrows (the widths
#: below which each goes: the full table is 151 columns with an H100's name).
DROPPED_BELOW = (("Fan", 151), ("Perf", 146), ("SM / Mem clock", 140), ("PCIe RX / TX", 119))


def snapshot_renderable(snap: Snapshot, width: int = 200) -> Group:
    """An nvidia-smi-like pair of tables: one row per GPU, then the processes; ``width`` says
    which of the GPU table's columns fit (DROPPED_BELOW)."""
    gpus = Table(
        title=f"gpuwatch  {snap.time:%Y-%m-%d %H:%M:%S}  driver {snap.driver_version or fmt.NA}",
        box=box.SQUARE,
        title_justify="left",
    )
    dropped = {col for col, below in DROPPED_BELOW if width < below}
    columns: list[tuple[str, str, Callable[[GpuSample], str]]] = [
        ("GPU", "right", lambda g: str(g.index)),
        ("Name", "left", lambda g: g.name or fmt.NA),
        ("Util", "right", lambda g: fmt.pct(g.gpu_util_pct)),
        (
            "Memory",
            "right",
            lambda g: f"{fmt.size(g.memory_used_bytes)} / {fmt.size(g.memory_total_bytes)}",
        ),
        ("Temp", "right", lambda g: fmt.num(g.temperature_c, "C")),
        (
            "Power / Limit",
            "right",
            lambda g: f"{fmt.num(g.power_w, 'W')} / {fmt.num(g.power_limit_w, 'W')}",
        ),
        ("Fan", "right", lambda g: fmt.pct(g.fan_pct)),
        (
            "SM / Mem clock",
            "right",
            lambda g: f"{fmt.num(g.sm_clock_mhz, ' MHz')} / {fmt.num(g.mem_clock_mhz, ' MHz')}",
        ),
        ("Perf", "right", lambda g: fmt.NA if g.pstate is None else f"P{g.pstate}"),
        (
            "PCIe RX / TX",
            "right",
            lambda g: f"{fmt.rate(g.pcie_rx_bytes_per_s)} / {fmt.rate(g.pcie_tx_bytes_per_s)}",
        ),
    ]
    columns = [c for c in columns if c[0] not in dropped]
    live = [g for g in snap.gpus if not g.lost]
    # The name is the one column that gives way (cut with an ellipsis): it gets what the others,
    # at their full width, leave (each cell has a space either side and a rule after it).
    others = sum(
        max([len(col)] + [len(get(g)) for g in live]) + 3
        for col, _, get in columns
        if col != "Name"
    )
    name_room = max(8, width - others - 4)
    for col, justify, _ in columns:
        if col == "Name":
            gpus.add_column(col, overflow="ellipsis", no_wrap=True, max_width=name_room)
        else:
            gpus.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for g in snap.gpus:
        if g.lost:
            gpus.add_row(
                str(g.index), g.name or fmt.NA, "[bold red]GPU LOST[/]", *[""] * (len(columns) - 3)
            )
            continue
        gpus.add_row(*(get(g) for _, _, get in columns))
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
    console.print(snapshot_renderable(snap, width))
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"
