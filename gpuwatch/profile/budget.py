"""Budgets on the command line: ``--budget`` or pyproject.toml's ``[tool.gpuwatch.budget]``,
checked on a finished report; exit status 3 when one is broken.

``gpuwatch profile`` and ``gpuwatch report`` read ``[tool.gpuwatch.budget]``; ``gpuwatch diff``
reads ``[tool.gpuwatch.diff-budget]`` (growth from before to after). The nearest pyproject.toml
from the working directory upward is the project's; ``--budget`` replaces its table whole, and
``--no-budget`` leaves it unread.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gpuwatch.errors import CliError

if TYPE_CHECKING:  # NB: a trace's report declares --budget, and reads no report module
    from profilers.budgets import Breach, Budget
    from profilers.report import Report

#: ``--budget``'s help, for a run (``gpuwatch profile``, ``gpuwatch report``).
BUDGET_HELP = (
    "fail (exit 3) when the run goes over, naming each line: e.g. "
    "'syncs/step<=1,h2d.pageable=0' (MEASURE[/step]<=N; line: for a ceiling per line; "
    "measures: syncs[.CAUSE], copies, bytes, h2d|d2h|d2d|p2p[.bytes|.pageable|"
    ".non_blocking], comm[.bytes|.OP], kernel_ms, ops); default: [tool.gpuwatch.budget] "
    "in pyproject.toml"
)

#: The exit status of a run (or a diff) over its budget.
OVER_BUDGET = 3


def add_budget_args(p: argparse.ArgumentParser, growth: bool = False) -> None:
    section = "diff-budget" if growth else "budget"
    growth_help = (
        "fail (exit 3) when after grows past before: e.g. 'line:syncs/step<=0' (no line may "
        "add a sync per step), 'bytes/step<=0'; default: [tool.gpuwatch.diff-budget] in "
        "pyproject.toml"
    )
    p.add_argument("--budget", metavar="SPEC", help=growth_help if growth else BUDGET_HELP)
    p.add_argument(
        "--no-budget", action="store_true", help=f"ignore [tool.gpuwatch.{section}] in pyproject"
    )


def from_pyproject(section: str, start: Path | None = None) -> Budget | None:
    """``[tool.gpuwatch.<section>]`` of the project's pyproject.toml, None when it has none."""
    import tomllib

    from profilers.budgets import Budget, BudgetError

    start = start if start is not None else Path.cwd()
    found = (folder / "pyproject.toml" for folder in (start, *start.parents))
    path = next((candidate for candidate in found if candidate.is_file()), None)
    if path is None:
        return None
    try:
        data = tomllib.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CliError(f"{path} is not valid TOML ({exc}); --no-budget skips it") from None
    tool = data.get("tool")
    gpuwatch = tool.get("gpuwatch") if isinstance(tool, dict) else None
    table = gpuwatch.get(section) if isinstance(gpuwatch, dict) else None
    if table is None:
        return None
    where = f"{path} [tool.gpuwatch.{section}]"
    if not isinstance(table, dict):
        raise CliError(f'{where} must be a table of ceilings, e.g. "syncs/step" = 1')
    try:
        return Budget.from_table(table, where)
    except BudgetError as exc:
        raise CliError(str(exc)) from None


def budget_for(
    spec: str | None, no_budget: bool, growth: bool = False, ranks: int = 0
) -> Budget | None:
    """The budget this command checks: ``--budget SPEC``, else the project's (unless
    ``--no-budget``), else none. Read before any work, so that a malformed budget is one line,
    not a finished run lost. ``ranks``: ``--nproc-per-node``, which takes no ``--budget``."""
    from profilers.budgets import Budget, BudgetError

    if spec is not None:
        if ranks:
            raise CliError(
                "--budget with --nproc-per-node: check the merged report instead "
                "(gpuwatch report merged.json --budget SPEC)"
            )
        if no_budget:
            raise CliError("--budget and --no-budget: choose one")
        try:
            return Budget.parse(spec, "--budget")
        except BudgetError as exc:
            raise CliError(str(exc)) from None
    return None if no_budget else from_pyproject("diff-budget" if growth else "budget")


def enforce(
    budget: Budget | None,
    check: Callable[[Budget], list[Breach]],
    code: int,
    quiet: bool = False,
    what: str = "",
    file: TextIO | None = None,
) -> int:
    """Checks ``budget`` (if any) and says how it went on stderr; the exit status: ``code``
    when it is already a failure (the script's own), else 3 when over budget."""
    if budget is None:
        return code
    out = file if file is not None else sys.stderr
    breaches = check(budget)
    source = "" if budget.source == "--budget" else f", from {budget.source}"
    if not breaches:
        if not quiet:
            print(f"gpuwatch: within budget{what} ({budget}{source})", file=out)
        return code
    # NB: printed even with -q: in CI this is the reason the job fails.
    print(f"gpuwatch: over budget{what} ({budget}{source}):", file=out)
    for breach in breaches:
        for line in breach.text():
            print(f"  {line}", file=out)
    return code if code != 0 else OVER_BUDGET


def check_run(budget: Budget | None, report: Report | None, code: int, quiet: bool = False) -> int:
    """:func:`enforce` on a run's report (none when the run left no report)."""
    from profilers.budgets import check_report

    if report is None:
        return code
    return enforce(budget, lambda b: check_report(b, report), code, quiet)
