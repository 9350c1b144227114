"""The right fix on the right line: a copy's hint follows where its tensor came from
(a loader's batch, a factory on the host, a parameter moved once, a pinned buffer), how often
is said from the steps, neighbours with one fix are one hint, and the hints are ranked by time,
the loader's included.

Each case is a small workload, run in-process on the fake GPU (``fake_cuda``) where it needs
CUDA, with the right hint asserted and the wrong one asserted absent."""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import profilers
from gpuwatch.analysis.hints import hints, how_often
from profilers import Report
from tests import conftest
from tests.profiler_helpers import line_of

needs_fake_cuda = pytest.mark.skipif(
    conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
)
DEV = "cuda:0"


def _run(work, gpu: str | None = None) -> Report:
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda(1), profilers.profile(kernel_timing=False, count_ops=True, gpu=gpu) as prof:
        work()
    return prof.report()


def _at(r: Report, marker: str) -> list:
    line = line_of(marker)
    return [h for h in hints(r) if line in (h.lines or (h.line.line,))]


def _loader(pin: bool = False, n: int = 48) -> DataLoader:
    ds = TensorDataset(torch.randn(n, 8), torch.randint(0, 2, (n,)))
    return DataLoader(ds, batch_size=4, pin_memory=pin)


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(8, 2).to(DEV)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_a_loader_batch_copy_is_told_to_pin_never_register_buffer():
    def work():
        model, opt = _model()
        for x, _y in _loader():
            x, _ = x.to(DEV), torch.empty(0)  # @copy
            model(x).sum().backward()
            opt.step()

    r = _run(work)
    line = next(s for s in r.lines if s.line == line_of("copy"))
    # 12 batches of 4 x 8 float32: 12 copies of 128 B, each a batch of the loader
    assert line.origins["loader"].count == 12 and line.origins["loader"].bytes == 12 * 128
    (h,) = _at(r, "copy")
    assert h.kind == "loader_pin"
    assert "pin_memory=True" in h.message and "non_blocking=True" in h.message
    # NB: the line ran a factory op (torch.empty): the old rule's "register_buffer" misfired
    assert "register_buffer" not in h.message and "created" not in h.kind


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_a_loader_copied_non_blocking_from_pageable_memory_is_told_to_pin_only():
    def work():
        model, opt = _model()
        for x, _y in _loader():
            x = x.to(DEV, non_blocking=True)  # @nb
            model(x).sum().backward()
            opt.step()

    r = _run(work)
    line = next(s for s in r.lines if s.line == line_of("nb"))
    assert (line.h2d.count, line.h2d.non_blocking, line.h2d.pageable) == (12, 12, 12)
    (h,) = _at(r, "nb")
    assert h.kind == "loader_pin" and "pin_memory=True" in h.message
    # the user wrote non_blocking=True: not told to add it, told why it does nothing yet
    assert "then .to(device, non_blocking=True)" not in h.message
    assert "non_blocking=True already given has no effect until the batch is pinned" in h.message
    assert "12 non_blocking" in h.evidence


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_a_pinned_loader_is_told_non_blocking_not_to_pin_and_then_nothing():
    def work():
        model, opt = _model()
        for x, y in _loader(pin=True):
            x = x.to(DEV)  # @blocking
            y = y.to(DEV, non_blocking=True)  # @async
            model(x).sum().backward()
            opt.step()

    r = _run(work)
    (h,) = _at(r, "blocking")
    assert h.kind == "loader_non_blocking" and "non_blocking=True" in h.message
    assert "pin_memory=True" not in h.message and "pin it" not in h.message
    assert _at(r, "async") == []  # pinned and non_blocking: nothing left to fix


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_a_one_time_model_move_with_no_optimizer_step_is_not_in_a_loop():
    def work():
        model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(8)])
        model.to(DEV)  # @move
        with torch.no_grad():
            for _ in range(20):
                model(torch.ones(2, 8, device=DEV))

    r = _run(work)
    assert r.steps is None  # no step ended: how often cannot be told from steps
    line = next(s for s in r.lines if s.line == line_of("move"))
    assert line.origins["parameter"].count == 16  # 8 weights and 8 biases, moved once
    assert _at(r, "move") == []
    assert not any("loop" in h.message for h in hints(r))


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_a_factory_on_the_host_then_moved_on_the_next_line_is_told_to_create_on_the_device():
    def work():
        model, opt = _model()
        for _ in range(12):
            noise = torch.randn(4, 8)  # @made
            x = noise.to(DEV)  # @moved
            model(x).sum().backward()
            opt.step()

    r = _run(work)
    (h,) = _at(r, "moved")
    made = line_of("made")
    assert h.kind == "created_on_cpu" and h.where.endswith(f":{line_of('moved')}")
    assert f":{made} is copied to the GPU every step" in h.message
    assert "device=" in h.message
    assert "pinned" not in h.message and "pin_memory" not in h.message
    assert "made by torch.randn at " in h.evidence


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_a_data_set_on_the_host_sliced_non_blocking_every_step_is_told_to_pin_it_where_made():
    def work():
        model, opt = _model()
        data = torch.randn(12 * 4, 8)  # @dataset
        for i in range(12):
            x = data[4 * i : 4 * i + 4].to(DEV, non_blocking=True)  # @slice
            model(x).sum().backward()
            opt.step()

    r = _run(work)
    (h,) = _at(r, "slice")
    made = f"{h.line.file}:{line_of('dataset')}"
    assert h.kind == "non_blocking_pageable"
    assert "no effect from pageable memory" in h.message and f".pin_memory() at {made}" in h.message
    assert "12 non_blocking from pageable memory, made by torch.randn" in h.evidence
    assert "register_buffer" not in h.message  # not a constant: a data set, read in pieces


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_labels_made_once_and_sliced_blocking_every_step_are_told_to_pin_not_to_make_on_gpu():
    def work():
        model, opt = _model()
        labels = torch.randint(0, 2, (12 * 4,))  # @labels_made
        for i in range(12):
            y = labels[4 * i : 4 * i + 4].to(DEV)  # @labels_sliced
            (model(torch.ones(4, 8, device=DEV)).sum() + y.sum()).backward()
            opt.step()

    r = _run(work)
    (h,) = _at(r, "labels_sliced")
    made = f"{h.line.file}:{line_of('labels_made')}"
    assert h.kind == "blocking_h2d" and f"made once on the CPU at {made}" in h.message
    assert ".pin_memory() at" in h.message and "non_blocking=True" in h.message
    assert "12 blocking, from a tensor torch.randint made 1 time at" in h.evidence
    assert "register_buffer" not in h.message and "device=..." not in h.message


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_a_constant_made_with_torch_tensor_is_named_as_the_user_wrote_it():
    def work():
        model, opt = _model()
        for _ in range(12):
            scale = torch.tensor(1 / 255).to(DEV)  # @constant
            (model(torch.ones(4, 8, device=DEV)) * scale).sum().backward()
            opt.step()

    r = _run(work)
    (h,) = _at(r, "constant")
    assert h.kind == "created_on_cpu" and "made from Python data at this line" in h.message
    # NB: torch.tensor(x, device=...) copies from the host all the same: the fix is to make a
    # constant once, never "device=..."
    assert "make it once before the loop" in h.message and "device=..." not in h.message
    # NB: torch.tensor(0.5) reaches the dispatcher as lift_fresh: the user never wrote that
    assert "made by torch.tensor" in h.evidence and "lift_fresh" not in h.evidence


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_numpy_data_copied_every_step_is_no_factory_of_the_host():
    import numpy as np

    def work():
        model, opt = _model()
        for i in range(12):
            batch = np.full((4, 8), float(i), dtype=np.float32)  # new data every step
            x = torch.from_numpy(batch).to(DEV)  # @numpy
            model(x).sum().backward()
            opt.step()

    r = _run(work)
    (h,) = _at(r, "numpy")
    line = h.line
    assert set(line.origins) == {"host"}  # NumPy's memory: made by no factory of torch's
    assert h.kind == "blocking_h2d" and "pinned" in h.message
    assert "torch.tensor" not in h.message + h.evidence and "device=..." not in h.message


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_a_24_byte_one_time_copy_is_not_told_to_pin():
    def work():
        model, opt = _model()
        scale = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
        scale = scale.to(DEV, non_blocking=True)  # @once
        for _ in range(12):
            model(torch.ones(4, 8, device=DEV)).sum().backward()
            opt.step()

    r = _run(work)
    line = next(s for s in r.lines if s.line == line_of("once"))
    assert (line.h2d.count, line.h2d.bytes, line.h2d.pageable) == (1, 24, 1)  # 3 x 8 B
    assert _at(r, "once") == []  # the old rule: "non_blocking=True has no effect ... pin it"


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_item_every_10th_step_is_worded_so():
    def work():
        model, opt = _model()
        for step in range(100):
            loss = model(torch.ones(4, 8, device=DEV)).sum()
            loss.backward()
            opt.step()
            if step % 10 == 0:
                total = loss.item()  # @item
                del total

    r = _run(work)
    (h,) = _at(r, "item")
    assert h.kind == "item_in_loop"
    assert "every 10th step" in h.message and "every step" not in h.message
    assert h.evidence.endswith("in 10 of 100 steps")


def test_how_often_comes_from_the_steps():
    assert how_often(152, 1513) == "every 10th step"  # 1,513 / 152 = 9.95
    assert how_often(1513, 1513) == "every step"
    assert how_often(50, 100) == "every 2nd step"
    assert how_often(4, 50) == "in 4 of 50 steps"  # 12.5: not within 3% of a whole number
    assert how_often(1, 100) == "in 1 of 100 steps"
    assert how_often(3, 0) == "each time the line runs"


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_neighbouring_lines_with_one_fix_are_one_hint():
    def work():
        model, opt = _model()
        for _ in range(12):
            a = torch.zeros(4, 8).to(DEV)  # @first
            b = torch.ones(4, 8).to(DEV)
            c = torch.full((4, 8), 2.0).to(DEV)  # @last
            model(a + b + c).sum().backward()
            opt.step()

    r = _run(work)
    made = [h for h in hints(r) if h.kind == "created_on_cpu"]
    assert len(made) == 1
    (h,) = made
    first, last = line_of("first"), line_of("last")
    assert h.where.endswith(f":{first}-{last}") and h.lines == (first, first + 1, last)
    assert "a tensor made on the CPU at this line is copied to the GPU every step" in h.message
    assert h.evidence.count("12 host->GPU copies, 1.5 KiB in all") == 3  # 12 x 128 B a line


class _Slow(Dataset):
    """Each item takes ``sleep_s`` to load: a batch of 2, twice that."""

    def __init__(self, sleep_s: float, n: int = 24) -> None:
        self.sleep_s, self.n = sleep_s, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return torch.ones(8)


def test_an_input_bound_loop_gets_the_loaders_hint_first_with_its_time():
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(_Slow(0.01), batch_size=2)
    with profilers.profile() as prof:
        for x in loader:  # @for
            x = x * 1.0  # a CPU copy: no GPU here
            model(x).sum().backward()
            opt.step()
            if float(x.sum()) < 0:  # never
                x.item()
    r = prof.report()
    assert r.time is not None and r.time["after_first"]["verdict"] == "input-bound"
    first = hints(r)[0]
    assert first.kind == "input_bound" and first.where.endswith(f":{line_of('for')}")
    assert "num_workers=N" in first.message and "persistent_workers=True" in first.message
    assert "pin_memory" not in first.message  # nothing is copied to a GPU: pinning saves nothing
    # 2 items of 10 ms a batch: 20 ms of input wait per step, measured. Tolerance: sleep
    # overshoots and this 2-core machine is shared, so from 19 ms to 60 ms.
    assert 19.0 <= first.cost_ms <= 60.0
    assert first.evidence.startswith("it costs ") and "of host time per step (" in first.evidence
    assert "% of the step, measured)" in first.evidence
    assert (
        "DataLoader(num_workers=0, pin_memory=False, persistent_workers=False, batch_size=2)"
        in (first.evidence)
    )


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_an_input_bound_prediction_ranks_the_loader_first_labelled_predicted():
    def work():
        model, opt = _model()
        for x in DataLoader(_Slow(0.005, n=16), batch_size=2, num_workers=0):  # @pulls
            x = x.to(DEV)
            model(x).sum().backward()
            opt.step()

    r = _run(work, gpu="H100")
    first = hints(r)[0]
    assert first.kind == "input_bound" and first.where.endswith(f":{line_of('pulls')}")
    assert "PREDICTED for H100-SXM" in first.evidence and "measured" not in first.evidence
    assert first.rank_ms == max(h.rank_ms for h in hints(r))
    # the batch is copied from pageable memory: the loader's hint says to pin it too
    assert "pin_memory=True" in first.message


def test_a_loader_with_workers_is_told_what_it_lacks():
    from gpuwatch.analysis.hints import loader_hint
    from profilers import Line

    line = Line(
        "train.py",
        5,
        "main",
        loader={
            "num_workers": 2,
            "pin_memory": True,
            "persistent_workers": False,
            "prefetch_factor": 2,
            "batch_size": 32,
            "iterators": 3,
            "batches": 300,
        },
    )
    h = loader_hint(line, {"train.py:5": line})
    assert "raise num_workers (now 2) and prefetch_factor (now 2)" in h.message
    assert "persistent_workers=True: each of the 3 epochs started its workers anew" in h.message
    assert "pin_memory" not in h.message  # it pins already
    kept = Line("train.py", 5, "main", loader={**line.loader, "persistent_workers": True})
    assert "persistent_workers" not in loader_hint(kept, {}).message


SPIN_S = 0.06
"""Host work of known cost per step: long enough for the gap sampler to name its line."""


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_a_launch_bound_hint_says_when_torch_compile_ran_eager():
    """``torch.compile(model, mode="reduce-overhead")`` under ``--fake-cuda --gpu H100``:
    compiled code runs eager under the fake GPU's mode, the steps are launch-bound, and the
    hint told the user to torch.compile, CUDA graphs included, as if they had not."""

    def spin_steps(fn) -> None:
        x, h = torch.ones(8, device=DEV), torch.zeros(1)
        for _ in range(4):
            end = time.perf_counter() + SPIN_S
            while time.perf_counter() < end:  # host work of known cost, with host ops
                h = h + 1  # @spin
            x = fn(x)
            profilers.step()

    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2  # @double

    r = _run(lambda: spin_steps(double), gpu="H100")
    assert r.compiled is None
    (h,) = [h for h in hints(r) if h.kind == "launch_bound"]
    assert h.line.line == line_of("double")  # the GPU's idle is charged to its next launch
    assert "torch.compile the model" in h.message and "ran eager" not in h.message

    r = _run(lambda: spin_steps(torch.compile(double, mode="reduce-overhead")), gpu="H100")
    assert r.compiled is not None and r.compiled.ran_eager and r.compiled.eager_calls == 4
    (h,) = [h for h in hints(r) if h.kind == "launch_bound"]
    assert "torch.compile ran eager in this profile (under --fake-cuda's dispatch mode)" in (
        h.message
    )
    assert "not the compiled program's" in h.message


@pytest.mark.parametrize(
    ("frame", "knob"),
    [
        ("transformers/trainer.py", "TrainingArguments(torch_compile=True)"),
        ("lightning/pytorch/core/hooks.py", "torch.compile(model) before trainer.fit(model)"),
        ("accelerate/data_loader.py", "Accelerator(dynamo_backend='inductor')"),
        ("mylib/loop.py", None),
    ],
)
def test_a_launch_bound_framework_line_is_told_the_frameworks_compile_knob(frame, knob):
    """``trainer.train()`` launch-bound under ``--gpu H100`` was told 'torch.compile the
    model or this function': a line that hands its step to HF's Trainer, Lightning or
    accelerate compiles through the framework's own setting."""
    from gpuwatch.analysis.hints import compile_knob
    from profilers import Line
    from profilers.libraries import LibraryFrame

    line = Line("train.py", 12, "<module>", library=(LibraryFrame(frame, 10, "step"),))
    if knob is None:
        assert compile_knob(line) == ""
    else:
        assert knob in compile_knob(line)
    assert compile_knob(Line("train.py", 12, "<module>")) == ""


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_a_small_input_wait_the_what_if_can_save_gets_the_loaders_hint():
    """HF's Trainer under ``--gpu H100 --what-if``: the what-if's first row overlapped the
    loader (4% of the step) while the Hints had no loader hint (under TIME_SHARE_PCT)."""
    from profilers.fake_cuda.harness import fake_cuda

    spin_s = 0.15  # host work of known cost per step: the loader's ~2 ms is 1% of it

    def work():
        model, opt = _model()
        loader = DataLoader(_Slow(0.0005, n=12), batch_size=2, pin_memory=True)
        for x in loader:  # @slow_for
            x = x.to(DEV, non_blocking=True)  # no sync: the spin is host work, not a refill
            end = time.perf_counter() + spin_s
            while time.perf_counter() < end:
                pass
            model(x).sum().backward()
            opt.step()

    with (
        fake_cuda(1),
        profilers.profile(kernel_timing=False, count_ops=True, gpu="H100", what_if=True) as prof,
    ):
        work()
    r = prof.report()
    assert r.what_if is not None
    where = f"tests/test_hints_origins.py:{line_of('slow_for')}"
    overlap = [s for s in r.what_if.savings if s["kind"] == "overlap_input"]
    assert [s["site"] for s in overlap] == [where] and overlap[0]["saving_ms"] > 0
    from gpuwatch.analysis.hints import TIME_SHARE_PCT
    from gpuwatch.analysis.line_costs import cause_costs

    share_pct = cause_costs(r)[where]["input"][1]
    assert 0 < share_pct < TIME_SHARE_PCT  # under the share a hint needed before
    assert r.time is not None and r.time["steps"][-1]["verdict"] == "launch-bound"
    loader = [h for h in hints(r) if h.kind == "input_bound"]
    assert [h.where for h in loader] == [where]
    assert "DataLoader(num_workers=N)" in loader[0].message
