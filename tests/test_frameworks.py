"""Real framework programs under ``gpuwatch profile --fake-cuda``: HF's Trainer and
``generate()``, Lightning's Trainer, accelerate, timm with float16 autocast and GradScaler,
pytorch-ignite's Engine.
Each a tiny model built from a config in code (nothing downloaded), a few steps, run by the CLI
in this process. The counts at the framework frames are exact, each derived from the installed
framework's source (the lines cited were read in transformers 5.24.0, lightning 2.6.6,
accelerate 1.15.0, timm 1.0.31, torch 2.13.0; the tests find them by their code, so a release
that moves them still passes, and one that changes what they do fails). The knob hints are
asserted where the cost is, and absent where the knob was turned.

The frameworks come with the ``frameworks`` extra (``pip install -e '.[frameworks]'``); each
test skips, saying why, where its framework does not import."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import profilers
from gpuwatch.analysis import analyze
from gpuwatch.analysis.hints import Hint
from gpuwatch.analysis.library_hints import LibraryHint, all_hints
from profilers.libraries import LibraryFrame
from profilers.records import Line
from tests import conftest
from tests.helpers import gpuwatch_here

pytestmark = [
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
    pytest.mark.fake_cuda,
]

#: Training steps of each program.
STEPS = 4


@pytest.fixture
def accelerate_state() -> Iterator[None]:
    """accelerate's process state (``PartialState``, made by HF's TrainingArguments and by
    ``Accelerator()``) is one per process: each test starts with none and leaves none, so
    that the fake GPU's device stays out of the tests after. NB: making it on a CUDA device
    runs ``nvidia-smi`` (accelerate/state.py:319 check_cuda_p2p_ib_support): a process,
    so the tests that make one are marked slow."""
    yield
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(reset_partial_state=True)


def framework(name: str) -> ModuleType:
    """``import name``, or the test skips saying why (not installed, or installed but broken:
    e.g. a torchvision built for CUDA beside a CPU-only torch stops timm's import)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: configs in code
    broken = _broken_torchvision()
    if broken is not None:  # NB: each framework imports it where it is installed
        pytest.skip(f"torchvision is installed but does not import beside this torch: {broken}")
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        pytest.skip(f"{name} does not import ({exc}): pip install -e '.[frameworks]'")
    except Exception as exc:  # noqa: BLE001 - a broken install is a reason to skip, said
        pytest.skip(f"{name} is installed but does not import: {type(exc).__name__}: {exc}")


def _broken_torchvision() -> str | None:
    """Why an installed torchvision does not import (PyPI's, built for CUDA, beside a CPU-only
    torch: "operator torchvision::nms does not exist"), None where it imports or is absent."""
    if importlib.util.find_spec("torchvision") is None:
        return None
    try:
        importlib.import_module("torchvision")
    except Exception as exc:  # noqa: BLE001 - what stops it is the reason given
        return f"{type(exc).__name__}: {exc}"
    return None


def profiled(tmp_path: Path, program: str, *options: str) -> profilers.Report:
    """``gpuwatch profile --fake-cuda OPTIONS prog.py`` in this process; its JSON report."""
    (tmp_path / "prog.py").write_text(program)
    done = gpuwatch_here(
        ["profile", "--fake-cuda", "-q", *options, "--json", "r.json", "prog.py"],
        tmp_path,
        env={"HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "0"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return profilers.Report.from_dict(json.loads((tmp_path / "r.json").read_text()))


def line_with(program: str, text: str) -> int:
    return next(i for i, t in enumerate(program.splitlines(), 1) if text in t)


def frames(line: Line, file: str, function: str) -> list[LibraryFrame]:
    return [f for f in line.library if f.file == file and f.function == function]


def one_frame(line: Line, file: str, function: str, code: str = "") -> LibraryFrame:
    found = [f for f in frames(line, file, function) if code in f.source]
    assert len(found) == 1, [(f.file, f.line, f.function, f.source) for f in line.library]
    return found[0]


def counts(f: LibraryFrame) -> tuple[int, dict[str, int], int, int]:
    """(syncs, syncs by cause, copies, pageable copies)."""
    return f.syncs, dict(f.by_cause), f.copies, f.pageable


def lines_of(fn: object) -> range:
    """The installed source lines of ``fn``."""
    body, start = inspect.getsourcelines(fn)  # type: ignore[arg-type]
    return range(start, start + len(body))


def knob_hints(report: profilers.Report) -> dict[str, LibraryHint]:
    out: dict[str, LibraryHint] = {}
    for h in all_hints(report):
        if isinstance(h, LibraryHint):
            assert h.kind not in out, f"{h.kind} twice"
            out[h.kind] = h
    return out


def line_hints(report: profilers.Report, line: int) -> list[Hint]:
    return [h for h in all_hints(report) if not isinstance(h, LibraryHint) and h.line.line == line]


# -- HF Trainer ---------------------------------------------------------------------------------

HF_TRAINER = """\
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

MASK = {mask}


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seq, vocab):
        self.ids = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        item = {{"input_ids": self.ids[i], "labels": self.ids[i]}}
        if MASK:
            item["attention_mask"] = torch.ones_like(self.ids[i])
        return item


config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=16)
model = GPT2LMHeadModel(config)
args = TrainingArguments(
    output_dir="out", max_steps={steps}, per_device_train_batch_size=2, logging_steps=2,
    report_to=[], save_strategy="no", disable_tqdm=True, {args}
)
trainer = Trainer(model=model, args=args, train_dataset=Tokens({samples}, 16, 64))
trainer.train()  # @train
"""


def hf_program(mask: bool = False, args: str = "") -> str:
    return HF_TRAINER.format(mask=mask, steps=STEPS, args=args, samples=2 * STEPS)


@pytest.mark.slow
@pytest.mark.usefixtures("accelerate_state")
def test_hf_trainer_its_loss_checks_logging_and_batch_copies_each_at_its_frame(tmp_path):
    transformers = framework("transformers")
    framework("accelerate")
    program = hf_program()
    r = profiled(tmp_path, program)
    train = next(s for s in r.lines if s.line == line_with(program, "# @train"))
    trainer = "transformers/trainer.py"
    # Trainer._run_epoch (transformers/trainer.py:1918-1921 in 5.24.0): `if
    # (self.args.logging_nan_inf_filter and not is_torch_xla_available() and
    # (torch.isnan(tr_loss_step) or torch.isinf(tr_loss_step)))`: a finite loss reads both
    # bools, 2 syncs (and 1-byte copies) a batch.
    nan = one_frame(train, trainer, "_run_epoch", "logging_nan_inf_filter")
    assert nan.line in lines_of(transformers.Trainer._run_epoch)
    assert counts(nan) == (2 * STEPS, {"item": 2 * STEPS}, 2 * STEPS, 2 * STEPS)
    # Trainer._maybe_log_save_evaluate (trainer.py:2257 and 2264): `nested_gather(tr_loss,
    # ...).mean().item()` and `grad_norm.item()` each time it logs: logging_steps=2 of 4
    # steps, 2 logs.
    logs = STEPS // 2
    loss_read = one_frame(train, trainer, "_maybe_log_save_evaluate", "tr_loss")
    norm_read = one_frame(train, trainer, "_maybe_log_save_evaluate", "grad_norm.item()")
    assert counts(loss_read) == counts(norm_read) == (logs, {"item": logs}, logs, logs)
    # masking_utils.py:761 find_packed_sequence_indices: `(packed_sequence_mask[:, -1] ==
    # 0).all()` once a forward, reached (masking_utils.py:865) only when `position_ids is not
    # None and attention_mask is None and cache is None`.
    packed = one_frame(train, "transformers/masking_utils.py", "find_packed_sequence_indices")
    assert counts(packed) == (STEPS, {"item": STEPS}, STEPS, STEPS)
    # accelerate/data_loader.py:596 DataLoaderShard.__iter__: `send_to_device(current_batch,
    # self.device, non_blocking=self._non_blocking)` (accelerate/utils/operations.py:160, a
    # pass-through: its caller is named): input_ids and labels, pinned
    # (dataloader_pin_memory=True by default), non_blocking False by default: 2 waits a batch.
    batches = one_frame(train, "accelerate/data_loader.py", "__iter__", "send_to_device")
    assert counts(batches) == (2 * STEPS, {"copy_to_device": 2 * STEPS}, 2 * STEPS, 0)
    # Once a run: Trainer._inner_training_loop's `self._tr_loss = torch.tensor(0.0,
    # device=args.device)` and _finalize_training's `self._tr_loss.item()`.
    start = one_frame(train, trainer, "_inner_training_loop", "torch.tensor(0.0")
    end = one_frame(train, trainer, "_finalize_training", ".item()")
    assert counts(start) == (1, {"copy_to_device": 1}, 1, 1)
    assert counts(end) == (1, {"item": 1}, 1, 1)
    # and nothing else: the line's every copy and sync is one of these
    reads = 2 * STEPS + 2 * logs + STEPS + 1  # the filter, the logs, the mask check, the end
    waits = 2 * STEPS + 1  # the batches, the start
    assert train.syncs.count == sum(f.syncs for f in train.library) == reads + waits
    assert train.syncs.by_cause == {"item": reads, "copy_to_device": waits}

    found = knob_hints(r)
    assert set(found) == {
        "hf_nan_inf_filter",
        "hf_logging_steps",
        "hf_packed_sequences",
        "accelerate_batches",
    }
    assert "logging_nan_inf_filter=False" in found["hf_nan_inf_filter"].message
    inside = f"(inside prog.py:{train.line})"
    assert found["hf_nan_inf_filter"].where == f"{trainer}:{nan.line} _run_epoch {inside}"
    assert "logging_steps=N" in found["hf_logging_steps"].message
    lines = sorted((loss_read.line, norm_read.line))
    assert found["hf_logging_steps"].where.startswith(
        f"{trainer}:{lines[0]},{lines[1]} _maybe_log_save_evaluate"
    )
    assert "pass attention_mask" in found["hf_packed_sequences"].message
    batch_hint = found["accelerate_batches"].message
    assert "accelerator_config={'non_blocking': True}" in batch_hint
    assert "dataloader_pin_memory" not in batch_hint  # they were pinned already
    # the line's own ".item() in a loop" is gone: the user wrote no .item()
    assert line_hints(r, train.line) == []


@pytest.mark.slow
@pytest.mark.usefixtures("accelerate_state")
def test_hf_trainer_with_its_knobs_turned_the_costs_and_their_hints_are_gone(tmp_path):
    framework("transformers")
    framework("accelerate")
    program = hf_program(
        mask=True, args="logging_nan_inf_filter=False, dataloader_pin_memory=False"
    )
    r = profiled(tmp_path, program)
    train = next(s for s in r.lines if s.line == line_with(program, "# @train"))
    assert frames(train, "transformers/trainer.py", "_run_epoch") == []
    assert frames(train, "transformers/masking_utils.py", "find_packed_sequence_indices") == []
    # three tensors a batch now, from pageable memory
    batches = one_frame(train, "accelerate/data_loader.py", "__iter__", "send_to_device")
    assert counts(batches) == (3 * STEPS, {"copy_to_device": 3 * STEPS}, 3 * STEPS, 3 * STEPS)
    found = knob_hints(r)
    # NB: the mask's padding check (fast_all) still reads the GPU once a step, a knob nobody
    # turns here: an unknown frame's read every step gets the generic hint
    assert set(found) == {"hf_logging_steps", "accelerate_batches", "library_syncs"}
    assert found["library_syncs"].frame.startswith("transformers/masking_utils.py:")
    assert "TrainingArguments(dataloader_pin_memory=True)" in found["accelerate_batches"].message


@pytest.mark.slow
@pytest.mark.usefixtures("accelerate_state")
def test_hf_trainer_under_lib_lines_its_frames_are_the_lines(tmp_path):
    framework("transformers")
    framework("accelerate")
    program = hf_program()
    r = profiled(tmp_path, program, "--lib-lines")
    assert r.options.profile is not None and r.options.profile.lib_lines
    nan = [s for s in r.lines if s.file == "transformers/trainer.py" and s.function == "_run_epoch"]
    assert len(nan) == 1 and "logging_nan_inf_filter" in nan[0].source
    assert (nan[0].syncs.count, nan[0].syncs.by_cause) == (2 * STEPS, {"item": 2 * STEPS})
    assert nan[0].stack[0] == f"prog.py:{line_with(program, '# @train')} <module>"
    train = next(s for s in r.lines if s.line == line_with(program, "# @train"))
    assert (train.syncs.count, train.library) == (0, ())
    found = knob_hints(r)
    assert "hf_nan_inf_filter" in found and "hf_logging_steps" in found
    assert found["hf_nan_inf_filter"].where == f"transformers/trainer.py:{nan[0].line} _run_epoch"


# -- HF generate() ------------------------------------------------------------------------------

GENERATE = """\
import torch
from transformers import GPT2Config, GPT2LMHeadModel

config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=32,
                    bos_token_id=0, eos_token_id=63)
model = GPT2LMHeadModel(config).to("cuda").eval()
ids = torch.randint(0, 63, (2, 5), generator=torch.Generator().manual_seed(0)).to("cuda")
kw = dict(max_new_tokens={tokens}, min_new_tokens={tokens}, do_sample=False, pad_token_id=0)
model.generate(ids, attention_mask=torch.ones_like(ids), **kw)  # @generate
"""


@pytest.mark.slow  # NB: a real model's generate(), about 4 s
def test_generate_waits_once_a_token_in_its_stop_check(tmp_path):
    framework("transformers")
    tokens = 5
    program = GENERATE.format(tokens=tokens)
    r = profiled(tmp_path, program)
    call = next(s for s in r.lines if s.line == line_with(program, "# @generate"))
    # transformers/generation/utils.py:396 StopCheck.__call__: `return
    # bool(unfinished_sequences.max() == 0)` after every new token, whatever the batch size
    # (DeferredStopCheck, one step late, only on "mps").
    stop = one_frame(call, "transformers/generation/utils.py", "__call__", "unfinished_sequences")
    assert counts(stop) == (tokens, {"item": tokens}, tokens, tokens)
    hint = knob_hints(r)["hf_generate_stop"]
    assert "one sync per token" in hint.message and "max_new_tokens" in hint.message


# -- Lightning ----------------------------------------------------------------------------------

LIGHTNING = """\
import torch
import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar={prog_bar})
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn({samples}, 8, generator=g), torch.randint(0, 2, ({samples},), generator=g))
trainer = L.Trainer(
    accelerator="gpu", devices=1, max_steps={steps}, logger=False, enable_checkpointing=False,
    enable_model_summary=False, callbacks=[TQDMProgressBar(refresh_rate={refresh})],
)
trainer.fit(Tiny(), DataLoader(data, batch_size=4, pin_memory={pin}))  # @fit
"""


def lightning_program(
    prog_bar: str = "True", refresh: int = 1, pin: bool = False, steps: int = STEPS
) -> str:
    return LIGHTNING.format(
        prog_bar=prog_bar, refresh=refresh, pin=pin, steps=steps, samples=4 * steps
    )


RESULT = "lightning/pytorch/trainer/connectors/logger_connector/result.py"
HOOKS = "lightning/pytorch/core/hooks.py"


def test_lightning_progress_bar_reads_and_batch_copies_each_at_its_frame(tmp_path):
    framework("lightning")
    program = lightning_program()
    r = profiled(tmp_path, program)
    fit = next(s for s in r.lines if s.line == line_with(program, "# @fit"))
    # logger_connector/result.py:492 _ResultCollection.metrics: `metrics["pbar"][forked_name] =
    # convert_tensors_to_scalars(value)` for a prog_bar=True metric (apply_func.py's
    # convert_tensors_to_scalars/to_item, pass-throughs: its caller is named), read at each batch
    # end (logger_connector.py:213 on_batch_end) and at each refresh of the bar
    # (tqdm_progress.py:279-281 on_train_batch_end: `current % self.refresh_rate == 0 or
    # current == total`): 2 a batch at refresh_rate=1.
    pbar = one_frame(fit, RESULT, "metrics", "convert_tensors_to_scalars")
    assert counts(pbar) == (2 * STEPS, {"item": 2 * STEPS}, 2 * STEPS, 2 * STEPS)
    # core/hooks.py:612 DataHooks.transfer_batch_to_device: move_data_to_device, and
    # fabric/utilities/apply_func.py:104 batch_to copies with non_blocking=True on CUDA: x and
    # y of each batch, from pageable memory, no wait.
    moved = one_frame(fit, HOOKS, "transfer_batch_to_device")
    assert counts(moved) == (0, {}, 2 * STEPS, 2 * STEPS)
    found = knob_hints(r)
    assert {"lightning_progress_bar", "lightning_batches"} <= set(found)
    bar = found["lightning_progress_bar"].message
    assert "prog_bar=False" in bar and "refresh_rate=N" in bar and "on_step=False" in bar
    assert "pin_memory=True" in found["lightning_batches"].message
    assert f"{2 * STEPS:,} of the {2 * STEPS:,} copies came from pageable memory" in (
        found["lightning_batches"].message
    )
    assert line_hints(r, fit.line) == []  # every copy and sync was Lightning's
    # in the summary and the HTML, under the frame that made it
    from rich.console import Console

    from gpuwatch.output.html import render_html
    from gpuwatch.output.text import summary

    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(summary(r, analyze(r)))
    where = f"{RESULT}:{pbar.line} metrics (inside prog.py:{fit.line})"
    assert where in out.getvalue() and "TQDMProgressBar(refresh_rate=N)" in out.getvalue()
    assert f"<code>{where}</code>" in render_html(r, analyze(r))


def test_lightning_with_a_slower_bar_and_pinned_batches(tmp_path):
    framework("lightning")
    refresh = 2
    program = lightning_program(refresh=refresh, pin=True)
    r = profiled(tmp_path, program)
    fit = next(s for s in r.lines if s.line == line_with(program, "# @fit"))
    # at each batch end (STEPS), and at the bar's refreshes: batches 2 and 4 of 4
    refreshes = len([n for n in range(1, STEPS + 1) if n % refresh == 0 or n == STEPS])
    pbar = one_frame(fit, RESULT, "metrics", "convert_tensors_to_scalars")
    assert pbar.syncs == STEPS + refreshes
    moved = one_frame(fit, HOOKS, "transfer_batch_to_device")
    assert counts(moved) == (0, {}, 2 * STEPS, 0)  # pinned: nothing to say
    assert "lightning_batches" not in knob_hints(r)


def test_lightning_without_prog_bar_reads_no_metric_per_batch(tmp_path):
    framework("lightning")
    program = lightning_program(prog_bar="False")
    r = profiled(tmp_path, program)
    fit = next(s for s in r.lines if s.line == line_with(program, "# @fit"))
    assert frames(fit, RESULT, "metrics") == []
    assert "lightning_progress_bar" not in knob_hints(r)


def test_lightning_an_epoch_metric_is_read_once_an_epoch_whatever_its_steps(tmp_path):
    """``on_step=False, on_epoch=True``: _ResultCollection._get_cache (result.py) has no value
    for it at a batch end (`on_step and result_metric.meta.on_step`), so nothing is read per
    batch; what the epoch's end reads is the same in one epoch of 4 steps as of 8."""
    framework("lightning")
    reads = []
    for steps in (STEPS, 2 * STEPS):
        program = lightning_program(prog_bar="True, on_step=False, on_epoch=True", steps=steps)
        r = profiled(tmp_path, program)
        fit = next(s for s in r.lines if s.line == line_with(program, "# @fit"))
        reads.append(one_frame(fit, RESULT, "metrics", "convert_tensors_to_scalars").syncs)
    assert reads[0] == reads[1] < STEPS


# -- accelerate ---------------------------------------------------------------------------------

ACCELERATE = """\
import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from torch.utils.data import DataLoader, TensorDataset

g = torch.Generator().manual_seed(0)
def loader(n):
    data = TensorDataset(torch.randn(n, 8, generator=g), torch.randint(0, 2, (n,), generator=g))
    return DataLoader(data, batch_size=4, pin_memory={pin})
train, evals = loader({train}), loader({evals})
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
config = DataLoaderConfiguration(non_blocking={pin})
accelerator = Accelerator(dataloader_config=config, mixed_precision="{mixed}")
model, opt, train, evals = accelerator.prepare(model, opt, train, evals)
for x, y in train:  # @train
    loss = torch.nn.functional.cross_entropy(model(x), y)
    accelerator.backward(loss)
    opt.step()  # @step
    opt.zero_grad()
correct = torch.zeros((), device=accelerator.device)
for x, y in evals:  # @evals
    with torch.no_grad():
        pred = model(x).argmax(-1)
    pred, y = accelerator.gather_for_metrics((pred, y))  # @gather
    correct += (pred == y).sum()
print(correct.item())
"""


@pytest.mark.slow
@pytest.mark.usefixtures("accelerate_state")
def test_accelerate_batch_copies_and_gather_for_metrics_on_one_process(tmp_path):
    framework("accelerate")
    eval_batches = 2
    program = ACCELERATE.format(pin=False, train=4 * STEPS, evals=4 * eval_batches, mixed="no")
    r = profiled(tmp_path, program)
    # accelerate/data_loader.py:596 DataLoaderShard.__iter__'s send_to_device: x and y of each
    # batch, pageable (DataLoader's pin_memory=False), blocking (DataLoaderConfiguration's
    # non_blocking=False): a wait each; charged to the loop's `for` line.
    for marker, batches in (("# @train", STEPS), ("# @evals", eval_batches)):
        line = next(s for s in r.lines if s.line == line_with(program, marker))
        f = one_frame(line, "accelerate/data_loader.py", "__iter__", "send_to_device")
        assert counts(f) == (2 * batches, {"copy_to_device": 2 * batches}, 2 * batches, 2 * batches)
    # gather_for_metrics on one process: accelerate/utils/operations.py gather returns the
    # tensors as they are (`PartialState().distributed_type` is NO): nothing copied or waited.
    gather = [s for s in r.lines if s.line == line_with(program, "# @gather")]
    assert all(s.syncs.count == 0 and s.bytes_moved == 0 for s in gather)
    hint = knob_hints(r)["accelerate_batches"]
    assert "DataLoader(..., pin_memory=True)" in hint.message
    assert "DataLoaderConfiguration(non_blocking=True)" in hint.message
    assert hint.callers == (
        f"prog.py:{line_with(program, '# @train')}",
        f"prog.py:{line_with(program, '# @evals')}",
    )


@pytest.mark.slow
@pytest.mark.usefixtures("accelerate_state")
def test_accelerate_pinned_and_non_blocking_batches_wait_for_nothing(tmp_path):
    framework("accelerate")
    program = ACCELERATE.format(pin=True, train=4 * STEPS, evals=8, mixed="no")
    r = profiled(tmp_path, program)
    line = next(s for s in r.lines if s.line == line_with(program, "# @train"))
    f = one_frame(line, "accelerate/data_loader.py", "__iter__", "send_to_device")
    assert counts(f) == (0, {}, 2 * STEPS, 0)
    assert "accelerate_batches" not in knob_hints(r)


@pytest.mark.slow
@pytest.mark.usefixtures("accelerate_state")
def test_accelerate_float16_steps_read_gradscalers_found_inf_once_a_step(tmp_path):
    framework("accelerate")
    program = ACCELERATE.format(pin=False, train=4 * STEPS, evals=8, mixed="fp16")
    r = profiled(tmp_path, program)
    step = next(s for s in r.lines if s.line == line_with(program, "# @step"))
    # accelerate/optimizer.py:173 AcceleratedOptimizer.step: `self.scaler.step(self.optimizer,
    # closure)`: GradScaler's found_inf read (torch/amp/grad_scaler.py:371, a sync and a copy)
    # and its replicas of inv_scale and found_inf (:33, two device copies), once a step.
    f = one_frame(step, "accelerate/optimizer.py", "step", "scaler.step")
    assert counts(f) == (STEPS, {"item": STEPS}, 3 * STEPS, STEPS)
    hint = knob_hints(r)["gradscaler_found_inf"]
    assert hint.where == f"accelerate/optimizer.py:{f.line} step (inside prog.py:{step.line})"
    assert "mixed_precision 'bf16'" in hint.message


def test_gather_for_metrics_of_objects_is_named_with_its_knob():
    """A multi-process gather of Python objects (all_gather_object: each pickled through the
    GPU) cannot run on the fake GPU's one process (its gloo group takes no GPU tensors): its
    frame as a report carries it, in an empty run's report."""
    with profilers.profile(kernel_timing=False) as prof:
        pass
    doc = prof.report().to_dict()
    none = {"count": 0, "bytes": 0, "pageable": 0, "non_blocking": 0}
    syncs = {"count": 40, "by_cause": {"item": 20, "copy_to_host": 20}}
    doc["sites"] = [
        {
            "file": "eval.py",
            "line": 12,
            "function": "evaluate",
            "source": "preds = accelerator.gather_for_metrics(preds, use_gather_object=True)",
            "h2d": none,
            "d2d": none,
            "p2p": none,
            "d2h": {**none, "count": 40, "bytes": 4000, "pageable": 40},
            "syncs": syncs,
            "kernel_time_ms": 0.0,
            "ops": 40,
            "library": [
                {
                    "file": "accelerate/accelerator.py",
                    "line": 3149,
                    "function": "gather_for_metrics",
                    "source": "data = gather_object(input_data)",
                    "copies": {"count": 40, "bytes": 4000, "pageable": 40},
                    "syncs": syncs,
                }
            ],
        }
    ]
    r = profilers.Report.from_dict(doc)
    hint = knob_hints(r)["accelerate_gather_for_metrics"]
    assert "gather tensors, not Python objects" in hint.message
    assert hint.where == "accelerate/accelerator.py:3149 gather_for_metrics (inside eval.py:12)"
    assert line_hints(r, 12) == []  # its ".cpu() in a loop" was accelerate's, not the line's


# -- timm with float16 autocast and GradScaler --------------------------------------------------

TIMM = """\
import torch
import timm

model = timm.create_model("test_vit", img_size=32, num_classes=4).to("cuda")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cuda", enabled={scaled})
g = torch.Generator().manual_seed(0)
x = torch.randn(2, 3, 32, 32, generator=g).to("cuda")
y = torch.randint(0, 4, (2,), generator=g).to("cuda")
for step in range({steps}):
    with torch.autocast("cuda", dtype=torch.{dtype}):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)  # @step
    scaler.update()
    opt.zero_grad()
"""


def test_timm_float16_autocast_and_gradscaler_read_found_inf_once_a_step(tmp_path):
    framework("timm")
    import torch

    program = TIMM.format(scaled=True, dtype="float16", steps=STEPS)
    r = profiled(tmp_path, program)
    step = next(s for s in r.lines if s.line == line_with(program, "# @step"))
    # torch/amp/grad_scaler.py:371 GradScaler._maybe_opt_step: `if not sum(v.item() for v in
    # optimizer_state["found_inf_per_device"].values())`: one read a step; and :33
    # _MultiDeviceReplicator.get: `self.master.to(device=device, non_blocking=True, copy=True)`
    # for inv_scale and found_inf (unscale_), two device copies a step.
    scaler = torch.amp.grad_scaler
    read = one_frame(step, "torch/amp/grad_scaler.py", "<genexpr>", "found_inf")
    assert read.line in lines_of(scaler.GradScaler._maybe_opt_step)
    assert counts(read) == (STEPS, {"item": STEPS}, STEPS, STEPS)
    replicas = one_frame(step, "torch/amp/grad_scaler.py", "get", "copy=True")
    assert counts(replicas) == (0, {}, 2 * STEPS, 0)
    assert (step.syncs.count, step.d2h.count, step.d2d.count) == (STEPS, STEPS, 2 * STEPS)
    # timm's model itself (a ViT: attention, layer norms, under float16) copies and waits for
    # nothing: no frame of timm's anywhere
    assert [f for s in r.lines for f in s.library if f.file.startswith("timm/")] == []
    hint = knob_hints(r)["gradscaler_found_inf"]
    assert "once per optimizer step" in hint.message and "bfloat16" in hint.message


def test_timm_bfloat16_without_a_scaler_waits_for_nothing(tmp_path):
    framework("timm")
    program = TIMM.format(scaled=False, dtype="bfloat16", steps=STEPS)
    r = profiled(tmp_path, program)
    step = next(s for s in r.lines if s.line == line_with(program, "# @step"))
    assert (step.syncs.count, step.bytes_moved, step.library) == (0, 0, ())
    assert "gradscaler_found_inf" not in knob_hints(r)


IGNITE = """
import torch
from torch import nn
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint  # imports torch.distributed.optim (TorchScript)

model = nn.Linear(8, 2).to("cuda:0")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [(torch.randn(4, 8), torch.randint(0, 2, (4,))) for _ in range(4)]


def train_step(engine, batch):
    x, y = batch[0].to("cuda:0"), batch[1].to("cuda:0")
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


trainer = Engine(train_step)
trainer.run(batches, max_epochs=1)
"""


def test_an_ignite_engine_is_profiled_with_its_step_lines(tmp_path):
    # NB: ignite imports torch.distributed.optim, whose @torch.jit.script classes call
    # torch.tensor: while gpuwatch replaced torch.tensor, the import raised and no ignite
    # program could be profiled.
    framework("ignite")
    r = profiled(tmp_path, IGNITE)
    assert r.exit_code == 0 and r.steps is not None and r.steps["count"] == 4
    item = next(ln for ln in r.lines if ln.line == line_with(IGNITE, "return loss.item()"))
    assert item.syncs.count == 4 and item.syncs.by_cause == {"item": 4}
    x = next(ln for ln in r.lines if ln.line == line_with(IGNITE, "x, y = batch[0]"))
    assert x.h2d.count == 8  # two blocking copies a step, at the user's line
