"""A run's ranks read side by side: each trace file read and analysed on its own (in this
process, in a pool of processes, or on the workers of a Dask cluster), then put in rank order
with the folder's notes (:func:`profilers.kineto.read.in_rank_order`).

NB: a worker sends back the rank's analysis (:class:`RankResult`, a few hundred KB pickled at
most), never its events: the bulk of the work and of the memory stays where the file is read.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from gpuwatch.errors import CliError
from profilers.kineto.analyse import analyse_rank  # noqa: TID251 - the reader: a rank is analysed where read
from profilers.kineto.read import TraceError, in_rank_order, read_trace, trace_files
from profilers.kineto.result import RankResult, TraceAnalysis

if TYPE_CHECKING:  # NB: a pool's modules (multiprocessing) loaded only for a pool
    from concurrent.futures import Executor

#: Below this many bytes of trace files in all, the default (no ``--jobs``) reads in this process:
#: about a second's read, which a pool's start and the results' pickling would not win back.
POOL_BYTES = 1 << 20
SHOW_AFTER_S = 1.0

Outcome = RankResult | TraceError


def read_rank(path: str) -> Outcome:
    """One file read and analysed, where this runs; its :class:`TraceError` returned (it pickles
    back to the caller as it is), not raised."""
    trace = read_trace(path)
    return trace if isinstance(trace, TraceError) else analyse_rank(trace)


def read_on_worker(path: str, here: str) -> Outcome:
    """:func:`read_rank` on a Dask worker, which needs the file at the same path; ``path`` is
    taken from ``here`` (our working folder, not the worker's) and named as given."""
    full = os.path.join(here, path)
    if not os.path.exists(full):
        import socket

        return TraceError(
            f"{path} is not on the Dask worker {socket.gethostname()}: the workers read the "
            f"traces at the path given here ({full}: a filesystem they share with this machine)"
        )
    got = read_rank(full)
    if isinstance(got, RankResult):
        return dataclasses.replace(got, path=path)
    return type(got)(str(got).replace(full, path))


class _Bar:
    """A rich progress bar on stderr, shown only once the reads have taken a second."""

    def __init__(self, total: int, show: bool, stack: ExitStack) -> None:
        self.total, self.show, self.stack, self.start = total, show, stack, time.monotonic()
        self.bar: Any = None

    def tick(self, done: int) -> None:
        late = time.monotonic() - self.start > SHOW_AFTER_S
        if self.bar is None and self.show and done < self.total and late:
            from rich.console import Console
            from rich.progress import Progress

            self.bar = self.stack.enter_context(
                Progress(console=Console(stderr=True), transient=True)
            )
            self.bar.add_task("ranks read", total=self.total)
        if self.bar is not None:
            self.bar.update(0, completed=done)


def read_ranks(
    paths: Sequence[str], jobs: int | None = None, scheduler: str | None = None, show: bool = False
) -> TraceAnalysis:
    """The analysis of the traces at ``paths`` (files, or folders of one per rank), each file
    read on its own: ``jobs`` processes (default one per core, 1: in this process) or the Dask
    cluster at ``scheduler``; a rich bar on stderr when ``show`` and the reads take a second."""
    listed = [trace_files(p) for p in paths]
    files = [f for names in listed for f in names]
    got: dict[str, Outcome] = {}
    with ExitStack() as stack:
        bar = _Bar(len(files), show, stack)
        workers = min(len(files), jobs or os.cpu_count() or 1)
        if scheduler is None and (
            workers < 2 or (jobs is None and sum(map(os.path.getsize, files)) < POOL_BYTES)
        ):
            for path in files:
                got[path] = read_rank(path)
                bar.tick(len(got))
        elif scheduler is not None:
            try:
                from distributed import Client
            except ImportError:
                raise CliError(
                    "--scheduler needs Dask's distributed: pip install 'gpuwatch[dask]'"
                ) from None
            try:  # NB: waits distributed.comm.timeouts.connect (30 s unless configured)
                client = Client(scheduler, set_as_default=False)  # type: ignore[no-untyped-call,unused-ignore]
            except (OSError, ValueError) as exc:
                raise CliError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
            stack.callback(client.close)
            dask: Executor = client.get_executor()  # type: ignore[no-untyped-call,unused-ignore]
            futures = {p: dask.submit(read_on_worker, p, os.getcwd()) for p in files}
        else:
            from concurrent.futures import ProcessPoolExecutor

            pool = ProcessPoolExecutor(workers)
            stack.callback(pool.shutdown, cancel_futures=True)  # NB: Ctrl-C reads no more ranks
            futures = {p: pool.submit(read_rank, p) for p in files}
        if not got:
            from concurrent.futures import FIRST_COMPLETED, wait

            pending = set(futures.values())
            while pending:
                _, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                bar.tick(len(files) - len(pending))
            got = {p: f.result() for p, f in futures.items()}
    return TraceAnalysis(tuple(paths), tuple(in_rank_order(paths, listed, got.__getitem__)))
