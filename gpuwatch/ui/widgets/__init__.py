"""Widgets of the gpuwatch apps, one per module.

The live profile's widgets (copy rates, the status line) read the profiler's names and the
report's time view; ``gpuwatch top`` must load neither, so each name here is imported from its
module on first use, not when this package is (tests/test_layers.py checks in a fresh
interpreter that importing the top app loads nothing of the profile half).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
