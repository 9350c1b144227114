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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profilers.budgets import Budget as Budget
    from profilers.budgets import BudgetError as BudgetError
    from profilers.counting.ops import Transfer as Transfer
    from profilers.counting.ops import classify as classify
    from profilers.counting.ops import direction as direction
    from profilers.errors import FakeCudaUnavailable as FakeCudaUnavailable
    from profilers.errors import InputNotFound as InputNotFound
    from profilers.errors import MeasuredNotPredicted as MeasuredNotPredicted
    from profilers.errors import MissingTorchApi as MissingTorchApi
    from profilers.errors import NotSimulated as NotSimulated
    from profilers.errors import ProfilerError as ProfilerError
    from profilers.errors import ProfilerWarning as ProfilerWarning
    from profilers.errors import ProfileStateError as ProfileStateError
    from profilers.errors import SlowerCounting as SlowerCounting
    from profilers.guard import BudgetExceeded as BudgetExceeded
    from profilers.guard import Guard as Guard
    from profilers.guard import budget as budget
    from profilers.guard import no_syncs as no_syncs
    from profilers.names import CAUSES as CAUSES
    from profilers.names import DIRECTIONS as DIRECTIONS
    from profilers.options import FakeCudaRun as FakeCudaRun
    from profilers.options import Options as Options
    from profilers.options import RunOptions as RunOptions
    from profilers.records import Line as Line
    from profilers.records import OpTotal as OpTotal
    from profilers.records import Totals as Totals
    from profilers.report import SCHEMA as SCHEMA
    from profilers.report import Report as Report
    from profilers.report import ReportFormatError as ReportFormatError
    from profilers.session import Profile as Profile
    from profilers.session import profile as profile
    from profilers.session import step as step
    from profilers.stats import CommOp as CommOp
    from profilers.stats import Copies as Copies
    from profilers.stats import Counters as Counters
    from profilers.stats import LineStats as LineStats
    from profilers.stats import OpCount as OpCount
    from profilers.stats import Syncs as Syncs
    from profilers.timing.inputs import mark_input as input  # noqa: F401 lazy: _LAZY

#: Every name's module, imported on first use: reading and rendering a saved report never needs
#: torch, and reading a torch.profiler trace (``profilers.kineto``) none of the report's modules.
_LAZY = {
    name: f"profilers.{module}"
    for module, names in {
        "budgets": "Budget BudgetError",
        "counting.ops": "Transfer classify direction",
        "errors": "FakeCudaUnavailable InputNotFound MeasuredNotPredicted MissingTorchApi "
        "NotSimulated ProfilerError ProfilerWarning ProfileStateError SlowerCounting",
        "guard": "BudgetExceeded Guard budget no_syncs",
        "names": "CAUSES DIRECTIONS",
        "options": "FakeCudaRun Options RunOptions",
        "records": "Line OpTotal Totals",
        "report": "SCHEMA Report ReportFormatError",
        "session": "Profile profile step",
        "stats": "CommOp Copies Counters LineStats OpCount Syncs",
        "timing.inputs": "input",
    }.items()
    for name in names.split()
}


def __getattr__(name: str) -> Any:
    if (module := _LAZY.get(name)) is None:
        raise AttributeError(f"module 'profilers' has no attribute {name!r}")
    # NB: profilers.input is timing.inputs.mark_input (``input`` would shadow the builtin there)
    value = getattr(importlib.import_module(module), "mark_input" if name == "input" else name)
    globals()[name] = value
    return value


#: What ``from profilers import *`` gives. NB: not "input": it would hide the builtin there;
#: profilers.input is spelled whole.
__all__ = [name for name in _LAZY if name != "input"]
