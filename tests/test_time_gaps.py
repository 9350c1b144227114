"""A long stretch of the host with no op in it is charged to the line the profile's thread was
at, read by a sampler of its stack, not to the op after it: a ``time.sleep`` is the
sleep's line, the setup before the first op is the setup's line."""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

import profilers
from profilers.counting.user_code import UserCode
from profilers.timing.charge import untimed
from profilers.timing.gaps import STEP_END, GapSampler, name_gaps
from profilers.timing.line_time import LineTime
from profilers.timing.timeline import StepClock
from tests.profiler_helpers import line_of

MS = 1_000_000


class _Samples:
    def __init__(self, samples: list[tuple[int, str, int]]) -> None:
        self.samples = samples
        self.learned: dict[tuple[str, str, int], tuple[int, dict[str, float]]] = {}


def _line(launch_ns: int) -> LineTime:
    rec = LineTime()
    rec.launch_ns = launch_ns
    return rec


def test_a_gap_goes_to_the_lines_sampled_in_it_each_reading_for_the_time_nearest_it() -> None:
    lines = {"a.py:7": _line(12_000_000), "a.py:9": _line(1_000)}
    samples = [
        (500, "a.py:3", 0),  # before the gap: not its
        (1_000_000, "a.py:6", MS),  # NB: each one as punctual as the sampler's wait before it
        (3_000_000, "a.py:6", 2 * MS),
        (5_000_000, "a.py:6", 2 * MS),
        (7_000_000, "a.py:7", 2 * MS),  # the charged line's own share stays
        (11_000_000, "a.py:2", 4 * MS),  # after it
    ]
    # 10 ms from 0.5 ms, charged to line 7 (the op after it): each reading stands for the
    # time nearer to it: line 6's from the gap's start to 6 ms (midway to line 7's reading),
    # line 7's from there to the gap's end
    gaps = [(500_000, 10_500_000, "a.py:7", "a.py:5"), (20_000_000, 30_000_000, "a.py:9", "a.py:7")]
    name_gaps(gaps, _Samples(samples), lines, LineTime)  # type: ignore[arg-type]
    assert lines["a.py:6"].launch_ns == 5_500_000
    assert lines["a.py:7"].launch_ns == 12_000_000 - 5_500_000
    assert lines["a.py:9"].launch_ns == 1_000  # no reading inside: it stays where it was
    assert "a.py:3" not in lines and "a.py:2" not in lines
    # one reading: the whole gap, but never more than the charged line holds (its probes may
    # have taken some out)
    lines = {"a.py:7": _line(2_000_000)}
    gap = [(0, 10_000_000, "a.py:7", "a.py:5")]
    name_gaps(gap, _Samples([(5, "a.py:6", 0)]), lines, LineTime)  # type: ignore[arg-type]
    assert (lines["a.py:7"].launch_ns, lines["a.py:6"].launch_ns) == (0, 2_000_000)


def test_a_late_reading_stands_for_half_an_interval_before_it_the_wait_is_the_line_before() -> None:
    # a 120 ms spin at line 6, read every 5 ms, then the op at line 7: the reading due at
    # 95 ms waited for the GIL until the op let it go at 119 ms (or for a core, on a loaded box)
    samples = [(ms * MS, "a.py:6", 5 * MS) for ms in range(5, 95, 5)] + [
        (119 * MS, "a.py:7", 5 * MS)
    ]
    lines = {"a.py:7": _line(120 * MS)}
    name_gaps([(0, 120 * MS, "a.py:7", "a.py:5")], _Samples(samples), lines, LineTime)  # type: ignore[arg-type]
    # line 7's reading stands for 2.5 ms before it (half the wait) and the 1 ms after it
    assert lines["a.py:7"].launch_ns == 3_500_000
    assert lines["a.py:6"].launch_ns == 116_500_000
    # while ops flow the sampler waits 50 ms: a reading due then is not late (nearest: 70/30)
    samples = [(45 * MS, "a.py:9", 50 * MS), (95 * MS, "a.py:10", 50 * MS)]
    lines = {"a.py:10": _line(100 * MS)}
    name_gaps([(0, 100 * MS, "a.py:10", "a.py:5")], _Samples(samples), lines, LineTime)  # type: ignore[arg-type]
    assert (lines["a.py:9"].launch_ns, lines["a.py:10"].launch_ns) == (70 * MS, 30 * MS)


def test_a_gap_no_reading_fell_in_takes_the_split_the_same_gap_had_in_other_steps() -> None:
    # a loop: the op at line 5, a 20 ms sleep at line 6, the op at line 7; a reading every
    # 50 ms falls in the gap of one step in two or three
    sampler = _Samples(
        [(15 * MS, "a.py:6", 50 * MS), (65 * MS, "a.py:6", 50 * MS), (75 * MS, "a.py:4", 10 * MS)]
    )
    step1 = {"a.py:7": _line(20_000_000)}
    name_gaps([(10_000_000, 30_000_000, "a.py:7", "a.py:5")], sampler, step1, LineTime)  # type: ignore[arg-type]
    assert step1["a.py:6"].launch_ns == 20_000_000 and step1["a.py:7"].launch_ns == 0
    # another step's gap: its first 10 ms nearer the reading at line 6, its last 10 ms nearer
    # the one at line 4: the mean split of the two gaps is 3/4, 1/4
    step2 = {"a.py:7": _line(20_000_000)}
    name_gaps([(60_000_000, 80_000_000, "a.py:7", "a.py:5")], sampler, step2, LineTime)  # type: ignore[arg-type]
    # the next step: no reading in the same gap (24 ms this time), in a gap before line 7
    # that follows another op (line 3), in one that ends the step, nor in a 300 ms gap
    # between the same ops (a checkpoint every tenth step): only the first takes the split
    step3 = {"a.py:7": _line(400_000_000)}
    gaps = [
        (100_000_000, 124_000_000, "a.py:7", "a.py:5"),
        (130_000_000, 136_000_000, "a.py:7", "a.py:3"),
        (140_000_000, 146_000_000, "a.py:7", STEP_END),
        (150_000_000, 450_000_000, "a.py:7", "a.py:5"),
    ]
    name_gaps(gaps, sampler, step3, LineTime)  # type: ignore[arg-type]
    assert step3["a.py:6"].launch_ns == 18_000_000 and step3["a.py:4"].launch_ns == 6_000_000
    assert step3["a.py:7"].launch_ns == 400_000_000 - 24_000_000
    # a snapshot (learn=False) uses the splits but adds none
    fresh = _Samples([(100, "a.py:9", 0)])
    name_gaps(
        [(0, 1_000, "a.py:7", "a.py:5")], fresh, {"a.py:7": _line(1_000)}, LineTime, learn=False
    )  # type: ignore[arg-type]
    assert fresh.learned == {}


def test_a_setup_gap_and_the_loops_gaps_before_the_same_op_are_told_apart() -> None:
    x = torch.ones(8)
    slept = 0
    with profilers.profile() as prof:
        # read at 5 ms (the sampler's first reading); with the first loop sleep, the first
        # op's gap is as long as a loop's gap (within a power of two)
        time.sleep(0.008)  # @setup_sleep
        for _ in range(40):
            t0 = time.perf_counter_ns()
            time.sleep(0.02)  # @loop_sleep
            slept += time.perf_counter_ns() - t0
            y = x * 2  # @first_in_loop
            y = y + 1
            profilers.step()
    r = prof.report()
    assert r.time is not None
    after = r.time["after_first"]
    lines = {d["site"].rsplit(":", 1)[1]: float(d["total_ms"]) for d in after["lines"]}
    # the gap before the loop's first op follows the last op of the step before; the setup's,
    # as long, followed nothing: its line never runs after step 0, and its split is its own
    assert str(line_of("setup_sleep")) not in lines, lines
    # readings fall in a 20 ms gap two steps in five; tolerance: 30% of the sleeps (fails
    # where no reading fell in the first 28 gaps, about 0.6 ** 28 = 6e-7 of runs)
    assert lines.get(str(line_of("loop_sleep")), 0.0) >= 0.3 * slept / 1e6, lines


@contextmanager
def _thread(target: Any, here: threading.Event, go: threading.Event) -> Iterator[int]:
    """``target`` on a thread of its own, once it has set ``here``: its ident; ``go`` is set
    and the thread joined when the block ends."""
    t = threading.Thread(target=target)
    t.start()
    try:
        assert here.wait(10)
        assert t.ident is not None
        yield t.ident
    finally:
        go.set()
        t.join()


def test_the_sampler_reads_the_user_line_a_thread_is_blocked_at() -> None:
    here = threading.Event()
    go = threading.Event()

    def blocked() -> None:
        here.set()
        go.wait()  # @blocked

    with _thread(blocked, here, go) as ident:
        sampler = GapSampler(UserCode(), ident)
        for _ in range(100):  # NB: until it is inside go.wait(), not a fixed sleep
            sampler.sample()
            if sampler.samples and sampler.samples[-1][1].endswith(f":{line_of('blocked')}"):
                break
        assert sampler.samples[-1][1] == f"tests/test_time_gaps.py:{line_of('blocked')}"


def test_the_sampler_names_the_users_line_not_a_dataclass_made_init() -> None:
    # NB: dataclasses.py exec()s the __init__ it writes: its frame says "<string>"
    here = threading.Event()
    go = threading.Event()

    @dataclasses.dataclass
    class Waits:
        done: bool = dataclasses.field(default_factory=go.wait)

    def blocked() -> None:
        here.set()
        Waits()  # @made_init

    before = f"tests/test_time_gaps.py:{line_of('made_init') - 1}"  # here.set()
    with _thread(blocked, here, go) as ident:
        sampler = GapSampler(UserCode(), ident)
        for _ in range(1000):  # NB: until it is past here.set(), polled, not a fixed sleep
            sampler.sample()
            if sampler.samples and sampler.samples[-1][1] != before:
                break
            time.sleep(0.001)
        assert sampler.samples[-1][1] == f"tests/test_time_gaps.py:{line_of('made_init')}"


def _spin(ns: int) -> int:
    end = time.perf_counter_ns() + ns
    while (now := time.perf_counter_ns()) < end:
        pass
    return now


def test_on_the_fast_path_a_gap_is_named_over_the_scripts_time_not_the_wall_clocks() -> None:
    # The fast path takes its own time out of a gap as it goes (a Python number's cast: most of
    # each call in a loop of ``y + 1``). Here one gap: 20 ms of the script's Python at one
    # line, then 20 ms at another of which 16 ms are ours (0.8 ms of each 1). On the wall clock
    # the 24 ms charged were read from its last 24 ms: 4 ms to the first line, 20 to the second.
    clock = StepClock(time.perf_counter_ns(), lines_measured=False)
    sampler = GapSampler(UserCode(), threading.get_ident(), clock=clock, steady=True)
    clock.sampler = sampler
    for _ in range(20):
        _spin(1_000_000)
        sampler.sample()  # @python
    half = time.perf_counter_ns()
    for i in range(21):  # NB: readings at both ends of each half: a stalled box moves no border
        if i:
            untimed(clock, 800_000, _spin(1_000_000))
        sampler.sample()  # @casts
    end = time.perf_counter_ns()
    step = clock.close(end)
    ms = {key: rec.launch_ns / 1e6 for key, rec in step.lines.items()}
    python, casts = (f"tests/test_time_gaps.py:{line_of(m)}" for m in ("python", "casts"))
    assert step.own_ns == 20 * 800_000
    # each line its script's time, as measured here (a loaded box stretches either half)
    expected = {python: (half - step.start_ns) / 1e6, casts: (end - half) / 1e6 - 16}
    assert all(abs(ms[key] - want) <= 1.5 for key, want in expected.items()), (ms, expected)


class _Kept:
    """A local whose end the test sees."""


def test_a_reading_keeps_no_frame_of_the_thread_alive_while_it_looks_up_a_file() -> None:
    # A frame object held by the sampler while the thread returns outlives the frame and
    # keeps its locals: an op's output kept that way made torch detach it when it wrapped it
    # (one detach op more than the script ran, a flaky count). Deciding a new file name stats
    # it, which lets go of the GIL: here that lookup waits until the thread has returned.
    here, go, returned = threading.Event(), threading.Event(), threading.Event()
    freed: list[bool] = []

    def work() -> Any:
        kept = _Kept()
        here.set()
        go.wait()  # @held
        return weakref.ref(kept)

    def thread() -> None:
        ref = work()
        freed.append(ref() is None)
        returned.set()

    class SlowUser(UserCode):
        def _decide(self, filename: str) -> bool:
            if filename == __file__:
                go.set()  # the thread goes on while this reading looks the file up
                returned.wait(10)
            return super()._decide(filename)

    with _thread(thread, here, go) as ident:
        sampler = GapSampler(SlowUser(), ident)
        sampler.sample()
        assert returned.is_set() and freed == [True]
        assert sampler.samples[-1][1] == f"tests/test_time_gaps.py:{line_of('held')}"


def _lines(r: profilers.Report) -> dict[str, float]:
    assert r.time is not None
    return {d["site"].rsplit(":", 1)[1]: float(d["total_ms"]) for d in r.time["run"]["lines"]}


def test_a_sleep_and_the_setup_before_the_first_op_are_their_own_lines() -> None:
    slept = 0
    # NB: a small elementwise op runs on one thread: a matmul's worker threads, descheduled on
    # a loaded box, cost it milliseconds of its own (17-25 ms over three, seen)
    x = torch.ones(8)
    with profilers.profile() as prof:
        t0 = time.perf_counter_ns()
        time.sleep(0.15)  # @setup
        slept_setup = time.perf_counter_ns() - t0
        for _ in range(3):
            y = x * 2  # @first_op
            t0 = time.perf_counter_ns()
            time.sleep(0.12)  # @sleep
            slept += time.perf_counter_ns() - t0
            y = y + 1  # @after
            profilers.step()
    by_line = _lines(prof.report())
    # read every 50 ms while ops flow, every 5 ms once no op ended between two readings: a
    # 120 ms sleep has several readings, all at its line, which then takes the whole gap;
    # tolerance 10% (the Python around the sleep stays with its lines)
    assert by_line[str(line_of("sleep"))] >= 0.9 * slept / 1e6, by_line
    assert by_line[str(line_of("setup"))] >= 0.9 * slept_setup / 1e6, by_line
    assert by_line.get(str(line_of("after")), 0.0) < 0.1 * slept / 1e6, by_line
    assert by_line.get(str(line_of("first_op")), 0.0) < 0.1 * slept_setup / 1e6, by_line


def test_the_sampler_is_ours_and_ends_with_the_profile() -> None:
    from profilers import registry

    with profilers.profile() as prof:
        torch.ones(2) + 1
        found: Any = [t for t in registry.own_threads_alive() if t.name == "gpuwatch-gap-sampler"]
        assert len(found) == 1
    assert not found[0].is_alive()  # stopped and joined on exit
    assert prof.report().time is not None


def test_a_short_sleep_in_a_loop_goes_to_its_line_though_few_readings_fall_in_it() -> None:
    x = torch.ones(8)
    slept = 0
    with profilers.profile() as prof:
        for _ in range(30):
            y = x * 2
            t0 = time.perf_counter_ns()
            time.sleep(0.02)  # @short
            slept += time.perf_counter_ns() - t0
            y = y + 1  # @next_op
            profilers.step()
    r = prof.report()
    assert r.time is not None
    lines = {d["site"].rsplit(":", 1)[1]: float(d["total_ms"]) for d in r.time["run"]["lines"]}
    # read every 50 ms while ops flow, so a reading falls in three gaps of 20 ms in five; the
    # others take the split the same gap had: all but the gaps before the first reading in one.
    # Tolerance: half the sleeps (fails only where no reading fell in the first 15 gaps, about
    # 0.6 ** 15 = 0.05% of runs)
    assert lines.get(str(line_of("short")), 0.0) >= 0.5 * slept / 1e6, lines
    assert lines.get(str(line_of("next_op")), 0.0) < 0.5 * slept / 1e6, lines
