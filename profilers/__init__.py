"""The dispatch-mode profiler of device copies, synchronisations and kernel time.

    import profilers
    with profilers.profile() as prof:
        train()
    report = prof.report()          # report.to_dict() is the gpuwatch.profile/1 document

A library: it imports torch, prints nothing, and knows nothing of gpuwatch's UI.
"""

from profilers._ops import CAUSES, DIRECTIONS, Transfer, classify, direction
from profilers._profile import Options, Profile, profile
from profilers._stats import Copies, Counters, SiteStats, Syncs
from profilers.report import SCHEMA, Report, ReportFormatError

__all__ = [
    "CAUSES",
    "DIRECTIONS",
    "SCHEMA",
    "Copies",
    "Counters",
    "Options",
    "Profile",
    "Report",
    "ReportFormatError",
    "SiteStats",
    "Syncs",
    "Transfer",
    "classify",
    "direction",
    "profile",
]
