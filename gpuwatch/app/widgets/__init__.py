"""Widgets of the gpuwatch apps, one per module."""

from gpuwatch.app.widgets.gpu_card import GpuCard
from gpuwatch.app.widgets.gpu_cards import GpuCards
from gpuwatch.app.widgets.hot_lines import HotLinesTable
from gpuwatch.app.widgets.process_table import ProcessTable
from gpuwatch.app.widgets.progress_line import ProgressLine
from gpuwatch.app.widgets.rates import RatesPanel, RateWindow
from gpuwatch.app.widgets.status_line import StatusLine

__all__ = [
    "GpuCard",
    "GpuCards",
    "HotLinesTable",
    "ProcessTable",
    "ProgressLine",
    "RateWindow",
    "RatesPanel",
    "StatusLine",
]
