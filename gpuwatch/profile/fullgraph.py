"""torch.compile(fullgraph=True) refused under a dispatch mode: one line, true of the options
the run has, in place of dynamo's traceback (which lists every frame it skipped, none of which
the user can act on)."""

from __future__ import annotations

import os
import runpy
import sys
import traceback

_FULLGRAPH_REFUSED = "torch dispatch mode present"
"""In the error torch.compile(fullgraph=True) raises when a dispatch mode is active."""
_FULLGRAPH_SKIPPED = "fullgraph=True found no compiled frames"
"""In its error (torch 2.13 on) when the frame was skipped before: a call after the first
refusal. NB: dynamo raises it for other skips too: ours only while a mode of ours is on."""


def fullgraph_refused(exc: BaseException) -> str | None:
    """One line for torch.compile(fullgraph=True) refused under a dispatch mode, at the
    script's line that called the compiled function; None for any other error."""
    text, why = str(exc), _why_eager()
    if _FULLGRAPH_REFUSED not in text and (why is None or _FULLGRAPH_SKIPPED not in text):
        return None
    where = ""
    stdlib_parent = os.path.dirname(os.path.dirname(runpy.__file__))
    for frame, line in traceback.walk_tb(exc.__traceback__):
        name = frame.f_code.co_filename
        if "site-packages" not in name and not name.startswith((stdlib_parent, _PACKAGE)):
            where = f"{os.path.relpath(name) if name.startswith(os.getcwd()) else name}:{line}: "
    why = why or _KERNEL_TIMING
    return f"gpuwatch: {where}torch.compile(fullgraph=True) cannot run {why}"


_KERNEL_TIMING = (
    "under the profiler's dispatch mode (kernel timing); the same script runs unmodified "
    "with --no-kernel-timing (copies, syncs and collectives counted, compiled code run "
    "compiled), or profile it with fullgraph=False"
)


def _why_eager() -> str | None:
    """Which dispatch mode kept dynamo from tracing, and what would let it (the mode on is
    read from the running profile: the advice must be true of the options this run had);
    None where no mode of ours is on (the fast path of --no-kernel-timing)."""
    fake = sys.modules.get("profilers.fake_cuda.harness")
    if fake is not None and getattr(fake, "HARNESS", None) is not None:
        return (
            "under --fake-cuda, whose simulated GPU is a dispatch mode (dynamo traces no frame "
            "under one, with or without --no-kernel-timing); profile it with fullgraph=False "
            "(its code then runs eager, counted), or on a GPU with --no-kernel-timing"
        )
    registry = sys.modules.get("profilers.registry")
    recorder = getattr(registry, "ACTIVE", None)
    if recorder is None or recorder.kernel_timing:
        return _KERNEL_TIMING
    if recorder.counting != "every_op":
        return None
    return (
        "under the profiler's dispatch mode, which --no-kernel-timing leaves on here "
        "(--count-ops, --memory and --trace-syncs need it, as does a torch without the "
        "fast path's hooks); without those it runs compiled, or profile it with "
        "fullgraph=False"
    )


#: gpuwatch's own package (this module is in gpuwatch/profile/).
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
