"""Input iterators other than the DataLoader: ``profilers.input()`` in the script,
``inputs=`` / ``--input`` by dotted name (a class's ``__next__``, an iterable class's iterators,
a generator function's results), each wait charged to the line that pulls the item, exactly as
a DataLoader's batches are; nested inputs counted once; names that time nothing refused in one
line before anything is patched.

NB: the tolerance: ``time.sleep`` never returns early, so each step's input wait at the ``for``
line is at least the sleep (exact lower bound); a loaded 2-core machine oversleeps by a few ms,
so the median step's wait must be under the sleep + 10 ms."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import profilers
from profilers import InputNotFound, registry

from .helpers import gpuwatch_here

SLEEP_S = 0.02
STEPS = 5


def _sleepy(n: int) -> Iterator[torch.Tensor]:
    for _ in range(n):
        time.sleep(SLEEP_S)
        yield torch.ones(4)


def _train(batches: Any) -> int:
    """Steps fed by ``batches``; returns the line of its ``for``."""
    w = torch.zeros(4, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    for x in batches:  # the line that pulls the batch
        (w * x).sum().backward()
        opt.step()
    return _train.__code__.co_firstlineno + 4


def _not_input_bound_at(report: Any, line: int) -> str | None:
    """Why ``report`` is not input-bound with each step's wait at ``line`` (None: it is)."""
    t = report.time
    assert t is not None and t["steps_closed"] == STEPS
    where = f"tests/test_time_inputs.py:{line}"
    inputs = []
    for step in t["steps"][1:]:  # the first also holds the profile's start
        if step["verdict"] != "input-bound":
            return f"step {step['step']}: {step['verdict']} {step['host_ms']}"
        top = step["lines"][0]
        assert top["site"] == where, step
        assert top["input_ms"] >= SLEEP_S * 1000  # never less than the sleep
        assert step["host_ms"]["input"] == top["input_ms"]  # all of it at the for line
        inputs.append(top["input_ms"])
    if statistics.median(inputs) >= SLEEP_S * 1000 + 10:
        return f"median wait {statistics.median(inputs)} ms"
    return None


def _input_bound_at(run: Callable[[], tuple[Any, int]]) -> Any:
    """``run()`` (a report and its for line) is input-bound there. NB: a loaded machine can
    stall one step's host work past the 20 ms sleep: up to three tries, each one whole."""
    errors = []
    for _attempt in range(3):
        report, line = run()
        why = _not_input_bound_at(report, line)
        if why is None:
            return report
        errors.append(why)
    raise AssertionError(f"not input-bound, each try: {errors}")


def _profiled(batches: Callable[[], Any], **options: Any) -> Callable[[], tuple[Any, int]]:
    def run() -> tuple[Any, int]:
        with profilers.profile(**options) as prof:
            line = _train(batches())
        return prof.report(), line

    return run


@pytest.mark.parametrize("kernel_timing", [True, False], ids=["every-op", "fast-path"])
def test_a_marked_generator_is_input_bound_at_the_for_line(kernel_timing: bool):
    run = _profiled(lambda: profilers.input(_sleepy(STEPS)), kernel_timing=kernel_timing)
    _input_bound_at(run)


def test_a_marked_generator_function_times_every_generator_it_makes():
    @profilers.input
    def batches(n: int) -> Iterator[torch.Tensor]:
        yield from _sleepy(n)

    assert batches.__name__ == "batches"
    _input_bound_at(_profiled(lambda: batches(STEPS)))


class _Sleepy(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(SLEEP_S)
        return torch.ones(4)


def test_a_marked_iterator_over_a_dataloader_counts_the_wait_once_at_the_outer_line():
    loader = DataLoader(_Sleepy(), batch_size=None)

    def moved() -> Iterator[torch.Tensor]:
        for x in loader:  # timed by the DataLoader patch, but inside a marked input: not again
            yield x * 1

    report = _input_bound_at(_profiled(lambda: profilers.input(moved())))
    inner = f"tests/test_time_inputs.py:{moved.__code__.co_firstlineno + 1}"
    assert all(s["site"] != inner for s in report.time["run"]["lines"] if s["input_ms"] > 0)


def test_outside_a_profile_the_wrapper_passes_items_len_and_attributes_through():
    loader = DataLoader(list(range(6)), batch_size=2)
    wrapped = profilers.input(loader)
    assert len(wrapped) == 3 and wrapped.batch_size == 2
    assert [b.tolist() for b in wrapped] == [[0, 1], [2, 3], [4, 5]]
    it = profilers.input(iter([1, 2]))
    assert iter(it) is it and list(it) == [1, 2]
    with pytest.raises(TypeError, match="takes an iterable"):
        profilers.input(3)


SLOW_ITERS = '''\
import time
import torch

SLEEP_S = {sleep}


class Batches:
    """An iterator class of the user's (a DALI-style iterator)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n == 0:
            raise StopIteration
        self.n -= 1
        time.sleep(SLEEP_S)
        return torch.ones(4)


class Stream:
    """An iterable class (a dataset that is iterated): its __iter__ makes generators."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for _ in range(self.n):
            time.sleep(SLEEP_S)
            yield torch.ones(4)


def batches(n):
    for _ in range(n):
        time.sleep(SLEEP_S)
        yield torch.ones(4)
'''


@pytest.fixture
def slow_iters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "slow_iters_h30.py").write_text(SLOW_ITERS.format(sleep=SLEEP_S))
    monkeypatch.syspath_prepend(str(tmp_path))
    import slow_iters_h30

    yield slow_iters_h30
    sys.modules.pop("slow_iters_h30", None)


@pytest.mark.parametrize("name", ["Batches", "Stream", "batches"])
def test_an_input_named_by_dotted_name_is_timed_and_put_back(slow_iters: Any, name: str):
    before = {k: vars(slow_iters.Batches).get(k) for k in ("__next__", "__iter__")}
    changed: list[str] = []

    def made() -> Any:
        changed[:] = registry.installed()
        # looked up at the call, as a script's `from slow_iters import ...` after the start
        return getattr(slow_iters, name)(STEPS)

    _input_bound_at(_profiled(made, inputs=(f"slow_iters_h30.{name}",)))
    target = {"Batches": "Batches.__next__", "Stream": "Stream.__iter__", "batches": "batches"}
    assert f"profiler: input: slow_iters_h30.{target[name]}" in changed
    assert {k: vars(slow_iters.Batches).get(k) for k in ("__next__", "__iter__")} == before
    assert slow_iters.batches.__name__ == "batches" and "Stream" in repr(slow_iters.Stream)


def test_unnamed_the_same_iterator_is_host_work_not_input(slow_iters: Any):
    with profilers.profile() as prof:
        _train(slow_iters.Batches(STEPS))
    run = prof.report().time["run"]
    assert run["host_ms"]["input"] == 0 and run["verdict"] == "host-bound"  # no GPU work


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("no_such_module_h30.Batches", "names no module that can be imported"),
        ("slow_iters_h30.Nope", "has no 'Nope'"),
        ("slow_iters_h30.SLEEP_S", "is a float, not a class or a function"),
        ("__main__.batches", "is in the script itself"),
        ("not a name", "is not a dotted name"),
        ("builtins.range", "cannot be patched"),
    ],
)
def test_a_name_that_times_nothing_is_refused_and_nothing_stays_patched(
    slow_iters: Any, name: str, says: str
):
    with (
        pytest.raises(InputNotFound, match=says),
        profilers.profile(inputs=("slow_iters_h30.Batches", name)),
    ):
        pass
    assert registry.installed() == []
    assert not hasattr(vars(slow_iters.Batches)["__next__"], "__wrapped__")


TRAIN = """\
import torch
from slow_iters_h30 import batches

w = torch.zeros(4, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for x in batches({steps}):
    (w * x).sum().backward()
    opt.step()
"""


def test_the_cli_times_an_input_named_beside_the_script(tmp_path: Path):
    (tmp_path / "slow_iters_h30.py").write_text(SLOW_ITERS.format(sleep=SLEEP_S))
    (tmp_path / "train.py").write_text(TRAIN.format(steps=STEPS))
    try:
        done = gpuwatch_here(
            ["profile", "-q", "--json", "r.json", "--input", "slow_iters_h30.batches", "train.py"],
            tmp_path,
        )
    finally:
        sys.modules.pop("slow_iters_h30", None)
    assert done.returncode == 0, done.stderr
    import json

    report = json.loads((tmp_path / "r.json").read_text())
    assert report["options"]["inputs"] == ["slow_iters_h30.batches"]
    for step in report["time"]["steps"][1:]:
        assert step["verdict"] == "input-bound"
        assert step["lines"][0]["site"] == "train.py:6"
        assert step["lines"][0]["input_ms"] >= SLEEP_S * 1000


def test_the_cli_refuses_an_input_it_cannot_time_in_one_line(tmp_path: Path):
    (tmp_path / "train.py").write_text("print('ran')\n")
    for name, says in (
        ("no_such_module_h30.X", "names no module that can be imported ('no_such_module_h30')"),
        (
            "train.batches",
            "names the script itself, which has not run yet: mark it there with profilers.input()",
        ),
    ):
        done = gpuwatch_here(["profile", "--input", name, "train.py"], tmp_path)
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [f"gpuwatch: error: --input {name} {says}"]
        assert "ran" not in done.stdout


def test_the_input_option_reaches_the_library_keywords_and_the_rank_command_line():
    from gpuwatch.profile.options import ProfileOptions, profiler_keywords

    options = ProfileOptions.from_argv(["--input", "a.B", "--input", "c:d"])
    assert options.inputs == ("a.B", "c:d")
    assert profiler_keywords(options)["inputs"] == ("a.B", "c:d")
    assert options.to_argv() == ["--input", "a.B", "--input", "c:d"]


def test_a_loaders_own_ops_run_past_the_mode_in_its_wait():
    # NB: the dataset's indexing (64 selects a batch) and collate's stack ran through the mode,
    # at 4 us each, 3-4x the loader's own time; in the wait the fast path's key counts them now
    from torch.utils.data import TensorDataset

    from profilers.registry import installed

    ds = TensorDataset(torch.randn(64 * 4, 8))
    with profilers.profile() as prof:
        for (xb,) in DataLoader(ds, batch_size=64):
            (xb * 2).sum()
            profilers.step()
    r = prof.report()
    seen = {op for line in r.lines for op in line.op_breakdown}
    assert "select.int" not in seen and "stack.default" not in seen, seen
    assert {"mul.Tensor", "sum.default"} <= seen
    assert r.time is not None and r.time["run"]["host_ms"]["input"] > 0
    assert installed() == []  # the kernels installed at the first wait went with the profile
