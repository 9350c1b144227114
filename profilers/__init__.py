"""The dispatch-mode profiler of device copies, synchronisations and kernel time.

    import profilers
    with profilers.profile() as prof:
        train()
    report = prof.report()          # report.to_dict() is the gpuwatch.profile/1 document

    with profilers.no_syncs():      # or profilers.budget(syncs=0, h2d=0): BudgetExceeded
        train_step()                # names each line over it (this thread and what it starts)

A library: it imports torch (only once profiling is asked for: the report data does not need it),
prints nothing, and knows nothing of gpuwatch's UI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from profilers.budgets import Budget, BudgetError
from profilers.errors import (
    FakeCudaUnavailable,
    InputNotFound,
    MeasuredNotPredicted,
    MissingTorchApi,
    NotSimulated,
    ProfilerError,
    ProfilerWarning,
    ProfileStateError,
    SlowerCounting,
)
from profilers.names import CAUSES, DIRECTIONS
from profilers.options import FakeCudaRun, Options, RunOptions
from profilers.records import Line, OpTotal, Totals
from profilers.report import SCHEMA, Report, ReportFormatError
from profilers.stats import CommOp, Copies, Counters, LineStats, OpCount, Syncs

if TYPE_CHECKING:
    from profilers.counting.ops import Transfer, classify, direction
    from profilers.guard import BudgetExceeded, Guard, budget, no_syncs
    from profilers.session import Profile, profile, step
    from profilers.timing.inputs import mark_input as input  # noqa: F401 (lazy: _LAZY)

#: What needs torch, imported on first use: reading and rendering a saved report never does.
_LAZY = {
    "BudgetExceeded": "profilers.guard",
    "Guard": "profilers.guard",
    "budget": "profilers.guard",
    "no_syncs": "profilers.guard",
    "Transfer": "profilers.counting.ops",
    "classify": "profilers.counting.ops",
    "direction": "profilers.counting.ops",
    "Profile": "profilers.session",
    "profile": "profilers.session",
    "step": "profilers.session",
    "input": "profilers.timing.inputs",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'profilers' has no attribute {name!r}")
    import importlib

    # NB: profilers.input is timing.inputs.mark_input (``input`` would shadow the builtin there)
    value = getattr(importlib.import_module(module), "mark_input" if name == "input" else name)
    globals()[name] = value
    return value


__all__ = [
    "CAUSES",
    "DIRECTIONS",
    "SCHEMA",
    "Budget",
    "BudgetError",
    "BudgetExceeded",
    "CommOp",
    "Copies",
    "Counters",
    "FakeCudaRun",
    "FakeCudaUnavailable",
    "InputNotFound",
    "MissingTorchApi",
    "MeasuredNotPredicted",
    "NotSimulated",
    "OpCount",
    "OpTotal",
    "ProfileStateError",
    "ProfilerError",
    "ProfilerWarning",
    "RunOptions",
    "SlowerCounting",
    "Guard",
    "Options",
    "Profile",
    "Report",
    "ReportFormatError",
    "Line",
    "LineStats",
    "Syncs",
    "Totals",
    "Transfer",
    "classify",
    "budget",
    "direction",
    "no_syncs",
    "profile",
    "step",
    # NB: not "input": a star import would hide the builtin; profilers.input is spelled whole.
]
