"""``gpuwatch top --once`` and ``--json``: one snapshot as text or JSON."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import time
from collections.abc import Callable

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from gpuwatch import _format as fmt
from gpuwatch.monitor.nvml._exposition import printable
from gpuwatch.monitor.nvml.activity import held_idle_since
from gpuwatch.monitor.nvml.sampler import Sampler
from gpuwatch.monitor.nvml.samples import GpuSample, Snapshot

#: Process rows ``--once`` draws (those using the most GPU memory); the rest are counted.
MAX_PROCESS_ROWS = 200

#: ``--once``/``--json``: the window between the two samples that GPM's figures and the mean
#: power are measured over (NVML's GPM wants at least 100 ms).
MEASURE_S = 0.25


def measured_snapshot(sampler: Sampler, window_s: float = MEASURE_S) -> Snapshot:
    """One snapshot; where a GPU has GPM or an energy counter, taken ``window_s`` after a first
    one, so that SM activity and the mean power are measured rather than left out."""
    first = sampler.snapshot()
    if not any(g.gpm or g.energy_total_mj is not None for g in first.gpus):
        return first
    time.sleep(window_s)  # NB: a measuring window, not a wait for something to happen
    return sampler.snapshot()


def _finite(value: object) -> object:
    """``value`` with every NaN or infinity replaced by None (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def snapshot_json(snap: Snapshot) -> str:
    """The ``gpuwatch.snapshot/1`` document; a figure that is not a finite number is null
    (NB: ``allow_nan=False``: never ``NaN`` or ``Infinity``, which are not JSON)."""
    return json.dumps(_finite(snap.to_dict()), indent=2, allow_nan=False)


def _cell(text: str) -> Text:
    """A table cell shown as it is: no rich markup read in it (``[/]`` in a process's command
    line is text), no control character reaching the terminal (a label of another host)."""
    return Text(printable(text, 4096))


#: The process table's Job column shows from this width.
JOB_COLUMN_FROM = 120
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
        ("Name", "left", lambda g: printable(g.name or fmt.NA)),
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
                str(g.index),
                _cell(g.name or fmt.NA),
                "[bold red]GPU LOST[/]",
                *[""] * (len(columns) - 3),
            )
            continue
        gpus.add_row(*(_cell(get(g)) for _, _, get in columns))
    procs = Table(title="Processes", box=box.SQUARE, title_justify="left")
    # NB: the job gives way to the command line on a narrow terminal (--json has both).
    jobs = width >= JOB_COLUMN_FROM
    heads = ["GPU", "PID", "User", "Type", "GPU mem", "SM", "CPU", "Host mem", "Job", "Command"]
    for col in heads if jobs else [h for h in heads if h != "Job"]:
        left = col in ("User", "Type", "Job", "Command")
        procs.add_column(col, justify="left" if left else "right", overflow="fold")
    rows = snap.processes
    shown = rows
    if len(rows) > MAX_PROCESS_ROWS:
        shown = sorted(rows, key=lambda p: -(p.gpu_memory_bytes or 0))[:MAX_PROCESS_ROWS]
        shown.sort(key=lambda p: (p.gpu_index, p.pid))
    for p in shown:
        procs.add_row(
            *(
                _cell(text)
                for text in (
                    str(p.gpu_index),
                    str(p.pid),
                    p.user or fmt.NA,
                    p.type,
                    fmt.size(p.gpu_memory_bytes),
                    fmt.pct(p.sm_util_pct),
                    fmt.pct(p.cpu_pct),
                    fmt.size(p.host_memory_bytes),
                    *([(p.job.label or "-") if p.job is not None else fmt.NA] if jobs else []),
                    p.command or p.name or fmt.NA,
                )
            )
        )
    blank = [""] * (9 if jobs else 8)
    if len(shown) < len(rows):
        procs.add_row(
            *blank,
            f"{len(rows) - len(shown):,} more processes not shown (the {MAX_PROCESS_ROWS} "
            "using the most GPU memory are)",
        )
    if not rows:
        unseen = any(g.problem for g in snap.gpus) or snap.problem
        procs.add_row(
            *blank,
            "no processes seen (see the notes below)"
            if unseen
            else "no processes are using the GPUs",
        )
    return Group(gpus, activity_table(snap), procs, *_notes(snap))


def _notes(snap: Snapshot) -> list[Text]:
    """What the tables leave out or could not get: the driver's problem, then each GPU's."""
    notes = ([f"! {snap.problem}"] if snap.problem else []) + [
        f"GPU {g.index}: {g.problem}" for g in snap.gpus if g.problem
    ]
    return [_cell(note) for note in notes]


def gpu_state(g: GpuSample, now: dt.datetime) -> str:
    """``HELD IDLE since 14:02 (12m) by alice`` / ``LOW SM ACTIVITY`` / ``no GPM``, or empty."""
    words = []
    since = held_idle_since(g, now)
    if g.held_idle and since is not None:
        owners = sorted({p.user or fmt.NA for p in g.processes})
        words.append(
            f"HELD IDLE since {since:%H:%M} ({fmt.span(g.held_idle_s)}) by {', '.join(owners)}"
        )
    if g.low_sm_activity:
        words.append("LOW SM ACTIVITY (busy by utilisation only)")
    if g.gpm is False:
        words.append("no GPM: SM activity unknown, utilisation only")
    return "; ".join(words)


def activity_table(snap: Snapshot) -> Table:
    """What the SMs really do (GPM), the energy used, and the GPUs held idle."""
    t = Table(title="Activity", box=box.SQUARE, title_justify="left")
    for col in ("GPU", "SM active", "Occupancy", "Tensor", "DRAM", "Energy", "Avg power"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("State", overflow="fold")
    for g in snap.gpus:
        if g.lost:
            continue
        t.add_row(
            str(g.index),
            fmt.pct(g.sm_active_pct),
            fmt.pct(g.sm_occupancy_pct),
            fmt.pct(g.tensor_active_pct),
            fmt.pct(g.dram_active_pct),
            fmt.energy(g.energy_since_start_j),
            fmt.num(g.power_avg_w, "W"),
            gpu_state(g, snap.time),
        )
    return t


def snapshot_text(snap: Snapshot, width: int = 200, color: bool = False) -> str:
    """The snapshot as text; plain unless ``color`` (ANSI) is asked for."""
    out = io.StringIO()
    console = Console(
        file=out, width=width, color_system="standard" if color else None, force_terminal=color
    )
    console.print(snapshot_renderable(snap, width))
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"
