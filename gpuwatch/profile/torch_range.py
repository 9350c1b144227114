"""The torch releases gpuwatch is tested on, and the one line it says where that matters.

``pyproject.toml`` declares the range's lower end only (``torch>=2.9``), so that installing
gpuwatch never changes the torch a user has: the profiler leans on private torch hooks
(``profilers/torch_private.py``, feature-detected) and ``--fake-cuda`` on a C++ guard built
against the installed torch's headers. CI runs the profiler's tests on the oldest release, the lent
GPU machine's (2.11) and the newest (``.ci/torch_matrix.sh``), and the whole suite on 2.13.

On a release outside the range gpuwatch still runs and says so in one line, with what it loses
there (the private hooks that do not resolve); ``GPUWATCH_NO_TORCH_WARNING=1`` hides that line.
"""

from __future__ import annotations

import os

#: torch's (major, minor) releases gpuwatch is tested on, oldest first: every minor release in
#: between was run through the profiler's tests (README.md, "Supported torch").
TESTED = ((2, 9), (2, 10), (2, 11), (2, 12), (2, 13), (2, 14), (2, 15))

#: Hooks only a CUDA build of torch has: their absence on a CPU build loses nothing.
CUDA_BUILD_ONLY = frozenset({"torch._C._cuda_getCurrentStream"})

#: The environment variable that hides the line (any value but "" or "0").
QUIET_VARIABLE = "GPUWATCH_NO_TORCH_WARNING"


def tested_text() -> str:
    """``2.9-2.15``: the tested range as the line says it."""
    (o_major, o_minor), (n_major, n_minor) = TESTED[0], TESTED[-1]
    return f"{o_major}.{o_minor}-{n_major}.{n_minor}"


def release(version: str) -> tuple[int, int] | None:
    """``(2, 13)`` of ``"2.13.0+cpu"`` (and of ``"2.16.0a0+git1234"``); None for a version string
    that is not numbered so."""
    parts = version.split("+", 1)[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def untested_line(version: str, missing: list[str], lost: dict[str, str]) -> str | None:
    """The line for torch ``version`` given the private hooks ``missing`` on it (None where
    there is nothing to say: a tested release that lost nothing)."""
    rel = release(version)
    losses = "; ".join(sorted({lost.get(name, name) for name in missing})) or None
    hide = f"({QUIET_VARIABLE}=1 hides this line)"
    if rel in TESTED:
        if losses is None:
            return None
        return f"gpuwatch: warning: on torch {version} gpuwatch loses: {losses} {hide}"
    if rel is None:
        where = f"torch {version} is not a numbered release"
    elif rel > TESTED[-1]:
        where = f"torch {version} is newer than gpuwatch is tested on"
    else:
        where = f"torch {version} is older than gpuwatch is tested on"
    what = (
        f"lost on it: {losses}"
        if losses
        else "every private hook it uses resolves, but its counts are not checked there"
    )
    return f"gpuwatch: warning: {where} (torch {tested_text()}); {what} {hide}"


def check_installed() -> str | None:
    """:func:`untested_line` for the torch installed here (imports torch), or None when the
    user hid it.

    NB: on a tested release only the hooks resolved at import are looked at (the matrix checks
    that the rest resolve there); on any other release every hook is resolved now, the fake
    GPU's included, so that the line names everything that is lost."""
    if os.environ.get(QUIET_VARIABLE, "") not in ("", "0"):
        return None
    import torch

    from profilers import torch_private as private

    version = str(torch.__version__)
    missing = list(private.MISSING) if release(version) in TESTED else sorted(private.unresolved())
    missing = [m for m in missing if m not in private.STANDS_IN]
    if not torch.backends.cuda.is_built():  # type: ignore[no-untyped-call]  # a CPU build has no CUDA hooks to lose
        missing = [m for m in missing if m not in CUDA_BUILD_ONLY]
    return untested_line(version, missing, private.WHAT_EACH_GIVES)


def cannot_load(exc: BaseException) -> str:
    """The one line for a profiler that cannot be imported: no torch at all, or a torch (newer
    than tested, say) that moved a name the profiler imports."""
    try:
        import torch
    except ImportError:
        return "gpuwatch profile needs PyTorch, which is not installed here (pip install torch)"
    return (
        f"the profiler cannot load on torch {torch.__version__} (gpuwatch is tested on torch "
        f"{tested_text()}): {type(exc).__name__}: {exc}"
    )
