"""What a replay of a step (:mod:`profilers.timing.replay`) needs, recorded while the run goes:
per op that runs on a GPU, the host time before it was queued, the profiler's share, its stream,
its GPU time, what it copied and whether the host waited; per wait outside an op, its length.

Where the figures come from:

* host time: the hot path's clock readings (``t_in``, ``t_call``, ``t_ret``), the same the step
  clock (:mod:`profilers.timing.timeline`) charges to lines; the profiler's own part (its hot
  path, and the calibrated cost outside it) is kept apart as ``overhead_ns``. Ops that run on no
  GPU make no record: their time is host time before the next one.
* GPU time: on a GPU, the CUDA events the run records anyway (the timer credits each op's
  record when its events complete: :mod:`profilers.timing.cuda_events`); under ``--fake-cuda
  --gpu NAME``, the model (:mod:`profilers.timing.gpu_model`): a kernel's roofline on the fake
  tensors, handed over by the fake GPU's mode (:meth:`OpLog.fake_op`), a copy's bus time.
* NB: under ``--fake-cuda`` an op's own run is the simulation's work, not a GPU launch: it is
  replaced by :data:`~profilers.timing.gpu_model.rates.HOST_LAUNCH_NS`, and the simulation's
  time outside the recorded ops (views, the harness's own ops) is taken out of the host time.

Bounded: at most :data:`MAX_OPS` records per step (the rest counted in ``dropped``) and the
newest :data:`KEEP_STEPS` steps. The hot path calls :meth:`OpLog.op` from any thread (autograd's
device threads run the backward's ops while the profile's thread waits in ``.backward()``);
one host clock is shared, so a script that runs ops on several threads at once gets an
approximate host timeline (each list operation is atomic; nothing here can fail the op).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns as _ns
from time import thread_time_ns
from typing import Any

from profilers.timing.fake_time import GPU_OP
from profilers.timing.gpu_model.rates import HOST_LAUNCH_NS, MIN_KERNEL_NS, copy_ns
from profilers.timing.gpu_model.specs import GpuSpec
from profilers.timing.idle import END_OF_STEP
from profilers.timing.off_cpu import OffCpu
from profilers.timing.replay_ops import DEVICE, HOST, KERNEL, ReplayOp
from profilers.timing.timeline import COMM, INPUT, SYNC, line_key

MAX_OPS = 20_000
"""Records kept per step (the first ones; a step over it is replayed as far as recorded)."""

KEEP_STEPS = 10
"""Closed steps whose records are kept (the newest). NB: ten, so that a prediction's host
range is the 10th-90th percentile of as many steps (profilers/timing/uncertainty.py), not the
extremes of a few: at 20,000 records a step at most, a bounded few MB."""

_COPY_WAYS = frozenset(("h2d", "d2h", "d2d", "p2p"))

# The fields of one record (a list: the CUDA timer writes GPU_NS in place when the events are
# read back). Lists, not ReplayOps, on the hot path: the line's name is made once per step.
SITE, KIND, HOST_NS, OVERHEAD_NS, STREAM, GPU_NS, NBYTES, PINNED, NON_BLOCKING = range(9)
SYNC_CAUSE, DTYPE, WAIT_NS = 9, 10, 11


@dataclass(slots=True, eq=False)
class LoggedStep:
    """One closed step's records: its number, the records, and how many were dropped."""

    step: int
    records: list[list[Any]]
    dropped: int

    def ops(self) -> list[ReplayOp]:
        """The step as :class:`ReplayOp` s (GPU times as credited so far)."""
        return [
            ReplayOp(
                r[KIND],
                r[SITE] if isinstance(r[SITE], str) else line_key(r[SITE]),
                r[HOST_NS],
                stream=r[STREAM],
                gpu_ns=r[GPU_NS],
                nbytes=r[NBYTES],
                pinned=r[PINNED],
                non_blocking=r[NON_BLOCKING],
                sync=r[SYNC_CAUSE],
                wait_ns=r[WAIT_NS],
                overhead_ns=r[OVERHEAD_NS],
                dtype=r[DTYPE],
            )
            for r in self.records
        ]


class OpLog:
    """The replay's records of the run's steps.

    Args:
        outside_ns: the profiler's calibrated cost per op outside its hot path.
        gpu: the GPU the model predicts for (``--fake-cuda --gpu NAME``); None on a real GPU,
            where the CUDA events give the GPU times.
    """

    def __init__(self, outside_ns: int = 0, gpu: GpuSpec | None = None) -> None:
        self.outside_ns = self.outside_backward_ns = outside_ns
        self.in_backward: Callable[[], bool] = lambda: False
        """Whether a backward is under way (its ops cost ``outside_backward_ns`` outside)."""
        self.gpu = gpu
        self.records: list[list[Any]] = []
        self.dropped = 0
        self.steps: deque[LoggedStep] = deque(maxlen=KEEP_STEPS)
        self.last_ns = _ns()
        """The host time accounted up to (when the last record was queued, or its wait ended)."""
        self.carry_ns = 0
        """The profiler's own time since ``last_ns`` (the next record's overhead)."""
        self.clock: Any = None
        """The step clock (:class:`~profilers.timing.timeline.StepClock`) of the profile's
        thread, ``clock_thread``: the profiler's own time there, under --fake-cuda."""
        self.clock_thread = 0
        self.entry_ns = [0, 0, 0, 0]
        """The fake GPU's cost per op outside what :func:`note_harness` sees (calibrated: the
        dispatcher's way into its mode and back, the result wrapped), by kind of op (:data:`GPU_OP`, or'ed with :data:`SCALAR`; calibrated):
        an op with no GPU tensor enters the fake GPU's mode all the same (the script's host
        ops, the optimizer's profiler ranges...), and a Python number given for a tensor
        (``y * 1.5``) is made a tensor again on each way through a mode."""
        self.harness: Any = None
        """The fake GPU's harness (its memory's peak, for the report), under --fake-cuda."""
        self._fake = threading.local()
        self._streams: dict[Any, int] = {}
        self._off = OffCpu()  # the profile's thread's time off the CPU (a sleep, a read)
        self.sim_off_ns = 0
        """The fake GPU's time off the CPU in its mode, on every thread (not the script's)."""

    def op(
        self,
        line: Any,
        func: Any,
        t_in: int,
        t_call: int,
        t_ret: int,
        found: Any,
        timed: Any,
    ) -> None:
        """An op the dispatch mode ran at ``line`` (entered at ``t_in``, run from ``t_call`` to
        ``t_ret``), with what it copied or synced (``found``) and its CUDA timing record."""
        now = _ns()
        outside = self.outside_backward_ns if self.in_backward() else self.outside_ns
        own = t_call - t_in + outside + now - t_ret
        t = found[0] if type(found) is list else found
        predicted = -1
        if self.gpu is not None:
            last = getattr(self._fake, "last", None)
            if last is not None and last[0] is func:
                predicted = last[1]
            self._fake.last = None
        if t is not None and (t.direction in _COPY_WAYS or t.sync is not None):
            kind = t.direction if t.direction in _COPY_WAYS else KERNEL
            nbytes = t.nbytes or 0
            pinned = not t.pageable
            sync = t.sync
            blocks = sync is not None or (
                kind in ("h2d", "d2h", "p2p") and not (pinned and t.non_blocking)
            )
            gpu_ns = 0
            if self.gpu is not None:
                if kind == KERNEL:
                    gpu_ns = predicted if predicted > 0 else MIN_KERNEL_NS
                else:
                    gpu_ns = copy_ns(self.gpu, kind, nbytes, pinned)
            rec = [line, kind, 0, 0, 0, gpu_ns, nbytes, pinned, t.non_blocking, sync, t.dtype, 0]
        elif predicted > 0 or timed is not None:
            blocks = False
            rec = [line, KERNEL, 0, 0, 0, max(predicted, 0), 0, False, False, None, None, 0]
        else:  # no GPU work: host time before the next record
            if self.gpu is not None:
                self._fake.own = getattr(self._fake, "own", 0) + own
            else:
                self.carry_ns += own
            return
        if self.gpu is not None:
            self._simulated(rec, own)
        else:  # NB: inline, a call costs a tenth of this path
            # the host is free again when the op is queued: after its launch, or, for an op
            # the host waits for, when it was called (the replay makes the wait again)
            host = (t_call if blocks else t_ret) - self.last_ns
            if host < 0:
                host = 0
            overhead = self.carry_ns + t_call - t_in + outside
            rec[HOST_NS] = host
            rec[OVERHEAD_NS] = overhead if overhead < host else host
            self.last_ns = t_ret
            if timed is not None:
                stream = self._streams.get(timed.stream)
                rec[STREAM] = self._stream(timed) if stream is None else stream
                timed.replay = rec  # the timer writes GPU_NS when its events complete
        records = self.records
        if len(records) < MAX_OPS:
            records.append(rec)
        else:
            self.dropped += 1
        if self.gpu is None:
            self.carry_ns = _ns() - t_ret

    def _measured(self, rec: list[Any], host: int, overhead: int) -> None:
        rec[HOST_NS] = host if host > 0 else 0
        rec[OVERHEAD_NS] = overhead if overhead < host else max(host, 0)

    def _simulated(self, rec: list[Any], own: int, waited: int = 0) -> None:
        """Under ``--fake-cuda``: the host time before the op, on this thread's CPU clock.

        NB: the script's Python and the simulation share the threads (the profile's, and
        autograd's device threads during a backward), which hand the GIL to each other: their
        wall clock between two ops has pauses of several ms that a real run does not have. CPU
        time has none; less the simulation's (:meth:`fake_op`) and the profiler's own, it is
        the script's host work, with its own time off the CPU on the profile's thread
        (:mod:`profilers.timing.off_cpu`). The op's launch is :data:`HOST_LAUNCH_NS`."""
        tls = self._fake
        cpu = thread_time_ns()
        before = getattr(tls, "cpu", None)
        overhead = own + getattr(tls, "own", 0)
        clock, off = self.clock, 0
        if clock is not None and threading.get_ident() == self.clock_thread:
            seen, tls.sim_off = getattr(tls, "sim_off", self.sim_off_ns), self.sim_off_ns
            off = max(0, self._off.since() - (tls.sim_off - seen))
            # NB: on the profile's thread the step clock sums the profiler's own time on every
            # op, those it skips here too (views, sizes: dozens a step under the fake GPU)
            spent = clock.run_own_ns + clock.own_ns
            if before is not None:
                overhead = own + spent - getattr(tls, "spent", spent)
            tls.spent = spent + own  # this op's own goes to the clock after this call
        user = 0 if before is None else cpu - before + off - getattr(tls, "sim", 0) - overhead
        user -= waited
        native = getattr(tls, "native", None)
        if native is None:
            # NB: a thread Python did not start (autograd's device threads) runs no Python of
            # the script: what it does between ops there is the profiler's and the fake GPU's
            # (in C++ the engine's work per node is part of the launch)
            native = tls.native = isinstance(threading.current_thread(), threading._DummyThread)
        if native:
            user = 0
        rec[HOST_NS] = max(0, user) + HOST_LAUNCH_NS + overhead
        rec[OVERHEAD_NS] = overhead
        tls.sim = tls.own = 0
        tls.cpu = thread_time_ns()

    def fake_op(self, func: Any, args: Any, kwargs: Any, out: Any, t0: int) -> None:
        """The fake GPU ran ``func`` (from ``t0`` on this thread's CPU clock): its predicted
        time, for the op the dispatch mode is running."""
        assert self.gpu is not None
        from profilers.timing.gpu_model.roofline import predict_op_ns

        ns = predict_op_ns(self.gpu, func, args, kwargs, out)
        tls = self._fake
        tls.last = (func, ns)
        tls.gpu_op = GPU_OP  # its way into the harness and out (:func:`note_harness`)

    def wait(
        self,
        kind: str,
        cause: str | None,
        line: Any,
        enter_ns: int,
        start_ns: int,
        end_ns: int,
        exit_ns: int,
    ) -> None:
        """A wait outside an op (:meth:`profilers.timing.timeline.StepClock.wait`): input and
        collectives keep their measured length; an explicit synchronize is made again by the
        replay, from the GPU's times."""
        if kind == INPUT or kind == COMM:
            rec = [line, kind, 0, 0, 0, 0, 0, False, False, None, None, end_ns - start_ns]
        elif kind == SYNC:
            rec = [line, SYNC, 0, 0, DEVICE, 0, 0, False, False, cause or "synchronize", None, 0]
        else:
            return
        if self.gpu is not None:
            # NB: the wait's own time (a loader's collate on this thread, its sleep or its
            # queue) is in wait_ns already: taken out at its wall length
            self._simulated(rec, start_ns - enter_ns + exit_ns - end_ns, end_ns - start_ns)
            rec[HOST_NS] -= HOST_LAUNCH_NS
        else:
            self._measured(rec, start_ns - self.last_ns, self.carry_ns + start_ns - enter_ns)
            self.last_ns = end_ns
            self.carry_ns = exit_ns - end_ns
        self._add(rec)

    def _add(self, rec: list[Any]) -> None:
        if len(self.records) < MAX_OPS:
            self.records.append(rec)
        else:
            self.dropped += 1

    def _stream(self, timed: Any) -> int:
        """A small number for the CUDA stream of a timing record (a ``TimedOp``)."""
        stream = timed.stream
        found = self._streams.get(stream)
        if found is None:
            found = self._streams[stream] = len(self._streams)
        return found

    def close(self, step: int, now_ns: int | None = None) -> None:
        """The step ``step`` ended (at ``now_ns``, the step clock's reading): its records are
        kept (the newest :data:`KEEP_STEPS`). NB: the host's time after the step's last op
        (logging, the loop's own Python) is in this step's wall: a last host record keeps it
        here, not before the next step's first op."""
        if now_ns is not None:
            rec = [END_OF_STEP, HOST, 0, 0, 0, 0, 0, False, False, None, None, 0]
            if self.gpu is not None:
                self._simulated(rec, 0)
            else:
                self._measured(rec, now_ns - self.last_ns, self.carry_ns)
                self.last_ns = now_ns
                self.carry_ns = 0
            self._add(rec)
        self.steps.append(LoggedStep(step, self.records, self.dropped))
        self.records = []
        self.dropped = 0
