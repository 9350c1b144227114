"""The lines of the host's long gaps, named by samples of the profile thread's stack.

The step clock charges the host's time between two ops to the line of the op after it
(:class:`~profilers.timing.timeline.StepClock`): right for the Python and dispatch that lead to
an op, wrong for a long stretch with no op in it. A ``time.sleep`` at line 6 was charged to the
forward at line 7; the optimizer built at line 3 (a second and more, importing what it needs)
to the first ``torch.randn`` of the loop. So the dispatch mode notes each gap of the profile's
thread longer than :data:`LONG_GAP_NS` (one comparison per op), and a sampler thread reads that
thread's innermost user frame. When a step closes, each noted gap is split among the lines its
readings saw (:func:`_split`); the line that was charged keeps its own readings' share, and a
gap with no reading inside stays where it was.

Cost: each reading holds the GIL for 4-22 µs (a deeper stack costs more), and the script waits
for it when it wants the GIL meanwhile: read 200 times a second all along, that was 2-6% of a
launch-bound loop's profiled time on a 2-core box, which the stated unprofiled step (4-5x
shorter) would carry 4-5 times over. So the sampler reads every :data:`SLOW_S` while ops flow,
and every :data:`INTERVAL_S` once a reading finds that no op has ended since the one before (a
gap of 50-100 ms in progress). A long gap (the setup, a long read) is then named whole; a gap
shorter than :data:`SLOW_S` gets a reading about gap/50 ms of the time. One that gets none takes
the split that readings gave the same gap (between the same two ops) in earlier steps: a loop's
gap recurs each step. Without such a step it stays with the op after it. Waking every 5 ms only
to check whether an op ended costs as much as a reading (the GIL handed over each time: 1.08x
against 1.02x for the 50 ms rate, one run of 8 rounds). Measured A/B:
``benchmarks/gap_sampler.py``.

On the fast path (profilers/counting/kernels.py) only the counted ops reach Python, so the clock
has no line for the host work between them: every such stretch is a gap, and the sampler reads
at a steady :data:`FAST_PATH_S` (ops flowing or not: it cannot tell). The lines are then a
sampling profiler's: exact for a long stretch, and over many steps for short ones (a gap with no
reading takes the split learned from gaps of its length).
"""

from __future__ import annotations

import sys
import threading
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from operator import itemgetter
from time import perf_counter_ns
from typing import TYPE_CHECKING

from profilers.registry import OwnThread
from profilers.timing.line_time import LineTime

if TYPE_CHECKING:
    from profilers.counting.user_code import UserCode  # noqa: TID251 (types only)
    from profilers.timing.timeline import StepClock

LONG_GAP_NS = 5_000_000
"""A gap between two ops of the profile's thread this long (or longer) is named by samples."""

INTERVAL_S = 0.005
"""How often the sampler reads the profile thread's stack inside a long gap."""

SLOW_S = 0.05
"""How often it reads it while ops flow (no gap in progress at its last two readings)."""

FAST_PATH_S = 0.01
"""How often it reads it on the fast path (profilers/counting/kernels.py), where the host's work
between counted ops has no line but the readings': 100 a second, py-spy's default rate."""

MAX_GAPS = 1024
"""Gaps noted per step (the first; the rest stay charged to the op after them, or on the fast
path, where every gap between counted ops is noted, to ``(between counted ops)``)."""

MAX_LEARNED = 4096
"""Gaps (a pair of ops, a length) whose split among lines is kept for the steps where no
reading fell in them (:func:`name_gaps`)."""

STEP_END = "<step end>"
"""What comes before a gap that ends a step (not an op: its line may run ops too)."""

Sample = tuple[int, str, int]
"""A reading: when, ``file:line``, how long the sampler waited before it (:class:`GapSampler`)."""

MAX_SAMPLES = 1 << 15
"""Samples kept (the newest: two and a half minutes at :data:`INTERVAL_S`)."""


_TYPED = ("<stdin>", "<ipython-input-", "<console>")


def generated(filename: str) -> bool:
    """Whether ``filename`` names code made at run time with ``exec()``: a dataclass's
    ``__init__`` (``<string>``; HF's ``TrainingArguments``), a namedtuple's ``__new__``,
    attrs' ``<attrs generated init ...>``. NB: CPython's dataclasses.py builds each method's
    text and ``exec``s it, so its frames say ``<string>`` wherever the class was written: such
    a frame is the user's line only when no user frame with a file of its own called it
    (``python -c``, code exec'd by hand). Code typed at a prompt (``_TYPED``) is the user's."""
    return filename.startswith("<") and not filename.startswith(_TYPED)


class GapSampler:
    """Reads the innermost user frame of the thread ``ident`` every ``interval_s``, as
    ``file:line`` (the step clock's keys), on a daemon thread of ours.

    Args:
        user: which frames are the user's (the recorder's :class:`~profilers.counting.user_code.
            UserCode`).
        ident: the thread to sample (the profile's).
    """

    def __init__(
        self,
        user: UserCode,
        ident: int,
        interval_s: float = INTERVAL_S,
        clock: StepClock | None = None,
        steady: bool = False,
    ) -> None:
        self.user = user
        self.ident = ident
        self.interval_s = interval_s
        self.clock = clock
        """The step clock whose ``last_ns`` (the end of the last op or wait) says whether ops
        flow: then the sampler reads every :data:`SLOW_S` only (``steady``: always every
        ``interval_s``, as with none); its ``untimed_ns`` puts each reading on the script's
        time, as the clock's gaps are (:meth:`~profilers.timing.timeline.StepClock.long_gap`)."""
        self.steady = steady or clock is None
        self.learned: dict[tuple[str, str, int], tuple[int, dict[str, float]]] = {}
        """(what came before a gap, the line charged, its length's power of two) -> (gaps
        with readings, the sum of their splits: the fraction of each gap by line read in it)
        (:func:`name_gaps`)."""
        self.samples: deque[Sample] = deque(maxlen=MAX_SAMPLES)
        """(when: on the script's time, with a clock; ``file:line``; the ns the sampler waited
        before it: a reading later than that waited for the GIL or a core), oldest first
        (appended by the sampler only: atomic)."""
        self._stop = threading.Event()
        self._thread = OwnThread(target=self._run, name="gpuwatch-gap-sampler", daemon=True)

    def start(self) -> GapSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        clock = None if self.steady else self.clock
        interval, seen = self.interval_s, None
        while not self._stop.wait(interval):
            self.sample(int(interval * 1e9))
            if clock is not None:  # NB: a gap in progress: no op ended since the last reading
                now = clock.last_ns
                interval = self.interval_s if now == seen else SLOW_S
                seen = now

    def sample(self, waited_ns: int = 0) -> None:
        """One reading: the line the thread is at now (nothing when it runs no user code),
        ``waited_ns`` after the one before."""
        stack = _stack_of(self.ident, self.user.decided)
        user = self.user
        i = first = _first_user(stack, 0, user)
        # NB: code made with exec() (a dataclass's __init__, a namedtuple) is named "<string>"
        # like code typed with -c: the line is the user's with a file that called it, if any
        # (as the counting's: UserCode.first)
        while i is not None and generated(stack[i][0]):
            i = _first_user(stack, i + 1, user)
        if i is None:
            i = first
        if i is None:
            return
        filename, line = stack[i]
        when = perf_counter_ns() - (0 if self.clock is None else self.clock.untimed_ns)
        samples = self.samples
        if samples and when < samples[-1][0]:  # NB: in order (the calibrated part is a guess)
            when = samples[-1][0]
        samples.append((when, f"{user.display(filename)}:{line}", waited_ns))

    def forget(self, before_ns: int) -> None:
        """Drops the samples taken before ``before_ns`` (a closed step's; on the script's time,
        as the samples are)."""
        samples = self.samples
        while samples and samples[0][0] < before_ns:
            samples.popleft()


def _stack_of(ident: int, decided: Callable[[str], bool]) -> list[tuple[str, int]]:
    """``(file, line)`` of the thread ``ident``'s frames, innermost first, up to its first
    frame that ``decided(file)`` already knows as the user's (and not ``<string>``).

    NB: no frame object is held once this returns, and nothing in it lets go of the GIL (no
    stat of a new file name: :meth:`UserCode.decided` only reads what is known). A frame
    object held while the thread went on would outlive its frame and keep its locals: an op's
    output kept alive that way makes torch detach it when it wraps it (``make_variable``),
    one ``detach`` op more in the profile than the script ran (seen: a flaky op count). What
    is left: the interpreter's forced switch (the thread waited 5 ms for the GIL) landing in
    this walk of a few microseconds, where a stat was a sure switch."""
    frame = sys._current_frames().get(ident)
    stack: list[tuple[str, int]] = []
    while frame is not None:
        filename = frame.f_code.co_filename
        stack.append((filename, frame.f_lineno))
        if decided(filename) and not filename.startswith("<"):
            break
        frame = frame.f_back
    return stack


def _first_user(
    stack: list[tuple[str, int]], start: int, user: Callable[[str], bool]
) -> int | None:
    """The index of the first user frame in ``stack`` from ``start`` (None: none)."""
    return next((i for i in range(start, len(stack)) if user(stack[i][0])), None)


def _between(samples: list[Sample], start_ns: int, end_ns: int) -> list[Sample]:
    """The samples taken strictly inside ``(start_ns, end_ns)``."""
    lo = bisect_right(samples, start_ns, key=itemgetter(0))
    return samples[lo : bisect_left(samples, end_ns, key=itemgetter(0))]


def sample_gaps(stack: ExitStack, clock: StepClock, user: UserCode) -> None:
    """Samples this thread's lines for ``clock`` until ``stack`` closes: for the dispatch
    mode's, in its long gaps; on the fast path, every :data:`FAST_PATH_S` (its clock sees only
    the counted ops: every stretch between them is a gap to name)."""
    fast = not clock.lines_measured
    interval_s = FAST_PATH_S if fast else INTERVAL_S
    clock.sampler = GapSampler(user, threading.get_ident(), interval_s, clock, fast).start()
    stack.callback(clock.sampler.stop)


def name_gaps(
    gaps: list[tuple[int, int, str, str]],
    sampler: GapSampler | None,
    lines: dict[str, LineTime],
    make: Callable[[], LineTime],
    learn: bool = True,
    spans: list[tuple[int, int, str, str]] | None = None,
) -> None:
    """Splits each long gap ``(start_ns, end_ns, file:line charged, what came before it: the
    op's line, or STEP_END)`` among the lines sampled in it: moves the others' shares of its
    time from the charged line's ``launch_ns`` to theirs (in ``lines``, ``file:line`` ->
    :class:`~profilers.timing.timeline.LineTime`, made with ``make()`` where missing).

    A gap no reading fell in takes the split that readings gave the same gap in other steps:
    between the same two ops and of about its length (within a power of two), the mean of
    their splits. A loop's gap recurs each step, and a reading every 50 ms falls in a 20 ms
    gap two steps in five; a branch taken every tenth step (a checkpoint) makes a gap of
    another length, learned apart. ``learn``: the gaps with readings add to those splits (not
    for a snapshot of the open step). ``spans``: gets ``(start_ns, end_ns, the line charged,
    the line that took most of it)`` of each gap that another line took most of (the trace's
    GPU-idle slices are named by it)."""
    if sampler is None or not gaps:
        return
    samples = list(sampler.samples)
    learned = sampler.learned
    for start, end, charged, before in gaps:
        rec = lines.get(charged)
        if rec is None:
            continue
        seen = _between(samples, start, end)
        where = (before, charged, (end - start).bit_length())
        if seen:
            share = _split(seen, start, end)
            if learn and (where in learned or len(learned) < MAX_LEARNED):
                count, fractions = learned.get(where, (0, {}))
                fractions = dict(fractions)  # NB: a snapshot on another thread may read it
                for key, ns in share.items():
                    fractions[key] = fractions.get(key, 0.0) + ns / (end - start)
                learned[where] = (count + 1, fractions)
        else:
            known = learned.get(where)
            if known is None:
                continue
            count, fractions = known
            share = {key: int((end - start) * f / count) for key, f in fractions.items()}
        _move(share, charged, rec, lines, make)
        if spans is not None:
            top = max(share, key=share.__getitem__, default=charged)
            if top != charged:
                spans.append((start, end, charged, top))


def _split(seen: list[Sample], start: int, end: int) -> dict[str, int]:
    """A gap's ns by line from the readings inside it: each reading stands for the time nearer
    to it than to the readings beside it (the first also from the gap's start, the last to its
    end), and a late one for half the sampler's wait before it, not more.

    NB: nearest, not "since the reading before": a reading waits for the GIL, up to the
    interpreter's switch interval (5 ms) while the thread runs Python, and is served at once
    where the thread lets the GIL go: the op after a stretch of pure Python. Standing for the
    whole time since the one before, that late reading gave the op's line 12% of a 120 ms spin
    (the fast path's 10 ms readings); standing for the half nearer it, 12% still on a loaded
    box (CI: a reading 29 ms late). The time it waited is the line before it's: that line held
    the GIL (or the sampler waited for a core while the script ran on)."""
    share: dict[str, int] = {}
    before = start
    for (when, key, _), (after, _, waited) in zip(seen, seen[1:], strict=False):
        middle = after - min(after - when, waited or after - when) // 2
        share[key] = share.get(key, 0) + middle - before
        before = middle
    last = seen[-1][1]
    share[last] = share.get(last, 0) + end - before
    return share


def _move(
    share: dict[str, int],
    charged: str,
    rec: LineTime,
    lines: dict[str, LineTime],
    make: Callable[[], LineTime],
) -> None:
    """Moves each other line's ``share`` of a gap from ``rec`` (the charged line's) to it."""
    for key, ns in share.items():
        ns = min(ns, rec.launch_ns)
        if key == charged or ns <= 0:
            continue
        rec.launch_ns -= ns
        rec.named_out[key] = rec.named_out.get(key, 0) + ns
        into = lines.get(key)
        if into is None:
            into = lines[key] = make()
        into.launch_ns += ns
