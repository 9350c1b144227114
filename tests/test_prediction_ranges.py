"""A prediction's two parts and their ranges (profilers/timing/uncertainty.py), on injected host
timings: hand-built steps whose host times are given, a GPU model's error set by the test. No
clock is read, nothing sleeps; every figure is exact (ns), the ranges worked out in comments."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gpuwatch.output.whatif import prediction_lines, span_ms, unprofiled_line, what_if_lines
from profilers.sections import Predicted, WhatIf
from profilers.timing.gpu_model import gpu_spec, validation
from profilers.timing.gpu_model.validation import Checked, error_of
from profilers.timing.oplog import LoggedStep
from profilers.timing.replay import INPUT, KERNEL, SYNC, replay
from profilers.timing.replayed import _parts, _prediction, typical, what_if
from profilers.timing.uncertainty import (
    Parts,
    cpu_name,
    host_ns,
    scaled,
    spread,
    tiers,
)

MS = 1_000_000


def rec(line: str, kind: str, host: int, gpu: int = 0, *, overhead: int = 0, wait: int = 0,
        sync: str | None = None) -> list[Any]:  # fmt: skip
    """One record in profilers/timing/oplog.py's layout."""
    stream = -1 if kind == SYNC else 0
    return [line, kind, host, overhead, stream, gpu, 0, False, False, sync, None, wait]


def steps_with_host(hosts_ms: list[float], gpu_ms: float = 0.5) -> list[LoggedStep]:
    """One kernel a step, queued after ``hosts_ms[i]`` of host work (the profiler's own 0.1 ms
    more, which the prediction leaves out), ``gpu_ms`` on the GPU."""
    return [
        LoggedStep(
            n,
            [rec("t.py:3", KERNEL, round((h + 0.1) * MS), round(gpu_ms * MS), overhead=MS // 10)],
            0,
        )  # fmt: skip
        for n, h in enumerate(hosts_ms, start=1)
    ]


def test_the_hosts_spread_is_p10_p90_from_ten_steps_and_min_max_below():
    ten = [float(v) for v in range(10, 20)]  # 10..19
    # nearest rank: p10 the 1st of 10, p90 the 9th; the slowest step (19) is left out
    assert spread(ten) == (14.5, 10.0, 18.0, "p10-p90 of 10 steps")
    assert spread([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0, "min-max of 3 steps")
    assert spread([4.0]) == (4.0, 4.0, 4.0, "min-max of 1 step")
    with pytest.raises(ValueError):
        spread([])


def test_a_steps_host_part_is_its_host_time_less_the_profilers_and_its_input_waits():
    records = [
        rec("t.py:2", INPUT, 1_000, overhead=300, wait=5_000),
        rec("t.py:3", KERNEL, 2_000, 9_999, overhead=500),
    ]
    # (1,000 - 300) + 5,000 waited + (2,000 - 500); the GPU's 9,999 is not the host's
    assert host_ns(records) == 700 + 5_000 + 1_500 == 7_200


def test_the_cpu_is_named_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R)   Gold 6230 CPU\n")
    assert cpu_name(str(info)).startswith("Intel(R) Xeon(R) Gold 6230 CPU (")
    assert cpu_name(str(tmp_path / "absent"))  # no /proc: platform's name, never empty


def test_the_parts_and_the_step_range_on_injected_host_times(monkeypatch):
    monkeypatch.setitem(validation.CHECKED, "T4", Checked(1.2, 1.5, 3, False))
    # 10 steps, host 1.0, 1.1, ... 1.9 ms before one 0.5 ms kernel
    steps = steps_with_host([1.0 + i / 10 for i in range(10)])
    chosen = typical(steps)
    assert chosen is not None
    _, ops, over = chosen
    assert over == 10
    parts = _parts(steps, ops, gpu_spec("T4"))
    # host: median 1.45, p10 1.0 (the 1st), p90 1.8 (the 9th)
    assert parts.basis == "p10-p90 of 10 steps"
    assert parts.host_ms == pytest.approx(1.45)
    assert (parts.host_low, parts.host_high) == pytest.approx((1.0 / 1.45, 1.8 / 1.45))
    # GPU: the model's 0.5 ms busy; the model ran 1.2-1.5x fast: 0.5 to 0.75 ms (its own
    # figure kept as the low end)
    assert parts.gpu_ms == 0.5 and (parts.gpu_low, parts.gpu_high) == (1.0, 1.5)
    d = _prediction(parts, ops)
    assert d["host"]["ms"] == 1.45 and (d["host"]["low_ms"], d["host"]["high_ms"]) == (1.0, 1.8)
    assert d["host"]["measured_on"] == cpu_name()
    assert (d["gpu_model"]["low_ms"], d["gpu_model"]["high_ms"]) == (0.5, 0.75)
    assert d["gpu_model"]["error"] == [1.2, 1.5] and d["gpu_model"]["validated"] is False
    assert d["gpu_model"]["words"] == (
        "unvalidated: off by x1.20-1.50 (true/predicted) against 3 published step times"
    )
    # the step: the host launches, then the kernel runs: 1.45 + 0.5; fast host and model's
    # own GPU time 1.0 + 0.5; slow host and GPU at its error's high end 1.8 + 0.75
    assert d["step"] == {"ms": 1.95, "low_ms": 1.5, "high_ms": 2.55, "verdicts": ["launch-bound"]}


def test_a_verdict_that_flips_inside_the_ranges_is_not_given_as_known(monkeypatch):
    # host 1.0 ms (0.9-1.1) before a 0.9 ms kernel: launch-bound as predicted; with the GPU at
    # its error's high end (x1.5: 1.35 ms busy) the GPU is busy longer than the host works
    monkeypatch.setitem(validation.CHECKED, "T4", Checked(1.0, 1.5, 2, False))
    steps = steps_with_host([0.9, 1.0, 1.1], gpu_ms=0.9)
    chosen = typical(steps)
    assert chosen is not None
    parts = _parts(steps, chosen[1], gpu_spec("T4"))
    d = _prediction(parts, chosen[1])
    assert d["step"]["verdicts"] == ["launch-bound", "GPU-bound"]
    r = report({}, {"gpu": "T4", **d})
    assert prediction_lines(r)[0] == (
        "PREDICTED step on the T4: 1.9 ms (1.8-2.5 ms) (the verdict is not known: launch-bound "
        "as predicted, GPU-bound elsewhere in the ranges), in two parts:"
    )


def test_a_gpu_without_published_figures_takes_the_widest_error_of_its_kind(monkeypatch):
    monkeypatch.setattr(validation, "CHECKED", {
        "V100": Checked(1.1, 1.4, 2, False),
        "T4": Checked(0.9, 1.3, 1, False),
        "K80": Checked(3.0, 5.0, 1, False),  # no tensor cores: not the H200's kind
    })  # fmt: skip
    e = error_of("H200")
    assert (e.low, e.high, e.rows, e.validated, e.like) == (0.9, 1.4, 0, False, ("V100", "T4"))
    assert e.words() == (
        "unvalidated: no published step time of the H200 compared yet; true/predicted "
        "x0.90-1.40, the widest on the GPUs of its kind compared (V100, T4)"
    )
    assert error_of("P100").like == ("K80",) and error_of("P100").high == 5.0
    monkeypatch.setitem(validation.CHECKED, "H200", Checked(0.95, 1.1, 2, True))
    assert error_of("H200").words() == (
        "validated against 2 published step times (true/predicted x0.95-1.10)"
    )


def test_scaling_keeps_the_profilers_own_time_and_scales_waits_and_gpu():
    ops = LoggedStep(1, [rec("t.py:2", INPUT, 1_000, overhead=200, wait=4_000),
                         rec("t.py:3", KERNEL, 3_000, 10_000, overhead=1_000)], 0).ops()  # fmt: skip
    a, b = scaled(ops, 2.0, 1.5)
    assert (a.host_ns, a.overhead_ns, a.wait_ns) == (200 + 1_600, 200, 8_000)
    assert (b.host_ns, b.overhead_ns, b.gpu_ns) == (1_000 + 4_000, 1_000, 15_000)
    assert replay([a, b], drop_overhead=True).step_ns == 1_600 + 8_000 + 4_000 + 15_000


def sync_step(n: int, host_scale: float) -> LoggedStep:
    """A launch-bound step: two lines that each synchronize after a short kernel, waiting for
    it (t.py:4 waits 0.2 ms, t.py:6 waits 0.25 ms), host work 1 ms before each kernel."""
    h = round(MS * host_scale)
    return LoggedStep(n, [
        rec("t.py:3", KERNEL, h, MS // 5),
        rec("t.py:4", SYNC, 0, sync="synchronize"),
        rec("t.py:5", KERNEL, h, MS // 4),
        rec("t.py:6", SYNC, 0, sync="synchronize"),
    ], 0)  # fmt: skip


def report(w: dict[str, Any], predicted: dict[str, Any] | None = None) -> Any:
    """The parts of a report the prediction's lines read, its sections typed as a Report's."""
    return SimpleNamespace(
        what_if=WhatIf.from_dict(w) if w else None,
        predicted=Predicted.from_dict(predicted) if predicted else None,
        options=SimpleNamespace(fake_cuda=True, timing_source="off", profile=None),
        lines=[],
    )


def ranked_what_if(hosts: list[float], error: tuple[float, float], monkeypatch) -> dict[str, Any]:
    monkeypatch.setitem(validation.CHECKED, "T4", Checked(*error, 1, False))
    steps = [sync_step(n, h) for n, h in enumerate(hosts, start=1)]
    chosen = typical(steps)
    assert chosen is not None
    parts = _parts(steps, chosen[1], gpu_spec("T4"))
    return what_if(*chosen, gpu_spec("T4"), "predicted", [], parts)


def test_close_savings_with_wide_ranges_cannot_be_ranked(monkeypatch):
    # each sync read once per 10 steps saves 9/10 of its wait: 0.225 and 0.18 ms; with the GPU
    # model's error up to x2 each range reaches twice its figure: 0.225-0.45 and 0.18-0.36
    # overlap
    w = ranked_what_if([1.0] * 4, (1.0, 2.0), monkeypatch)
    rows = [(s["site"], s["saving_ms"], s["saving_low_ms"], s["saving_high_ms"], s["ranked"])
            for s in w["savings"]]  # fmt: skip
    assert rows == [("t.py:6", 0.225, 0.225, 0.45, False), ("t.py:4", 0.18, 0.18, 0.36, False)]
    assert w["ranked"] is False
    text = "\n".join(what_if_lines(report(w)))
    assert "none of these fixes can be ranked against the others: their savings' ranges" in text
    assert [s["rank"] for s in w["savings"]] == [1, 1]
    assert (
        "\n  1=        225 µs  225-450 µs     9%  t.py:6  read the value once per 10 steps\n"
        in text
    )
    assert (
        "\n  1=        180 µs  180-360 µs     7%  t.py:4  read the value once per 10 steps\n"
        in text
    )
    assert text.startswith("What if (PREDICTED for T4; ")


def test_savings_far_apart_are_ranked(monkeypatch):
    # the same step, the model's error x1.0-1.1: 0.225-0.2475 and 0.18-0.198 do not overlap
    w = ranked_what_if([1.0] * 4, (1.0, 1.1), monkeypatch)
    assert [s["ranked"] for s in w["savings"]] == [True, True] and w["ranked"] is True
    assert [s["rank"] for s in w["savings"]] == [1, 2]
    text = "\n".join(what_if_lines(report(w)))
    assert "cannot be ranked" not in text and "=" not in text
    assert "\n  1         225 µs  225-2" in text and "\n  2         180 µs  180-198 µs" in text


def test_the_hosts_spread_widens_the_step_not_a_wait_that_is_all_gpu_time(monkeypatch):
    # the model exact (x1.0), the host 0.5x-1.5x between steps (median 1.0 ms)
    w = ranked_what_if([0.5, 1.0, 1.5], (1.0, 1.0), monkeypatch)
    lows = {s["site"]: (s["saving_low_ms"], s["saving_high_ms"]) for s in w["savings"]}
    assert lows["t.py:6"] == (0.225, 0.225) and lows["t.py:4"] == (0.18, 0.18)
    # each sync waits for a kernel queued just before it: its wait is that kernel's GPU time,
    # whatever the host's speed; the step (2.45 ms) is 0.5 + 0.2 + 0.5 + 0.25 fast and
    # 1.5 + 0.2 + 1.5 + 0.25 slow
    assert (w["unprofiled_low_ms"], w["unprofiled_high_ms"]) == (1.45, 3.45)


def test_ranks_are_shared_only_by_figures_that_cannot_be_told_apart():
    # largest first: A 50-60 and B 45-55 overlap; C 10-40 is below both; D 30-35 overlaps C;
    # E 1-2 is below everything
    spans = [(50.0, 60.0), (45.0, 55.0), (10.0, 40.0), (30.0, 35.0), (1.0, 2.0)]
    assert tiers(spans) == [1, 1, 3, 3, 5]
    # a wide range across a cut keeps the figures on both sides together: B's 5-100 overlaps
    # every one (C, though not B's neighbour, overlaps A)
    assert tiers([(50.0, 60.0), (5.0, 100.0), (40.0, 45.0)]) == [1, 1, 1]
    assert tiers([(1.0, 1.0), (1.0, 1.0)]) == [1, 1] and tiers([]) == []


def test_the_summary_states_both_parts_and_always_says_predicted(monkeypatch):
    monkeypatch.setitem(validation.CHECKED, "T4", Checked(1.2, 1.5, 3, False))
    steps = steps_with_host([1.0 + i / 10 for i in range(10)])
    chosen = typical(steps)
    assert chosen is not None
    parts = _parts(steps, chosen[1], gpu_spec("T4"))
    predicted = {"gpu": "T4", **_prediction(parts, chosen[1])}
    w = what_if(*chosen, gpu_spec("T4"), "predicted", [], parts)
    r = report(w, predicted)
    lines = prediction_lines(r)
    assert lines == [
        "PREDICTED step on the T4: 1.9 ms (1.5-2.5 ms), in two parts:",
        f"  host: 1.4 ms per step (1.0-1.8 ms, p10-p90 of 10 steps), MEASURED on this CPU, "
        f"{cpu_name()}, not on the T4's host",
        "  GPU model: 500 µs busy per step (500-750 µs); unvalidated: off by x1.20-1.50 (true/predicted) against 3 published "
        "step times",
    ]
    line = unprofiled_line(r)
    assert line is not None and "(1.5-2.5 ms) (PREDICTED for T4" in line
    assert all("PREDICTED" in x for x in (what_if_lines(r)[0], lines[0]))


def test_a_report_without_parts_renders_as_before():
    assert prediction_lines(report({}, {"gpu": "T4"})) == []
    assert span_ms(0.85, 1.2) == "850 µs-1.2 ms" and span_ms(1.1, 3.3) == "1.1-3.3 ms"
    assert span_ms(2.0, 2.0) == "2.0 ms"


def test_with_the_gpu_named_and_no_step_the_what_if_says_why_not_which_flags():
    r = report({}, {"gpu": "H100-SXM"})
    (line,) = what_if_lines(r)
    assert "no step ended" in line and "optimizer.step()" in line and "--gpu" not in line
    r.predicted = None
    (line,) = what_if_lines(r)
    assert "add --gpu NAME" in line and "--fake-cuda" not in line


def test_parts_corners_are_the_four_ends():
    from profilers.timing.gpu_model.validation import ModelError

    p = Parts([1.0, 2.0, 3.0], 10.0, ModelError("T4", 0.9, 1.3, 1, False))
    assert p.corners() == [(0.5, 0.9), (0.5, 1.3), (1.5, 0.9), (1.5, 1.3)]


def test_the_host_part_is_the_typical_steps_so_the_parts_add_up_as_the_step(monkeypatch):
    monkeypatch.setitem(validation.CHECKED, "T4", Checked(1.0, 1.0, 1, True))

    def step(n: int, a_ms: float, b_ms: float) -> LoggedStep:
        return LoggedStep(n, [rec("t.py:3", KERNEL, round(a_ms * MS), 1_000),
                              rec("t.py:4", KERNEL, round(b_ms * MS), 1_000)], 0)  # fmt: skip

    # each op's median host time is 1 ms (the typical step: 2 ms of host work), while the
    # steps' sums are 2, 4 and 4 ms (median 4): the part is the typical step's 2 ms, its range
    # the sums' spread around their median (x0.5-1.0): 1-2 ms
    steps = [step(1, 1.0, 1.0), step(2, 3.0, 1.0), step(3, 1.0, 3.0)]
    chosen = typical(steps)
    assert chosen is not None
    d = _prediction(_parts(steps, chosen[1], gpu_spec("T4")), chosen[1])
    assert (d["host"]["ms"], d["host"]["low_ms"], d["host"]["high_ms"]) == (2.0, 1.0, 2.0)
    assert d["step"]["ms"] == 2.001  # the host's 2 ms, then the last 1 µs kernel
