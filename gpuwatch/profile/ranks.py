"""``gpuwatch profile --nproc-per-node N``: the ranks run under ``torch.distributed.run
--standalone``, each profiled by ``gpuwatch profile`` into its own JSON, then merged into one
report and one summary.

A signal to gpuwatch (a scheduler's time limit) goes through the launcher to the ranks, which
write their partial reports within ``RANK_GRACE_S`` (``GPUWATCH_RANK_GRACE_S``); a rank still
running then (hung in a collective) is killed, its last checkpoint standing in. gpuwatch merges
what was written and exits with 128 + the signal, leaving no process or temporary folder behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwatch.errors import CliError
from gpuwatch.profile.interrupts import Signals
from gpuwatch.profile.options import ProfileOptions

if TYPE_CHECKING:
    import psutil

    from gpuwatch.output.write import Output
    from gpuwatch.profile.runner import Target

#: Seconds the ranks get to write their reports after gpuwatch is told to stop (schedulers send
#: SIGKILL some 30 s after SIGTERM: SLURM's KillWait, Kubernetes' grace period).
RANK_GRACE_S = 10.0
#: Seconds the launcher gets to clean up after its ranks were killed.
LAUNCHER_GRACE_S = 2.0


def distributed_rank() -> tuple[int, int] | None:
    """``(rank, world_size)`` from the launcher's environment (torchrun, torch.distributed.run,
    SLURM through torchrun), or None when this process is not one rank of several."""
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None
    return (rank, world) if world >= 1 and 0 <= rank < world else None


def _run_id() -> str:
    """The same in every rank of one launch on one node, new with each: torchrun's run id and
    its folder for this attempt (``.../attempt_N/RANK/error.json``)."""
    keys = ("TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT")
    key = [os.environ.get(k, "") for k in keys]
    key[0] = os.path.dirname(os.path.dirname(key[0]))
    return hashlib.sha1("|".join(key).encode()).hexdigest()[:8]


def run_folder(rank: int) -> str | None:
    """``gpuwatch-torchrun-ID``, made here: each rank's report when none was asked for. One
    holding this rank's report (an earlier run's) is passed over, never written into; None
    where none can be made."""
    base = folder = f"gpuwatch-torchrun-{_run_id()}"
    n = 1
    while os.path.lexists(os.path.join(folder, f"rank{rank}.json")) or os.path.isfile(folder):
        n += 1
        folder = f"{base}-{n}"
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return folder


def summary_of_all(ranks: list[Output], rank: int, options: ProfileOptions) -> None:
    """Called by each rank once its report is written: the last prints the summary of all
    (``ranks``: their JSON). Each appends its rank to one file (an append is atomic on a local
    disk) and reads it back: the line that completed the world is the last rank's."""
    from gpuwatch.output.deliver import deliver
    from gpuwatch.output.load import load_report
    from profilers.merge import MergeError, merge_ranks

    path = os.path.join(tempfile.gettempdir(), f"gpuwatch-torchrun-{_run_id()}.done")
    try:
        with open(path, "a+", encoding="utf-8") as f:
            f.write(f"{rank}\n")
            f.flush()
            f.seek(0)
            done = f.read().split()
        if len(set(done)) < len(ranks) or done[-1] != str(rank):
            return
        os.unlink(path)
        merged = merge_ranks([load_report(o.where) for o in ranks])
        deliver(merged, [], top=options.top, quiet=False, what_if=options.what_if)
        paths = ", ".join(o.path for o in ranks[:4]) + (", ..." if len(ranks) > 4 else "")
        print(f"gpuwatch: each rank's report: {paths}", file=sys.stderr)
    except (CliError, MergeError, OSError) as exc:
        print(f"gpuwatch: no summary of all ranks: {exc}", file=sys.stderr)


def rank_options(options: ProfileOptions, json_pattern: str) -> ProfileOptions:
    """The user's options for one rank: quiet, one JSON at ``json_pattern`` (``{rank}``: the
    rank), no launch, no screen, no ``--budget`` (refused with ranks: check the merged report;
    the project's budget is read by each rank, as a plain run would, unless ``--no-budget``)."""
    return options.replace(
        quiet=True,
        json_path=json_pattern,
        html_path=None,
        trace_path=None,
        output_paths=(),
        nproc_per_node=0,
        live=False,
        demo=False,
        budget=None,
    )


def rank_command(options: ProfileOptions, target: Target, json_pattern: str) -> list[str]:
    """What each rank runs: ``gpuwatch profile`` with :func:`rank_options`, then the target."""
    argv = rank_options(options, json_pattern).to_argv()
    return ["-m", "gpuwatch", "profile", *argv, *target.command]


def run_ranks(options: ProfileOptions, target: Target, wanted: list[Output]) -> int:
    from gpuwatch.output.deliver import deliver
    from gpuwatch.output.load import load_report
    from profilers.merge import merge_ranks

    if options.live:
        raise CliError("--nproc-per-node does not go with --live (one screen per rank)")
    n = options.nproc_per_node
    # NB: from here to the end, signals are noted, never raised: the merge must still happen
    # and the temporary folder go, however many times the scheduler asks.
    signals = Signals().deferring()
    tmp = Path(tempfile.mkdtemp(prefix="gpuwatch-ranks-"))
    try:
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(n),
            *rank_command(options, target, str(tmp / "rank{rank}.json")),
        ]
        code = _launch(launcher, signals)
        found = [tmp / f"rank{k}.json" for k in range(n) if (tmp / f"rank{k}.json").exists()]
        if not found:
            raise CliError(
                f"no rank left a report (torch.distributed.run exited with {code}); "
                "see the ranks' output above"
            )
        merged = merge_ranks([load_report(str(p)) for p in found])
        missing = [k for k in range(n) if k not in (merged.ranks or [])] or None
        merged = merged.replace(world_size=n, missing_ranks=missing)
        failed = deliver(merged, wanted, top=options.top, quiet=options.quiet)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        signals.restore()
    code = code if code >= 0 else 128 - code  # a signal the launcher died of
    if signals.received:
        return 128 + signals.received[0]  # gpuwatch was stopped: say so, as a shell expects
    return 2 if failed and code == 0 else code


def _launch(launcher: list[str], signals: Signals) -> int:
    """Runs the launcher until it and every rank ended; its return code. A signal gpuwatch gets
    is passed on to it (and so to every rank); after the grace period, what still runs of its
    process tree is killed. NB: the ranks run in sessions of their own: only their parent's tree
    finds them, so the tree is followed from the first signal on, while the launcher lives."""
    import psutil

    try:
        grace_s = max(0.0, float(os.environ.get("GPUWATCH_RANK_GRACE_S", RANK_GRACE_S)))
    except ValueError:
        grace_s = RANK_GRACE_S

    tree: dict[int, psutil.Process] = {}
    proc = subprocess.Popen(launcher)
    deadline: float | None = None
    forwarded = 0
    killed_ranks = False
    try:
        while True:
            if signals.received:
                try:  # a rank orphaned by the launcher's death stays in the tree
                    for child in psutil.Process(proc.pid).children(recursive=True):
                        tree.setdefault(child.pid, child)
                except psutil.Error:
                    pass  # the launcher has just exited
            code = proc.poll()
            if code is not None and not _alive(tree):
                return code
            if forwarded < len(signals.received):
                for signum in signals.received[forwarded:]:
                    if proc.poll() is None:
                        proc.send_signal(signum)
                forwarded = len(signals.received)
                deadline = deadline or time.monotonic() + grace_s
            if deadline is not None and time.monotonic() >= deadline:
                if not killed_ranks:
                    # The ranks first: the launcher, seeing them gone, cleans up after itself.
                    _kill(None, tree)
                    killed_ranks = True
                    deadline += LAUNCHER_GRACE_S
                else:
                    _kill(proc, tree)
            try:
                proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass  # still running: look at the signals and the deadline again
    finally:
        if proc.poll() is None or _alive(tree):  # an error here: leave nothing running
            _kill(proc, tree)


def _alive(tree: dict[int, psutil.Process]) -> bool:
    import psutil

    for pid, p in list(tree.items()):
        try:
            # NB: psutil checks the start time: a pid reused by another process is not ours.
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            pass
        del tree[pid]
    return bool(tree)


def _kill(proc: subprocess.Popen[bytes] | None, tree: dict[int, psutil.Process]) -> None:
    """SIGKILL for every process the launcher started and (unless None) the launcher."""
    import psutil

    if proc is not None and proc.poll() is None:
        proc.kill()
    for p in tree.values():
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass  # already gone
    if proc is not None:
        proc.wait()
    psutil.wait_procs(list(tree.values()), timeout=5)
    _alive(tree)
