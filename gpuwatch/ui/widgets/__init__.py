"""Widgets of the gpuwatch apps, one per module, each imported on first use: the live view's
read the profiler's names, which ``gpuwatch top`` must not load (tests/test_layers.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuwatch.ui.widgets.gpu_card import GpuCard as GpuCard
    from gpuwatch.ui.widgets.gpu_cards import GpuCards as GpuCards
    from gpuwatch.ui.widgets.hot_lines import HotLinesTable as HotLinesTable
    from gpuwatch.ui.widgets.process_table import ProcessTable as ProcessTable
    from gpuwatch.ui.widgets.progress_line import ProgressLine as ProgressLine
    from gpuwatch.ui.widgets.rates import RatesPanel as RatesPanel
    from gpuwatch.ui.widgets.rates import RateWindow as RateWindow
    from gpuwatch.ui.widgets.status_line import StatusLine as StatusLine

_MODULES = {
    "GpuCard": "gpu_card",
    "GpuCards": "gpu_cards",
    "HotLinesTable": "hot_lines",
    "ProcessTable": "process_table",
    "ProgressLine": "progress_line",
    "RateWindow": "rates",
    "RatesPanel": "rates",
    "StatusLine": "status_line",
}


def __getattr__(name: str) -> object:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
