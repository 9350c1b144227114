"""The measured GPU half through a whole ``profilers.profile()``: a stand-in GPU on the
host's real clock (its events run when recorded, after what its stream already holds) under fake
CUDA tensors, so the session's wiring is what is tested: the timeline set up, the device's one
anchor wait not counted as the script's sync, every step's figures in the report at the end.
The arithmetic, exact, is in tests/test_time_gpu.py."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils.data import DataLoader, Dataset

import profilers
from profilers.timing.cuda_events import TorchCuda
from tests.profiler_helpers import fake_mode, line_of, never_pinned

LOADER_S = 0.02


class _Stream:
    def __init__(self) -> None:
        self.free_ns = 0


class _Event:
    def __init__(self) -> None:
        self.at_ns: int | None = None

    def query(self) -> bool:
        return self.at_ns is not None and self.at_ns <= time.perf_counter_ns()

    def elapsed_time(self, end: _Event) -> float:
        assert self.at_ns is not None and end.at_ns is not None
        return (end.at_ns - self.at_ns) / 1e6


class ClockGpu(TorchCuda):
    """The real stream logic over a GPU whose ops take no time: an event runs when recorded.
    Its synchronize is TorchCuda's (``torch.cuda.synchronize``, which the profile patches)."""

    tensor_types = (torch.Tensor, torch.nn.Parameter, FakeTensor)

    def __init__(self) -> None:
        super().__init__()
        self._current = lambda index: (0, index, 1)
        self.record = self._record

    def make_stream(self, key: tuple[int, int, int]) -> _Stream:
        return _Stream()

    def current_device(self) -> int:
        return 0

    def new_event(self) -> _Event:
        return _Event()

    def _record(self, event: _Event, stream: _Stream) -> None:
        event.at_ns = stream.free_ns = max(time.perf_counter_ns(), stream.free_ns)


class _Slow(Dataset[int]):
    def __len__(self) -> int:
        return 3

    def __getitem__(self, i: int) -> int:
        time.sleep(LOADER_S)
        return i


def test_a_profile_measures_each_steps_gpu_half_and_its_anchor_wait_is_its_own(monkeypatch):
    waits: list[Any] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waits.append(device))
    gpu = ClockGpu()
    with profilers.profile(cuda=gpu, is_pinned=never_pinned) as prof, fake_mode():
        w = torch.ones(8, device="cuda:0")
        for i in DataLoader(_Slow(), batch_size=None):  # @for
            (w * i).sum().item()  # @item
            profilers.step()
    r = prof.report()
    # the device's first anchor, then the profile's end: the profiler's two waits, not the
    # script's (the item's three syncs are)
    assert waits == [0, 0]
    assert r.totals.syncs.by_cause == {"item": 3}
    t = r.time
    assert t is not None and t["gpu"].startswith("measured: CUDA events")
    assert [s["gpu"]["measured"] for s in t["steps"]] == ["measured"] * 3
    for step in t["steps"]:
        gpu = step["gpu"]
        # the parts add up to the step's wall time, every idle ns charged once
        assert abs(gpu["busy_ms"] + sum(gpu["idle_ms"].values()) - gpu["wall_ms"]) < 1e-5
        if step["step"] == 0:  # the fake tensors' first use (seconds) is launch-bound
            continue
        assert step["verdict"] == "input-bound", step
        top = gpu["idle_lines"][0]
        assert top["cause"] == "input" and top["site"].endswith(f":{line_of('for')}")
        assert top["ms"] >= LOADER_S * 1000
    assert t["run"]["gpu"]["covers_open_step"] is True and t["run"]["gpu"]["steps"] == 3
    timer = prof._recorder.timer  # type: ignore[union-attr]
    assert timer is not None and timer.timeline.unplaced == 0
    assert timer.timeline.anchored == 1 + 3  # the first op's, then each .item()'s


def test_the_gpus_idle_over_a_long_pause_is_the_pauses_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    with profilers.profile(cuda=ClockGpu(), is_pinned=never_pinned) as prof, fake_mode():
        w = torch.ones(8, device="cuda:0")
        for _ in range(4):
            time.sleep(0.12)  # @pause
            (w * 2).sum().item()  # @op
            profilers.step()
    t = prof.report().time
    assert t is not None
    for step in t["steps"][1:]:
        top = step["gpu"]["idle_lines"][0]
        # the sampler names a pause of 50-100 ms or more whole; tolerance 10%: a reading's
        # share of the stretch after the pause may stay with the op's line
        assert top["cause"] == "launch" and top["site"].endswith(f":{line_of('pause')}"), step
        assert top["ms"] >= 0.9 * 120
        # the trace's idle slices say the same: most of the step's idle time at the pause
        at_pause = [s for s in step["gpu"]["idle_slices"] if s["site"] == top["site"]]
        assert sum(s["ms"] for s in at_pause) >= 0.9 * 120
