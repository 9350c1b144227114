"""The hint registry (one entry per kind: its causes, its what-if, its words) and the hints that
programs nobody here wrote got wrong: each case a report built by hand from the counts such a
program gave (a library's train function, a per-token ``int(i)``, a diffusion pipeline, a NaN
check, a checkpoint saved when the validation loss improves), and a program of each kind run
where the report alone cannot show it (a loader decoding on the training thread)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwatch.analysis.hints import KINDS, Kind, _launches_from_python, hints
from gpuwatch.analysis.library_hints import all_hints
from profilers import Line, Report
from profilers.libraries import LibraryFrame
from profilers.origins import FACTORY, LOADER, PARAMETER, OriginCount
from profilers.stats import Copies, Syncs
from profilers.timing.whatif import HINT_WHATIFS
from tests import conftest
from tests.helpers import run_gpuwatch

STEPS = 50
DECODING = Path(__file__).parent / "programs" / "slow_loader.py"


def _marked(path: Path, marker: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, t in enumerate(lines, 1) if t.rstrip().endswith(f"# @{marker}"))


def _report(*lines: Line, steps: int = STEPS) -> Report:
    return Report(command=["train.py"], steps={"count": steps, "source": "optimizer"}).with_lines(
        list(lines)
    )


def _frame(file: str, line: int, function: str, copies: int = 0, **causes: int) -> LibraryFrame:
    f = LibraryFrame(file, line, function, "x = x.to(device)")
    f.copies, f.pageable, f.by_cause = copies, copies, dict(causes)
    return f


def test_a_kind_registered_twice_raises_and_every_what_if_names_a_kind():
    with pytest.raises(ValueError, match="'item_in_loop' is registered twice"):
        Kind("item_in_loop")
    # one map, in profilers: the loader's and pinned copies' hints carry their saving too
    for name in ("loader_pin", "loader_non_blocking", "pinned_non_blocking"):
        assert KINDS[name].whatif == HINT_WHATIFS[name] == "pinned_non_blocking"
    assert KINDS["input_bound"].whatif is None and KINDS["input_bound"].causes == ("input",)


def _library_train(params: int = 62, batches: int = 200) -> Line:
    """``mylib.train(net, loader, epochs=4)``: inside it, ``net.to(device)`` once and each
    batch copied from pageable memory (a DataLoader of 4 workers, no pin_memory)."""
    return Line(
        "train.py",
        31,
        "<module>",
        "mylib.train(net, loader, epochs=4)",
        h2d=Copies(params + batches, 4096 * (params + batches), params + batches),
        syncs=Syncs(params + batches, {"copy_to_device": params + batches}),
        steps_active=STEPS,
        library=(
            _frame("mylib/fit.py", 40, "train", batches, copy_to_device=batches),
            _frame("mylib/fit.py", 22, "train", params, copy_to_device=params),
        ),
        origins={
            LOADER: OriginCount(batches, 4096 * batches, batches, 0, None, "DataLoader"),
            PARAMETER: OriginCount(params, 4096 * params, params, 0, None, None),
        },
        loader={"num_workers": 4, "pin_memory": False},
    )


def test_a_librarys_train_function_gets_the_loaders_pin_advice_never_no_knob():
    """(a) and (b): the pageable batches get the pin/non_blocking advice at the DataLoader the
    user built; the model moved once inside the library is no per-step hint."""
    found = all_hints(_report(_library_train()))
    assert [h.kind for h in found] == ["loader_pin"]
    (h,) = found
    assert "DataLoader(pin_memory=True)" in h.message
    assert "inside mylib, at mylib/fit.py:40 train" in h.message
    assert "gpuwatch knows no knob" not in h.message
    # more parameters than batches: the one-time move is still no "moved every step"
    assert [h.kind for h in all_hints(_report(_library_train(params=300)))] == ["loader_pin"]


def _burst(source: str, syncs: int = 1013) -> Line:
    return Line(
        "gen.py",
        12,
        "main",
        source,
        syncs=Syncs(syncs, {"item": syncs}),
        steps_active=1,
    )


def test_many_syncs_at_one_line_in_one_step_get_a_hint():
    """(c) 1,013 per-token ``int(i)`` in step 0: a loop inside the line, not a line run once."""
    (h,) = hints(_report(_burst("tokens = [int(i) for i in ids]")))
    assert h.kind == "item_in_loop"
    assert "1,013 times in one step" in h.message and ".tolist()" in h.message
    # a line that synced a few times in its one step is still once
    assert hints(_report(_burst("n = int(ids[0])", syncs=3))) == []
    # inside a library (a list index inside generate): the frame is named, once is no excuse
    inside = _burst("out = model.generate(ids)")
    inside = Line(
        **{**inside.__dict__, "library": (_frame("mylib/gen.py", 9, "gen", 0, item=1013),)}
    )
    assert [h.kind for h in all_hints(_report(inside))] == ["library_syncs"]


def _pipeline(op: str, images: int = 20) -> Line:
    """``pipe(prompt)`` for 20 prompts (no optimizer: no steps): each makes its noise on the
    CPU in a library helper and its scheduler's timesteps on the CPU, both copied."""
    n = 2 * images
    return Line(
        "infer.py",
        8,
        "main",
        "image = pipe(prompt).images[0]",
        h2d=Copies(n, 64 * n, n),
        syncs=Syncs(n, {"copy_to_device": n}),
        library=(
            _frame("mylib/utils.py", 70, "randn_tensor", images, copy_to_device=images),
            _frame("mylib/scheduler.py", 30, "set_timesteps", images, copy_to_device=images),
        ),
        origins={FACTORY: OriginCount(n, 64 * n, n, 0, "infer.py:8", op)},
    )


def test_a_pipelines_noise_is_told_generator_and_its_timesteps_get_no_device_hint():
    """(d) noise made on the CPU by a library helper: a CUDA generator; a scheduler's CPU
    timesteps: no fix on the user's side, no "make it on the GPU (device=)"."""
    (h,) = all_hints(_report(_pipeline("randn"), steps=0))
    assert h.kind == "created_on_cpu" and "generator=torch.Generator('cuda')" in h.message
    assert "device=...)" not in h.message
    assert [h.kind for h in all_hints(_report(_pipeline("arange"), steps=0))] == []


def test_launch_advice_only_where_python_launches():
    """(e) a backward line (autograd's engine launches in C++) and a line whose ops are its
    pageable copy get no torch.compile advice; a forward line does."""
    backward = Line("train.py", 9, "main", "loss.backward()", ops=400)
    copy = Line("train.py", 7, "main", "x = x.to(device)", ops=1, h2d=Copies(1, 4096, 1))
    forward = Line("train.py", 8, "main", "loss = model(x).sum()", ops=400)
    assert [_launches_from_python(s) for s in (backward, copy, forward)] == [False, False, True]


def test_a_nan_check_gets_no_read_it_less_often_advice():
    """(f) ``if not torch.isfinite(loss):`` decides what the script does."""
    line = Line(
        "train.py",
        20,
        "main",
        "if not torch.isfinite(loss):",
        syncs=Syncs(STEPS, {"item": STEPS}),
        steps_active=STEPS,
    )
    (h,) = hints(_report(line))
    assert h.kind == "check_on_host" and KINDS[h.kind].whatif is None
    assert "torch._assert_async" in h.message and "less often" not in h.message.split("(")[0]


def _saves(active: int) -> Line:
    n = 12 * active
    return Line(
        "train.py",
        40,
        "main",
        "torch.save(model.state_dict(), 'best.pt')",
        d2h=Copies(n, 4096 * n, n),
        syncs=Syncs(n, {"copy_to_host": n}),
        steps_active=active,
        library=(LibraryFrame("torch/serialization.py", 900, "_save"),),
    )


def test_a_checkpoint_saved_when_the_loss_improves_is_not_told_every_step():
    """(f) saved in 7 of 50 steps (when the validation loss improved): no "not every step"."""
    line = _saves(7)
    f = line.library[0]
    f.copies, f.by_cause = line.d2h.count, {"copy_to_host": line.d2h.count}
    assert all_hints(_report(line)) == []
    every = _saves(STEPS)
    f = every.library[0]
    f.copies, f.by_cause = every.d2h.count, {"copy_to_host": every.d2h.count}
    assert [h.kind for h in all_hints(_report(every))] == ["checkpoint_often"]


def test_an_item_every_step_after_a_librarys_sync_gets_a_hint():
    """(g) 5 steps, a library's ``synchronize()`` then its ``loss.item()`` every step: fewer than
    HOT syncs, but one every step."""
    steps = 5
    line = Line(
        "train.py",
        14,
        "main",
        "mylib.fit(model, loader)",
        syncs=Syncs(2 * steps, {"synchronize": steps, "item": steps}),
        steps_active=steps,
        library=(
            _frame("mylib/fit.py", 50, "fit", 0, synchronize=steps),
            _frame("mylib/fit.py", 51, "fit", 0, item=steps),
        ),
    )
    found = all_hints(_report(line, steps=steps))
    (h,) = found  # the read; the library's own synchronize, 5 in all, is no hint
    assert h.kind == "library_syncs" and "mylib/fit.py:51" in h.evidence


def _decoding(wait_ms: float) -> Line:
    """``for x in loader:`` under ``--fake-cuda`` alone (no time view): a DataLoader with no
    workers whose measured wait is ``wait_ms`` of a 1 s run, 50 batches."""
    loader = {"num_workers": 0, "pin_memory": False, "persistent_workers": False}
    return Line(
        "train.py",
        9,
        "main",
        "for x in loader:",
        loader={**loader, "batch_size": 4, "iterators": 1, "batches": 50, "wait_ms": wait_ms},
    )


def test_a_loader_waited_on_most_of_the_run_gets_its_hint_with_no_time_view():
    """(h) ``--fake-cuda`` without ``--gpu`` has no time view, yet the host's wait for the
    loader is measured at its line: most of the run there is the loader's hint, said why."""
    r = _report(_decoding(700.0)).replace(duration_s=1.0)
    assert r.time is None
    (h,) = hints(r)
    assert h.kind == "input_bound" and h.where == "train.py:9"
    assert "DataLoader(num_workers=N)" in h.message
    assert h.evidence.startswith(
        "the host waits 14.0 ms per step here for its batches (70% of the run's 1.00 s, "
        "measured on this host, no GPU time in it); DataLoader(num_workers=0"
    )
    assert h.cost_ms == pytest.approx(14.0)
    assert hints(_report(_decoding(300.0)).replace(duration_s=1.0)) == []  # not most of it


@pytest.mark.slow
@pytest.mark.fake_cuda
@pytest.mark.skipif(conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING))
def test_a_loader_decoding_on_the_training_thread_gets_its_hint_under_fake_cuda(tmp_path):
    """``gpuwatch profile --fake-cuda`` (no ``--gpu``) of a loader whose items take 2 ms each
    on the training thread, 4 a batch, for a one-layer model: the loader's hint at the ``for``
    line, never "No hints"."""
    done = run_gpuwatch(["profile", "--fake-cuda", "--json", "r.json", str(DECODING)], tmp_path)
    assert done.returncode == 0, done.stderr
    text = " ".join((done.stdout + done.stderr).split())  # rich wraps at 200 columns
    assert "No hints" not in text
    at = f"slow_loader.py:{_marked(DECODING, 'wait')} the step waits here for the DataLoader's"
    assert at in text and "DataLoader(num_workers=N)" in text
    assert "measured on this host, no GPU time in it); DataLoader(num_workers=0" in text
    doc = json.loads((tmp_path / "r.json").read_text())
    (loader,) = [s["loader"] for s in doc["sites"] if s.get("loader")]
    # 12 batches of 4 items of 2 ms: at least 96 ms waited, most of the run
    assert loader["batches"] == 12 and loader["wait_ms"] >= 96.0
    assert loader["wait_ms"] > 500.0 * doc["duration_s"]
