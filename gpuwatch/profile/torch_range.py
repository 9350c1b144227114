"""The torch versions gpuwatch is tested on, and the one line it says on any other.

``pyproject.toml`` declares the same range (``torch>=2.13,<2.14``): the profiler leans on private
torch hooks (``profilers/torch_private.py``) and ``--fake-cuda`` on a C++ guard built against
torch's headers, and only 2.13 is run by the suite. Outside the range gpuwatch still runs (pip
can be told to ignore the pin); what it loses there is what did not resolve.
"""

from __future__ import annotations

#: torch's (major, minor) releases the test suite runs on; the oldest is the range's lower end.
TESTED = ((2, 13),)

#: Hooks only a CUDA build of torch has: their absence on a CPU build loses nothing.
CUDA_BUILD_ONLY = frozenset({"torch._C._cuda_getCurrentStream"})


def tested_text() -> str:
    return ", ".join(f"{major}.{minor}" for major, minor in TESTED)


def release(version: str) -> tuple[int, int] | None:
    """``(2, 13)`` of ``"2.13.0+cpu"``; None for a version string that is not numbered so."""
    parts = version.split("+", 1)[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def untested_line(version: str, missing: list[str], lost: dict[str, str]) -> str | None:
    """The warning for a torch outside :data:`TESTED` (None inside it): which version, and what
    is lost on it (the private hooks that did not resolve), in one line."""
    if release(version) in TESTED:
        return None
    losses = sorted({lost.get(name, name) for name in missing})
    what = (
        f"lost on it: {'; '.join(losses)}"
        if losses
        else "every private hook it uses resolves, but counts are not checked on it"
    )
    return f"gpuwatch: warning: torch {version} is untested (gpuwatch is tested on torch {tested_text()}.x); {what}"


def check_installed() -> str | None:
    """:func:`untested_line` for the torch installed here (imports torch)."""
    import torch

    from profilers import torch_private as private

    missing = list(private.MISSING)
    if not torch.backends.cuda.is_built():  # type: ignore[no-untyped-call]  # a CPU build has no CUDA hooks to lose
        missing = [m for m in missing if m not in CUDA_BUILD_ONLY]
    return untested_line(str(torch.__version__), missing, private.WHAT_EACH_GIVES)
