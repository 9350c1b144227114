"""Reading another host's /metrics page, which is untrusted input: the lines gpuwatch uses, with
every label made safe to print, every value checked one by one, and what is kept bounded.

prometheus_client's own parser takes about 12 s for an 8 MiB page (a host listing 100,000
processes), every second, on a background thread; this one reads only the metrics it knows
(others cost a regular-expression match) and is strict about the lines it reads, so a page of
garbage is still an error, not an empty host.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

MAX_LABEL = 256
"""Longer label values (untrusted) are cut."""
MAX_GPUS = 64
"""GPUs kept per host: NVML addresses at most 64 on a node; a page listing more is cut."""
MAX_PROCESSES = 64
"""Processes kept per GPU (those using the most memory); the rest are counted, not kept."""

#: The plausible range of each value gpuwatch reads, in its unit on the wire: a value outside it
#: (NaN and the infinities, which the exposition format allows, or 1e300) is one value not
#: reported, never the whole host unreachable, and never a figure that fills a column.
RANGES: dict[str, tuple[float, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": (0, 100),
    "DCGM_FI_DEV_MEM_COPY_UTIL": (0, 100),
    "DCGM_FI_DEV_ENC_UTIL": (0, 100),
    "DCGM_FI_DEV_DEC_UTIL": (0, 100),
    "DCGM_FI_DEV_FB_USED": (0, 2**30),  # MiB: up to a PiB
    "DCGM_FI_DEV_FB_FREE": (0, 2**30),
    "DCGM_FI_DEV_GPU_TEMP": (-100, 300),  # C
    "DCGM_FI_DEV_POWER_USAGE": (0, 100_000),  # W
    "DCGM_FI_DEV_SM_CLOCK": (0, 100_000),  # MHz
    "DCGM_FI_DEV_MEM_CLOCK": (0, 100_000),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": (0, 2**63),
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": (0, 2**40),  # KB/s: up to a PB/s
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": (0, 2**40),
    "DCGM_FI_PROF_SM_ACTIVE": (0, 1),  # ratios
    "DCGM_FI_PROF_SM_OCCUPANCY": (0, 1),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (0, 1),
    "DCGM_FI_PROF_DRAM_ACTIVE": (0, 1),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (0, 2**63),  # mJ
    "gpuwatch_gpu_held_idle": (0, 1),
    "gpuwatch_gpu_held_idle_seconds": (0, 2**40),
    "gpuwatch_process_gpu_memory_bytes": (0, 2**60),
    "gpuwatch_process_sm_util_percent": (0, 100),
}

_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+\S+)?[ \t]*")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_ESCAPE = re.compile(r"\\(.)")


class ExpositionError(ValueError):
    """The page is not in the exposition format (one line saying where)."""


def printable(text: str, limit: int = MAX_LABEL) -> str:
    """``text`` safe to show on a terminal: control characters (escape codes, newlines, bidi
    overrides and the like) become ``?``, and it is cut at ``limit`` characters."""
    text = text[:limit]
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else "?" for c in text)


def _labels(text: str, line_no: int) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None or m.end() == pos:
            raise ExpositionError(f'line {line_no}: labels are not name="value" pairs')
        value = m.group(2)
        if "\\" in value:
            value = _ESCAPE.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), value)
        out[m.group(1)] = printable(value)
        pos = m.end()
    return out


def value_of(name: str, text: str, line_no: int) -> float | None:
    """A sample's value, or None where it is not a plausible figure (see :data:`RANGES`)."""
    try:
        value = float(text)
    except ValueError:
        raise ExpositionError(f"line {line_no}: {printable(text, 40)!r} is not a number") from None
    low, high = RANGES[name]
    return value if math.isfinite(value) and low <= value <= high else None


@dataclass
class Page:
    """What a page says, per GPU (its label ``gpu``), bounded."""

    values: dict[str, dict[str, float | None]] = field(default_factory=dict)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    processes: dict[str, dict[tuple[str, str], dict[str, float | None]]] = field(
        default_factory=dict
    )
    gpus_cut: int = 0
    """GPUs beyond :data:`MAX_GPUS`, not kept."""
    implausible: dict[str, set[str]] = field(default_factory=dict)
    """Per GPU, the metrics whose value was out of range (left out)."""


def read_page(text: str) -> Page:
    """The metrics gpuwatch knows, from the text of a /metrics page."""
    page = Page()
    seen_gpus: set[str] = set()
    cut: set[str] = set()
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line or line[0] == "#" or line.isspace():
            continue
        m = _SAMPLE.fullmatch(line)
        if m is None:
            raise ExpositionError(f"line {line_no} is not a sample")
        name = m.group(1)
        if name not in RANGES:
            continue
        labels = _labels(m.group(2) or "", line_no)
        gpu = labels.get("gpu")
        if gpu is None or not gpu.isdigit() or len(gpu) > 6:
            continue
        if gpu not in seen_gpus:
            if len(seen_gpus) >= MAX_GPUS:
                cut.add(gpu)  # counted, not kept
                continue
            seen_gpus.add(gpu)
        value = value_of(name, m.group(3), line_no)
        if value is None:
            page.implausible.setdefault(gpu, set()).add(name)
        if name.startswith("gpuwatch_process_"):
            key = (labels.get("pid", "?"), labels.get("command", "?"))
            page.processes.setdefault(gpu, {}).setdefault(key, {})[name] = value
            continue
        page.values.setdefault(gpu, {})[name] = value
        page.labels.setdefault(gpu, labels)
    page.gpus_cut = len(cut)
    return page
