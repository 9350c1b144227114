"""One GPU: meters, a stats block and history sparklines; or a single line when compact."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from gpuwatch import _format as fmt
from gpuwatch.monitor.nvml.history import GpuHistory
from gpuwatch.monitor.nvml.samples import GpuSample, throttle_names
from gpuwatch.ui.widgets._style import TEMP_LEVELS, bar, level_style
from gpuwatch.ui.widgets.history import history_line
from gpuwatch.ui.widgets.lines import LinesWidget, TextLines
from gpuwatch.ui.widgets.meter import meter_line


class CardBody(LinesWidget):
    """A full card's rows in one widget: two meters, three lines of stats and, with graphs, the
    activity line (GPM, energy) and three history lines. One widget, not nine: a tick costs
    Textual one region per card."""

    DEFAULT_CSS = "CardBody { height: 9; width: 1fr; }"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.sample: GpuSample | None = None
        self.history: GpuHistory | None = None
        self.graphs = True

    def show(self, sample: GpuSample | None, history: GpuHistory | None, graphs: bool) -> None:
        """New figures: the rows they change are repainted, once."""
        self.sample, self.history, self.graphs = sample, history, graphs
        self.redraw()

    def lines(self) -> list[Text]:
        g, width = self.sample, self.size.width
        if g is None or width <= 0:
            return []
        if g.lost:
            lost = "GPU LOST: NVML says it fell off the bus or stopped answering"
            rows = [meter_line("GPU", None, "lost", width), meter_line("MEM", None, "", width)]
            return [*rows, Text(lost, style="bold red")]
        used, total = fmt.size(g.memory_used_bytes), fmt.size(g.memory_total_bytes)
        util = f"{fmt.pct(g.gpu_util_pct):>4}"
        if g.sm_active_pct is not None:  # NB: the honest figure beside NVML's "busy"
            util += f" SM {fmt.pct(g.sm_active_pct):>4}"
        rows = [
            meter_line("GPU", g.gpu_util_pct, util, width),
            meter_line("MEM", g.memory_used_pct, f"{used} / {total}", width),
            *stats_text(g, width).split("\n"),
        ]
        h = self.history
        if self.graphs and h is not None:
            pcie = h.pcie_bytes_per_s
            rows += [
                activity_text(g, width),
                history_line("util", h.util_pct, _peak(h.util_pct), width, 100.0),
                history_line("mem", h.memory_pct, _peak(h.memory_pct), width, 100.0),
                history_line("pcie", pcie, f"max {fmt.rate(max(pcie, default=0))}", width, None),
            ]
        return rows


def _peak(values: Sequence[float]) -> str:
    return f"max {max(values, default=0):3.0f}%"


class GpuCard(Widget):
    """A card for one GPU. :meth:`show` gives it a sample and its history; it redraws the rows
    that changed."""

    DEFAULT_CSS = """
    GpuCard {
        height: auto;
        border: round $primary-darken-1;
        border-title-color: $text;
        border-title-style: bold;
        padding: 0 1;
    }
    GpuCard.-lost { border: round $error; }
    GpuCard #compact { display: none; height: 1; }
    GpuCard.-compact { border: none; padding: 0; height: 1; }
    GpuCard.-compact #compact { display: block; }
    GpuCard.-compact > .full { display: none; }
    GpuCard.-brief CardBody { height: 5; }
    GpuCard TextLines { width: 1fr; }
    """

    compact: reactive[bool] = reactive(False)
    """One line instead of the full card (many GPUs or a small terminal)."""
    graphs: reactive[bool] = reactive(True)
    """The history graphs under the stats (off: a brief card, three rows shorter)."""

    def __init__(self, index: int, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.index = index
        self.border_title = f"GPU {index}"
        self.sample: GpuSample | None = None
        """The latest sample of this GPU."""
        self._history: GpuHistory | None = None
        self._titles: tuple[str, str] = ("", "")

    def compose(self) -> ComposeResult:
        yield TextLines(id="compact")
        yield CardBody(id="body", classes="full")

    def watch_compact(self, compact: bool) -> None:
        self.set_class(compact, "-compact")
        self._redraw()

    def watch_graphs(self, graphs: bool) -> None:
        self.set_class(not graphs, "-brief")
        self._redraw()

    def on_resize(self) -> None:
        self._redraw()  # the compact line's form depends on the width

    def show(self, sample: GpuSample, history: GpuHistory | None = None) -> None:
        """The latest sample and the graphs' data (oldest first): one redraw for both."""
        self.sample, self._history = sample, history
        self._redraw()

    def _redraw(self) -> None:
        g = self.sample
        if g is None or not self.is_mounted:
            return
        self.set_class(g.lost, "-lost")
        # NB: each of these repaints the card when set, even to the same text; a tick repaints
        # only what changed, and the layout never moves (the body keeps its height).
        title = f"GPU {g.index} · {g.name or fmt.NA}"
        subtitle = g.problem if g.problem and not g.lost else (g.pci_bus_id or "")
        flags = flags_text(g).plain
        if flags and not g.lost:  # NB: what a fleet owner looks for first, in every layout
            subtitle = f"{flags} · {subtitle}" if subtitle else flags
        if (title, subtitle) != self._titles:
            self._titles = (title, subtitle)
            # NB: plain Content, not markup: a remote host's label is untrusted text.
            self.border_title, self.border_subtitle = Content(title), Content(subtitle)
        # NB: a sample can land between the card's mount and its children's (seen under load):
        # it is drawn by on_mount then, not lost and not an error.
        if self.compact:
            for compact in self.query("#compact").results(TextLines):
                text = compact_line(g, self.size.width)
                if compact.text != text:
                    compact.text = text
            return
        for body in self.query(CardBody):
            body.show(g, self._history, self.graphs)

    def on_mount(self) -> None:
        self._redraw()


def stats_text(g: GpuSample, width: int = 52) -> Text:
    """Three lines: power and temperature, clocks and engines, transfers, for ``width`` columns."""
    power_pct = (
        100.0 * g.power_w / g.power_limit_w if g.power_w is not None and g.power_limit_w else None
    )
    t = Text()
    t.append("TEMP ", "bold").append(
        fmt.num(g.temperature_c, "C"), level_style(g.temperature_c, TEMP_LEVELS)
    )
    t.append("  POWER ", "bold").append(fmt.num(g.power_w, "W"), level_style(power_pct))
    t.append(f" / {fmt.num(g.power_limit_w, 'W')}")
    t.append("  FAN ", "bold").append(fmt.pct(g.fan_pct))
    t.append("  ").append(fmt.NA if g.pstate is None else f"P{g.pstate}", "bold")
    slow = throttle_names(g.throttle_reasons)
    if slow:  # why the GPU is slow, not only whether it is idle
        t.append("  SLOW ", "bold").append(", ".join(slow), "bold yellow")
    # Three lines that fit the narrowest full card (52 columns inside the border).
    t.append("\nSM ", "bold").append(fmt.num(g.sm_clock_mhz, " MHz"))
    t.append("  MEM ", "bold").append(fmt.num(g.mem_clock_mhz, " MHz"))
    t.append("  BW ", "bold").append(fmt.pct(g.mem_util_pct), level_style(g.mem_util_pct))
    t.append("  ENC ", "bold").append(fmt.pct(g.encoder_util_pct))
    t.append(" DEC ", "bold").append(fmt.pct(g.decoder_util_pct))
    return t.append("\n").append_text(transfer_text(g, width))


def flags_text(g: GpuSample) -> Text:
    """``HELD IDLE 12m`` and ``LOW SM ACTIVITY``, or nothing."""
    t = Text()
    if g.held_idle:
        t.append(f"HELD IDLE {fmt.span(g.held_idle_s)}", "bold red")
    if g.low_sm_activity:
        t.append(" " if t else "").append("LOW SM ACTIVITY", "bold yellow")
    return t


def activity_text(g: GpuSample, width: int) -> Text:
    """What the SMs really do (GPM) and the energy used: ``SM ACT 45%  OCC 20%  TENSOR 30%
    DRAM 35%  12.3 kJ``, after the HELD IDLE / LOW SM ACTIVITY flags; parts that do not fit
    ``width`` are left out, least telling first."""
    t = flags_text(g)
    parts: list[tuple[str, str, str | None]]
    if g.gpm is False:
        parts = [("SM ACT ", "N/A (no GPM)", None)]
    elif g.gpm is None and g.sm_active_pct is None:
        parts = []  # a source that says nothing of GPM (another host's dcgm-exporter)
    else:
        parts = [
            ("SM ACT ", fmt.pct(g.sm_active_pct), level_style(g.sm_active_pct)),
            ("OCC ", fmt.pct(g.sm_occupancy_pct), None),
            ("TENSOR ", fmt.pct(g.tensor_active_pct), None),
            ("DRAM ", fmt.pct(g.dram_active_pct), level_style(g.dram_active_pct)),
        ]
    if g.energy_since_start_j is not None:
        parts.append(("E ", fmt.energy(g.energy_since_start_j), None))
    for label, value, style in parts:
        room = len(label) + len(value) + (2 if t else 0)
        if t.cell_len + room > width:
            break
        t.append("  " if t else "").append(label, "bold").append(value, style or "")
    return t


def transfer_text(g: GpuSample, width: int) -> Text:
    """``PCIe RX 660MiB/s TX 1.5GiB/s  NVLink RX 12GiB/s TX 12GiB/s``, or with arrows for RX
    and TX where that does not fit in ``width`` (the narrowest card has 52 columns)."""
    links = [("PCIe", g.pcie_rx_bytes_per_s, g.pcie_tx_bytes_per_s)]
    if g.nvlink_rx_bytes_per_s is not None or g.nvlink_tx_bytes_per_s is not None:
        links.append(("NVLink", g.nvlink_rx_bytes_per_s, g.nvlink_tx_bytes_per_s))
    for rx, tx in (("RX ", " TX "), ("↓", " ↑")):
        t = Text()
        for name, rx_rate, tx_rate in links:
            t.append(f"{'  ' if t else ''}{name} ", "bold")
            t.append(f"{rx}{fmt.rate_short(rx_rate)}{tx}{fmt.rate_short(tx_rate)}")
        if t.cell_len <= width:
            break
    return t


def compact_line(g: GpuSample, width: int) -> Text:
    """``0 H100 80GB ▕███░░▏ 67% ▕██░░░▏ 45/80G 54C 350W SM 40% RX 1.2 GiB/s``: one line per
    GPU; HELD IDLE / LOW SM ACTIVITY take the place of the PCIe rate, and the bars give way."""
    name = (g.name or fmt.NA).replace("NVIDIA ", "")[:14]
    t = Text(f"{g.index:>2} ", "bold").append(f"{name:<14} ")
    if g.lost:
        return t.append("GPU LOST", "bold red")
    used = fmt.size(g.memory_used_bytes, 0).replace(" GiB", "")
    tail = Text(f" {used}/{fmt.size(g.memory_total_bytes, 0)} ")
    tail.append(fmt.num(g.temperature_c, "C"), level_style(g.temperature_c, TEMP_LEVELS))
    tail.append(f" {fmt.num(g.power_w, 'W')}")
    if g.sm_active_pct is not None:
        tail.append(" SM ", "bold").append(fmt.pct(g.sm_active_pct))
    flags = flags_text(g)
    if flags:
        tail.append(" ").append_text(flags)
    elif width >= 90:
        tail.append(f" RX {fmt.rate(g.pcie_rx_bytes_per_s)}")
    util = f" {fmt.pct(g.gpu_util_pct):>4} "
    bar_w = max(
        4, min(16, (width - 60) // 2, (width - t.cell_len - len(util) - tail.cell_len) // 2)
    )
    t.append(bar(g.gpu_util_pct, bar_w)).append(util).append(bar(g.memory_used_pct, bar_w))
    return t.append_text(tail)
