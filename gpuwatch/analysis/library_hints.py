"""Hints for the copies and syncs made inside libraries, one per library frame: for the frames
of well-known frameworks (HF's Trainer and ``generate()``, Lightning, accelerate, torch's
GradScaler) the setting that turns the cost off or down; for any other, the frame that made it.

A frame is known by the end of its file's path and its function, or by its line of code, never
by its line number: the knob is found wherever a release moved the line. Each knob was read in
the source of the release named beside it (transformers 5.24.0, lightning 2.6.6, accelerate
1.15.0, torch 2.13.0). Pure functions of a :class:`profilers.Report`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuwatch.analysis.hints import Hint, Kind, causes_text, copies_of, hints, how_often, rate
from profilers import Line, Report
from profilers.libraries import LibraryFrame
from profilers.origins import LOADER, PARAMETER

#: An unknown library frame is worth a hint from this many syncs on.
HOT = 10


@dataclass(frozen=True)
class Frame:
    """What one library frame made, summed over the user's lines that reached it."""

    file: str
    line: int
    function: str
    source: str
    syncs: int
    by_cause: dict[str, int]
    copies: int
    pageable: int
    user_lines: tuple[Line, ...]  # the user's lines that reached it (--lib-lines: its own)
    lines: tuple[int, ...] = ()  # every line of its function, where one knob's were grouped

    @property
    def where(self) -> str:
        lines = ",".join(str(n) for n in self.lines or (self.line,))
        return f"{self.file}:{lines} {self.function}"

    @property
    def library(self) -> str:
        """The package, from the path: ``transformers``, ``lightning``, ``torch``."""
        return self.file.split("/", 1)[0]


@dataclass(frozen=True)
class Knob:
    """A well-known library frame and what to set there."""

    kind: str
    files: tuple[str, ...]  # path endings inside site-packages (lightning's two namespaces)
    functions: tuple[str, ...] = ()  # the frame's function (any, when empty)
    source: str = ""  # a regular expression its line of code matches (any, when empty)
    advice: str | Callable[[Frame], str] = ""
    when: Callable[[Frame], bool] = lambda f: True
    """Whether the frame's counts call for the knob (batches copied from pinned memory
    without a wait need nothing)."""

    def matches(self, f: Frame) -> bool:
        return (
            f.file.endswith(self.files)
            and (not self.functions or f.function in self.functions)
            and (not self.source or re.search(self.source, f.source) is not None)
        )


def _pin_and_overlap(f: Frame) -> str:
    """accelerate's DataLoader (HF's Trainer's too) copies each batch with send_to_device."""
    parts = ["accelerate copies each batch to the GPU here"]
    if f.pageable:
        parts.append(
            f"{f.pageable:,} of the {f.copies:,} copies came from pageable memory, which cannot "
            "overlap: pin the batches (HF Trainer: TrainingArguments(dataloader_pin_memory=True), "
            "its default; accelerate: DataLoader(..., pin_memory=True))"
        )
    if f.by_cause.get("copy_to_device", 0):
        parts.append(
            "the host waits for each copy: let accelerate copy without waiting (HF Trainer: "
            "TrainingArguments(accelerator_config={'non_blocking': True}); accelerate: "
            "Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))), "
            "which needs pinned batches"
        )
    parts.append(
        "dataloader_num_workers=N (HF) / DataLoader(num_workers=N) loads and pins the next "
        "batches beside the step"
    )
    return "; ".join(parts)


def _lightning_transfer(f: Frame) -> str:
    pinned = f"{f.pageable:,} of the {f.copies:,} copies came from pageable memory: "
    return (
        "Lightning copies each batch to the GPU here (transfer_batch_to_device, "
        f"non_blocking=True); {pinned if f.pageable else ''}build your DataLoaders with "
        "pin_memory=True, so the copy overlaps the step, and num_workers=N, so batches are loaded "
        "beside it"
    )


def _table(*knobs: Knob) -> dict[str, Knob]:
    """The knobs by their hint kind, each kind registered (twice: raises)."""
    return {Kind(k.kind).name: k for k in knobs}


KNOBS: dict[str, Knob] = _table(
    # transformers/trainer.py (5.24.0) Trainer._run_epoch: `if self.args.logging_nan_inf_filter
    # and ... (torch.isnan(tr_loss_step) or torch.isinf(tr_loss_step))`: two bool() reads of
    # the loss per batch (one where it is NaN).
    Knob(
        "hf_nan_inf_filter",
        ("transformers/trainer.py",),
        source=r"\bisnan\b|\bisinf\b",
        advice="HF's Trainer checks every batch's loss for NaN/inf on the host (isnan, then "
        "isinf: each waits for the GPU): TrainingArguments(logging_nan_inf_filter=False) "
        "turns the check off (a NaN loss then reaches the logged average)",
    ),
    # transformers/trainer.py Trainer._maybe_log_save_evaluate: `tr_loss_scalar =
    # nested_gather(tr_loss, ...).mean().item()` and `grad_norm.item()`, each time it logs.
    Knob(
        "hf_logging_steps",
        ("transformers/trainer.py",),
        ("_maybe_log_save_evaluate",),
        r"\.item\(\)",
        "HF's Trainer reads the loss and the gradient norm with .item() each time it logs: "
        "TrainingArguments(logging_steps=N) logs every N steps (default 500), fewer reads",
    ),
    # transformers/masking_utils.py find_packed_sequence_indices, reached from
    # _preprocess_mask_arguments only `if position_ids is not None and attention_mask is None
    # and cache is None`: `(packed_sequence_mask[:, -1] == 0).all()` read on the host.
    Knob(
        "hf_packed_sequences",
        ("transformers/masking_utils.py",),
        ("find_packed_sequence_indices",),
        advice="with no attention_mask, the model checks on the host whether each batch packs "
        "several sequences (a sync every forward): pass attention_mask with each batch "
        "(the check runs only without one)",
    ),
    # transformers/generation/utils.py StopCheck.__call__: `return
    # bool(unfinished_sequences.max() == 0)` after every new token (DeferredStopCheck, which
    # reads it a step late, is used on "mps" only in 5.24.0).
    Knob(
        "hf_generate_stop",
        ("transformers/generation/utils.py",),
        source=r"unfinished_sequences\.max\(\)",
        advice="generate() asks the GPU after every new token whether all sequences are finished "
        "(its stopping criteria, read on the host: one sync per token, whatever the batch "
        "size): generate for many prompts in one call, bound the length with "
        "max_new_tokens, and keep custom StoppingCriteria on the device (return a tensor, "
        "never .item())",
    ),
    Knob(
        "accelerate_batches",
        ("accelerate/data_loader.py",),
        source=r"send_to_device",
        advice=_pin_and_overlap,
        when=lambda f: bool(f.pageable or f.syncs),
    ),
    # accelerate/accelerator.py Accelerator.gather_for_metrics: `use_gather_object or not
    # all_tensors` goes through gather_object (torch's all_gather_object: each object
    # pickled into a GPU tensor, its size and bytes read back).
    Knob(
        "accelerate_gather_for_metrics",
        ("accelerate/accelerator.py",),
        ("gather_for_metrics", "gather"),
        advice="accelerate's gather_for_metrics copies and waits here: gather tensors, not Python "
        "objects (use_gather_object=True and non-tensor inputs pickle each object through "
        "the GPU), and gather once per evaluation (accumulate predictions on the device) "
        "rather than once per batch",
    ),
    # accelerate/optimizer.py AcceleratedOptimizer.step: `self.scaler.step(self.optimizer,
    # closure)` under mixed_precision="fp16": GradScaler's found_inf read.
    Knob(
        "gradscaler_found_inf",
        ("torch/amp/grad_scaler.py", "torch/cuda/amp/grad_scaler.py", "accelerate/optimizer.py"),
        source=r"found_inf|scaler\.step",
        advice="GradScaler reads found_inf once per optimizer step (one sync per step: normal for "
        "float16, it skips steps whose gradients overflowed, and waits for the backward "
        "before the optimizer runs); bfloat16 autocast (torch.autocast('cuda', "
        "dtype=torch.bfloat16); accelerate/Lightning: mixed_precision 'bf16') needs no "
        "GradScaler and no such sync",
    ),
    # lightning/pytorch/core/hooks.py DataHooks.transfer_batch_to_device: move_data_to_device
    # (lightning/fabric/utilities/apply_func.py batch_to: non_blocking=True on CUDA).
    Knob(
        "lightning_batches",
        ("lightning/pytorch/core/hooks.py", "pytorch_lightning/core/hooks.py"),
        ("transfer_batch_to_device",),
        advice=_lightning_transfer,
        when=lambda f: bool(f.pageable or f.syncs),
    ),
    # lightning/pytorch/trainer/connectors/logger_connector/result.py
    # _ResultCollection.metrics: `metrics["pbar"][forked_name] =
    # convert_tensors_to_scalars(value)` for each metric logged with prog_bar=True, read at
    # every batch end (LoggerConnector.on_batch_end) and by the progress bar at each refresh
    # (TQDMProgressBar.on_train_batch_end: `current % self.refresh_rate == 0`).
    Knob(
        "lightning_progress_bar",
        ("logger_connector/result.py",),
        ("metrics",),
        r"convert_tensors_to_scalars|pbar",
        "Lightning turns each metric logged with prog_bar=True into a Python number at "
        "every batch end and again at every progress-bar refresh (each a sync): "
        "self.log(..., prog_bar=False) for what you need not watch, self.log(..., "
        "on_step=False, on_epoch=True) to read it once an epoch, or refresh the bar less "
        "often: Trainer(callbacks=[TQDMProgressBar(refresh_rate=N)])",
    ),
    # torch/nn/modules/transformer.py _detect_is_causal_mask: with a mask and no is_causal,
    # `make_causal = bool((mask == causal_comparison).all())` on every forward of
    # TransformerEncoder (is_causal) and TransformerDecoder (tgt_is_causal); nn.Transformer
    # passes its src_is_causal/tgt_is_causal down. Given either way, nothing is compared.
    Knob(
        "torch_causal_mask_check",
        ("torch/nn/modules/transformer.py",),
        ("_detect_is_causal_mask",),
        advice="nn.TransformerEncoder/TransformerDecoder compare the attention mask you pass with "
        "a causal mask on every forward (bool((mask == causal).all()): a sync) because "
        "is_causal was not given: pass it with the mask, encoder(x, mask=mask, "
        "is_causal=True) for a causal mask (False for any other); TransformerDecoder: "
        "tgt_is_causal=; nn.Transformer: src_is_causal=/tgt_is_causal=",
    ),
)


def library_frames(report: Report) -> list[Frame]:
    """Every library frame, summed over the user's lines that reached it, most syncs first."""
    found: dict[tuple[str, int], list[Frame]] = {}
    for s in report.lines:
        for lf in s.library:
            found.setdefault(lf.key, []).append(_frame(lf, s))
    merged = [_merge(frames) for frames in found.values()]
    return sorted(merged, key=lambda f: (-f.syncs, -f.copies, f.file, f.line))


def _frame(at: LibraryFrame | Line, s: Line) -> Frame:
    """What ``at``, a library frame of the user's line ``s`` or a line itself, made."""
    if isinstance(at, Line):
        syncs, by_cause, copies = at.syncs.count, at.syncs.by_cause, copies_of(at)
        pageable = sum(at.copies(w).pageable for w in ("h2d", "d2h"))
    else:
        syncs, by_cause, copies, pageable = at.syncs, at.by_cause, at.copies, at.pageable
    return Frame(
        at.file, at.line, at.function, at.source, syncs, dict(by_cause), copies, pageable, (s,)
    )


@dataclass(frozen=True)
class LibraryHint(Hint):
    """A hint about a library frame: ``where`` names the frame, then the user's lines."""

    frame: str = ""  # ``transformers/trainer.py:1919 _run_epoch``
    callers: tuple[str, ...] = ()  # the user's lines that reached it (``train.py:31``)

    @property
    def where(self) -> str:
        if not self.callers or self.callers == (self.frame.split(" ", 1)[0],):
            return self.frame
        return f"{self.frame} (inside {', '.join(self.callers)})"


def library_hints(report: Report, steps: int) -> list[LibraryHint]:
    """One hint per library frame: the knob of a known one, whatever its count; any other
    where it waited often (:func:`_repeated_reads`)."""
    out: list[LibraryHint] = []
    asked = report.options.profile
    if asked is not None and asked.lib_lines:
        # under --lib-lines the lines are the library frames themselves: only a known one gets
        # a hint (a user's file and a library's look alike here)
        frames, generic = [_frame(s, s) for s in report.lines], False
    else:
        frames, generic = library_frames(report), True
    for f, knob in _grouped(frames):
        line = max(f.user_lines, key=lambda s: (s.syncs.count, s.bytes_moved))
        if knob is not None:
            if not knob.when(f):
                continue
            kind = knob.kind
            message = knob.advice if isinstance(knob.advice, str) else knob.advice(f)
        elif generic and f.file == CHECKPOINT_FILE:
            # NB: torch.save copies every storage to the host once (and torch.load back): no
            # setting of torch turns that off; only how often the script saves is the user's,
            # and a save made when the validation loss improves is the script's choice
            if steps < 2 or how_often(line.steps_active, steps) != "every step":
                continue
            kind = CHECKPOINT_OFTEN.name
            message = CHECKPOINT_OFTEN.words.format(line=line, steps=steps)
        elif generic and _repeated_reads(f, line, steps):
            kind, what = LIBRARY_SYNCS.name, f.source or f.function
            message = LIBRARY_SYNCS.words.format(f=f, line=line, what=what)
        else:
            continue
        callers = tuple(dict.fromkeys(f"{s.file}:{s.line}" for s in f.user_lines))
        ranks = len(report.ranks or [0])  # a merged report's counts are the ranks' summed
        out.append(
            LibraryHint(
                kind, line, message, _evidence(f, steps, ranks), frame=f.where, callers=callers
            )
        )
    return out


CHECKPOINT_OFTEN = Kind(
    "checkpoint_often",
    words="torch.save copies every tensor to the host and waits for each copy, in "
    "{line.steps_active:,} of {steps:,} steps, at your line {line.file}:"
    "{line.line}: save every N steps or once an epoch, not every step",
)
LIBRARY_SYNCS = Kind(
    "library_syncs",
    words="{f.library} waits for the GPU here, inside your line {line.file}:{line.line}: "
    "look for a setting of {f.library} that controls `{what}` (gpuwatch knows no knob for "
    "this frame)",
)

#: torch.save's and torch.load's copies of each storage are made here (``_save``, ``_load``).
CHECKPOINT_FILE = "torch/serialization.py"


def _grouped(frames: list[Frame]) -> list[tuple[Frame, Knob | None]]:
    """The frames that made anything, each with its knob; a function's frames with one knob as one
    (HF's two ``.item()`` lines of ``_maybe_log_save_evaluate``), where its first frame was."""
    groups: dict[object, tuple[Knob | None, list[Frame]]] = {}
    for f in frames:
        if f.syncs or f.copies:
            knob = next((k for k in KNOBS.values() if k.matches(f)), None)
            key = id(f) if knob is None else (knob.kind, f.file, f.function)
            groups.setdefault(key, (knob, []))[1].append(f)
    return [(_merge(fs) if knob else fs[0], knob) for knob, fs in groups.values()]


def _repeated_reads(f: Frame, line: Line, steps: int) -> bool:
    """Whether an unknown frame is worth a hint: :data:`HOT` syncs or more (or an ``.item()``
    per step: one right after the library's own sync waits little, yet waits), not a line that
    ran once (``model.to(device)``), nor the copies of the model's parameters or of a loader's
    batches (the line's own hint is the fix there: pin the DataLoader the user built)."""
    if f.syncs < HOT and not (steps >= 2 and f.by_cause.get("item", 0) >= steps):
        return False
    copies_only = set(f.by_cause) == {"copy_to_device"}
    if copies_only and any(
        o in line.origins and f.copies <= line.origins[o].count for o in (PARAMETER, LOADER)
    ):
        return False
    return not copies_only or (steps >= 2 and line.steps_active != 1)


def owned_by_libraries(s: Line) -> bool:
    """Whether every copy and sync of the user's line ``s`` was made inside libraries (its
    own hints, "keep the value on the device", would be about code the user did not write)."""
    if not s.library:
        return False
    syncs = sum(f.syncs for f in s.library)
    copies = sum(f.copies for f in s.library)
    return syncs == s.syncs.count and copies == copies_of(s)


#: The hints of what a line's time went to, not of its copies and syncs: never a library's.
TIME_KINDS = frozenset({"launch_bound", "input_bound"})


def _checkpoint_only(s: Line) -> bool:
    return owned_by_libraries(s) and all(f.file == CHECKPOINT_FILE for f in s.library)


def all_hints(report: Report) -> list[Hint]:
    """The report's hints (:func:`gpuwatch.analysis.hints.hints`) with the library frames' (the
    summary's and the HTML's)."""
    steps = int(report.steps["count"]) if report.steps else 0
    return with_library_hints(report, hints(report), steps)


def with_library_hints(report: Report, found: list[Hint], steps: int) -> list[Hint]:
    """``found`` (:func:`hints`' hints of the lines, ranked) with the library frames' hints,
    which come where their line's first hint was (the rest after, most syncs first). A line
    whose every copy and sync a library made keeps only its library frames' hints, and so does
    a known frame's line under ``--lib-lines``."""
    extra = library_hints(report, steps)
    # NB: a line whose every copy and sync torch.save/torch.load made is a checkpoint's: its
    # ".cpu() in a loop" would be about torch's pickler; the checkpoint's own hint, if any,
    # speaks for it
    found = [h for h in found if h.kind in TIME_KINDS or not _checkpoint_only(h.line)]
    by_line: dict[tuple[str, int], list[Hint]] = {}
    for lh in extra:
        by_line.setdefault(lh.line.key, []).append(lh)
    covered = {s.key for lh in extra for s in report.lines if f"{s.file}:{s.line}" in lh.callers}
    # NB: under --lib-lines a known frame is a line: its ".item() in a loop" is the library's
    asked = report.options.profile
    known = {lh.line.key for lh in extra} if asked is not None and asked.lib_lines else set()
    out: list[Hint] = []
    for h in found:
        if h.kind in TIME_KINDS:
            # NB: the time the line costs (its launches, its loader's waits) is the line's
            # whoever made its copies: it keeps its hint, at its rank (trainer.train()'s
            # launch-bound 29 ms per step came first, not dropped with its .item()s)
            out.append(h)
            continue
        out += by_line.pop(h.line.key, [])
        if h.line.key in known or (h.line.key in covered and owned_by_libraries(h.line)):
            continue
        out.append(h)
    for rest in by_line.values():
        out += rest
    return out


def _evidence(f: Frame, steps: int, ranks: int) -> str:
    """What the frame made; per step per rank where ``ranks`` were merged (counts summed)."""
    parts = []
    if f.syncs:
        parts.append(f"{f.syncs:,} syncs ({causes_text(f.by_cause)})")
    if f.copies:
        parts.append(f"{f.copies:,} copies")
    text = " and ".join(parts) + f" made at {f.where}"
    if steps >= 2:
        text += f"; {rate(f.syncs, steps * ranks, 'sync', 'syncs')} and "
        text += f"{rate(f.copies, steps * ranks, 'copy', 'copies')} per step"
        text += " per rank" if ranks > 1 else ""
    lines = ", ".join(dict.fromkeys(f"{s.file}:{s.line}" for s in f.user_lines))
    return f"{text}; from {lines}"


def _merge(frames: list[Frame]) -> Frame:
    first = frames[0]
    by_cause: Counter[str] = Counter()
    for f in frames:
        by_cause.update(f.by_cause)
    return replace(
        first,
        syncs=sum(f.syncs for f in frames),
        by_cause=dict(by_cause),
        copies=sum(f.copies for f in frames),
        pageable=sum(f.pageable for f in frames),
        user_lines=tuple({s.key: s for f in frames for s in f.user_lines}.values()),
        lines=tuple(sorted({n for f in frames for n in f.lines or (f.line,)})),
    )
