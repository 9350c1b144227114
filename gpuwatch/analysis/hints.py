"""Advice a user can act on, each tied to one line of their code and the numbers behind it.

Pure functions of a :class:`profilers.Report`, and of what its JSON keeps: the same report
always gives the same hints, so ``gpuwatch report run.json`` prints what the run printed.
What each hint says and how they are ranked: docs/profile.md, "Hints".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from gpuwatch import _format as fmt
from gpuwatch.analysis.line_costs import cause_costs, cost_text, measured_gpu, predicted_gpu
from profilers import Line, Report
from profilers.origins import FACTORY, HOST, LOADER, PARAMETER, PINNED, OriginCount
from profilers.sections import WhatIf
from profilers.timing.verdict import per_step as basis_of
from profilers.timing.whatif import DECIDES, HINT_WHATIFS

#: A line that ran this many times, where no step ended, is "in a hot loop".
HOT = 10
#: Bytes of float32 copies at one line worth suggesting half precision for.
HALF_PRECISION_BYTES = 64 * 1024 * 1024
#: A line whose input wait or launches take this share of the step gets a hint for it.
TIME_SHARE_PCT = 5.0
#: Where no step was timed, a loader whose measured wait is this share of the run gets its hint.
MOST_PCT = 50.0

_LOGGING = re.compile(
    r"\b(print|log|logger|logging|writer|wandb|tqdm|append|add_scalar|set_postfix)\b"
)
#: Reports written before ``origins`` existed: a line that ran one of these made a tensor.
_FACTORY_OPS = tuple(
    "randn rand. zeros ones full arange empty lift_fresh eye linspace tensor".split()
)


@dataclass(frozen=True)
class Hint:
    kind: str
    line: Line
    message: str
    evidence: str
    cost_ms: float = 0.0  # its cause's time at its line, per step (0: not measured)
    saving_ms: float = 0.0  # what its fix saves per step, replayed (``report.what_if``)
    lines: tuple[int, ...] = ()  # neighbours given the same advice, merged (``31-33``)
    saved: bool = False  # whether ``saving_ms`` was replayed (the what-if had this fix here)

    @property
    def where(self) -> str:
        if len(self.lines) > 1:
            return f"{self.line.file}:{self.lines[0]}-{self.lines[-1]}"
        return f"{self.line.file}:{self.line.line}"

    @property
    def rank_ms(self) -> float:
        """What it is ranked by: the replayed saving where there is one, else its cost."""
        return self.saving_ms if self.saved else self.cost_ms


@dataclass(frozen=True)
class Kind:
    """One kind of hint: the causes of the step's time its fix removes (its cost at its line),
    and its words and evidence, ``str.format`` templates of the fields each hint is made with."""

    name: str
    causes: tuple[str, ...] = ()
    words: str = "{words}"
    evidence: str = "{evidence}"

    def __post_init__(self) -> None:
        if self.name in KINDS:
            raise ValueError(f"hint kind {self.name!r} is registered twice")
        KINDS[self.name] = self

    @property
    def whatif(self) -> str | None:
        return HINT_WHATIFS.get(self.name)

    def __call__(self, line: Line, **fields: object) -> Hint:
        return Hint(self.name, line, self.words.format(**fields), self.evidence.format(**fields))


#: Every hint kind, by name: making a :class:`Kind` registers it (twice: raises).
KINDS: dict[str, Kind] = {}


SYNC, COPY = ("sync",), ("sync", "copy")
LOG_EVERY_STEP = Kind(
    "log_every_step",
    SYNC,
    "logging fetches a value from the GPU {when}, and each fetch waits for all queued GPU "
    "work: accumulate on the device (e.g. total += loss.detach()) and {fix}",
    "{n:,} syncs ({causes})",
)
ITEM_IN_LOOP = Kind(
    "item_in_loop",
    SYNC,
    ".item()/float()/bool() on a GPU tensor {when}: each call waits for the GPU to finish "
    "everything queued; keep the value on the device and read it {read}",
    "{n:,} syncs at this line",
)
# NB: a read whose result decides what the script does (`if not torch.isfinite(loss)`) cannot
# be read less often without changing the script: no "read it once per N steps" what-if
CHECK_ON_HOST = Kind(
    "check_on_host",
    SYNC,
    "a GPU value is read {when} to decide what the script does, and each read waits for "
    "the GPU: check on the GPU with torch's async-safe ops (torch._assert_async, or "
    "torch.where / nan_to_num to act without reading), or accept the wait (reading it less "
    "often would change what the script does)",
    "{n:,} syncs at this line",
)
D2H_IN_LOOP = Kind(
    "d2h_in_loop",
    COPY,
    ".cpu()/.numpy()/.tolist() {when} copies to the host and waits each time: compute the "
    "metric on the GPU and copy once, or copy with non_blocking=True into pinned memory",
    "{n:,} syncs, {copies:,} copies, {size} in all",
)
DATA_DEPENDENT = Kind(
    "data_dependent",
    SYNC,
    "an op whose output size depends on the values (nonzero, boolean masks, unique, "
    "masked_select) waits for the GPU {when}: use torch.where / masked_fill with a fixed "
    "shape where you can",
    "{n:,} syncs",
)
FLOAT32_COPIES = Kind(
    "float32_copies",
    ("copy",),
    "float32 data crosses the bus here; if the model runs in half precision (autocast), "
    "copy float16/bfloat16 (or uint8 images) and convert on the GPU to halve the bytes",
    "{size} of float32 copied",
)
INPUT_BOUND = Kind("input_bound", ("input",), "the step waits here for {next}: {fixes}")
LAUNCH_BOUND = Kind(
    "launch_bound",
    ("launch",),
    "the GPU waits while this line's ops are launched one by one from Python: fewer, larger "
    "kernels help (torch.compile the model or this function; CUDA graphs: "
    "torch.compile(mode='reduce-overhead'); a larger batch gives each launch more "
    "work){knob}{eager}",
    "{ops:,} ops at this line in the run",
)
_COPY_KINDS = "model_moved_in_loop loader_pin loader_non_blocking non_blocking_pageable"
for _name in (*_COPY_KINDS.split(), "blocking_h2d", "created_on_cpu", "pinned_non_blocking"):
    Kind(_name, COPY)  # their words: the copy's advice by origin (COPY_ADVICE)


def hints(report: Report) -> list[Hint]:
    """Every hint for every line, the largest saving first; neighbours alike merged."""
    steps = int(report.steps["count"]) if report.steps else 0
    out: list[Hint] = []
    runs = factory_runs(report)
    for line in report.lines:
        out.extend(_line_hints(line, steps, runs, len(report.ranks or [0])))
    out.extend(_time_hints(report))
    costs = cause_costs(report)
    out = [_with_cost(h, costs.get(h.where, {}), report) for h in out]
    w = report.what_if
    if w:
        saved: dict[tuple[str, str], tuple[float, float]] = {}
        for x in w.savings:  # NB: the what-if lists each fix once a line; the first is its own
            saved.setdefault((str(x["kind"]), str(x["site"])), (x["saving_ms"], x["share_pct"]))
        out = [_with_saving(h, saved.get((KINDS[h.kind].whatif or "", h.where)), w) for h in out]
    return sorted(merge_neighbours(sorted(out, key=_rank, reverse=True)), key=_rank, reverse=True)


#: The ops a line keeps in the JSON (``Line.to_dict``'s ``top_ops``).
TOP_OPS_KEPT = 8

FactoryRuns = Callable[[str | None, str | None], int | None]
"""``(made_at, op)`` -> how many times that op ran at that line, None where not counted."""


def factory_runs(report: Report) -> FactoryRuns:
    """How often a factory op ran at a line, from the lines' op counts (the dispatch mode's;
    the fast path counts no ops: None there, and the JSON keeps a line's most frequent ops)."""
    places = {f"{s.file}:{s.line}": s for s in report.lines}

    def runs(made_at: str | None, op: str | None) -> int | None:
        line = places.get(made_at or "")
        if line is None or not op or not report.counts_ops:
            return None
        # NB: among the ops the JSON keeps of a line (its top 8 by time, then count), so that
        # gpuwatch report run.json gives the hint the run gave
        kept = sorted(line.op_breakdown.items(), key=lambda kv: (-kv[1].ms, -kv[1].count))
        found = [n.count for name, n in kept[:TOP_OPS_KEPT] if name.split(".")[0] == op]
        return sum(found) if found else None

    return runs


def hints_order(found: Sequence[Hint]) -> str:
    """How ``found`` is ordered, in words: by time where any hint has one, else by counts."""
    if any(h.rank_ms > 0 for h in found):
        return "the largest saving first"
    return "the most syncs, then bytes, first (no time measured)"


def _rank(h: Hint) -> tuple[float, int, int, str, int]:
    return (h.rank_ms, h.line.syncs.count, h.line.bytes_moved, h.line.file, -h.line.line)


def _with_saving(h: Hint, saving: tuple[float, float] | None, w: WhatIf) -> Hint:
    if saving is None:
        return h
    ms, pct = float(saving[0]), float(saving[1])
    return replace(
        h, saving_ms=ms, saved=True, evidence=f"{saving_words(ms, pct, w)}; {h.evidence}"
    )


def _with_cost(h: Hint, costs: dict[str, tuple[float, float]], report: Report) -> Hint:
    mine = [costs[c] for c in KINDS[h.kind].causes if c in costs]
    ms, share = sum(c[0] for c in mine), sum(c[1] for c in mine)
    if ms <= 0:
        return h
    return replace(h, cost_ms=ms, evidence=f"it costs {cost_text(report, ms, share)}; {h.evidence}")


def merge_neighbours(found: list[Hint]) -> list[Hint]:
    """Hints of the same kind and words on consecutive lines of one file, as one (``31-33``):
    the costs and savings summed, each line's counts kept in the evidence."""
    groups: dict[tuple[str, str, str], list[Hint]] = {}
    for h in found:
        groups.setdefault((h.kind, h.message, h.line.file), []).append(h)
    runs: list[list[Hint]] = []
    for group in groups.values():
        group.sort(key=lambda h: h.line.line)
        runs.append([group[0]])
        for before, h in pairwise(group):
            if h.line.line == before.line.line + 1:
                runs[-1].append(h)
            else:
                runs.append([h])
    return [
        replace(
            max(run, key=_rank),
            cost_ms=sum(h.cost_ms for h in run),
            saving_ms=sum(h.saving_ms for h in run),
            evidence="; ".join(f"line {h.line.line}: {h.evidence}" for h in run),
            lines=tuple(h.line.line for h in run),
        )
        if len(run) > 1
        else run[0]
        for run in runs
    ]


# -- how often ------------------------------------------------------------------------------


def _ordinal(n: int) -> str:
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


def how_often(active: int, steps: int) -> str:
    """``every step``, ``every 10th step`` (152 of 1,513 steps: within 3% of every 10th),
    ``in 4 of 50 steps``: how often a line did something, from the steps it did it in."""
    if steps <= 0 or active <= 0:
        return "each time the line runs"
    if active >= steps:
        return "every step"
    every = steps / active
    k = round(every)
    if active >= 2 and k >= 2 and abs(every - k) <= 0.03 * k:
        return f"every {_ordinal(k)} step"
    return f"in {active:,} of {steps:,} steps"


def in_steps(s: Line, steps: int, ranks: int = 1) -> str:
    """The line's figures per step, over the steps it copied or synced in only: ``"1 sync per
    step"``, ``"2 copies per step, in 5 of 50 steps"``; per rank for ``ranks`` merged ranks."""
    ran = s.steps_active if 0 < s.steps_active < steps else steps
    each = per_step(s, ran * ranks) + (" per rank" if ranks > 1 else "")
    return each + (f", in {ran:,} of {steps:,} steps" if ran < steps else "")


def per_step(s: Line, steps: int) -> str:
    """``"1 sync and 2 copies per step"``: a line's waits and copies over the run's steps."""
    counts = ((s.syncs.count, "sync", "syncs"), (copies_of(s), "copy", "copies"))
    parts = [rate(n, steps, one, many) for n, one, many in counts if n]
    return " and ".join(parts) + " per step" if parts else "nothing per step"


def rate(n: int, steps: int, one: str, many: str) -> str:
    """``2 copies``, ``0.5 syncs``: ``n`` over ``steps``."""
    each = n / steps
    text = f"{each:.0f}" if each == int(each) else f"{each:.2g}"
    return f"{text} {one if each == 1 else many}"


def copies_of(s: Line) -> int:
    return sum(s.copies(way).count for way in ("h2d", "d2h", "d2d", "p2p"))


def _once(s: Line, steps: int, count: int, loops_inside: bool = False) -> bool:
    """Whether the line did it once, not in a loop: in one step only where steps ended
    (``model.to(device)``), else fewer than :data:`HOT` times; with ``loops_inside``, ``HOT`` times
    or more in its one step is a loop inside the line (per-token ``int(i)``), never once."""
    if steps >= 2 and s.steps_active:
        return s.steps_active < 2 and not (loops_inside and count >= HOT)
    return count < HOT


# -- one line's hints -------------------------------------------------------------------------


def _line_hints(s: Line, steps: int, runs: FactoryRuns, ranks: int) -> list[Hint]:
    found = _sync_hints(s, steps) + _copy_hints(s, steps, runs)
    float32 = s.copy_dtypes.get("float32", 0)
    if float32 >= HALF_PRECISION_BYTES and not _once(s, steps, s.h2d.count + s.d2h.count):
        found.append(FLOAT32_COPIES(s, size=fmt.size(float32)))
    if steps:  # people think in steps: "syncs once every step"
        found = [
            replace(h, evidence=f"{h.evidence}; {in_steps(h.line, steps, ranks)}") for h in found
        ]
    return found


#: A line whose GPU read decides what the script does (``if not torch.isfinite(loss):``).
def _sync_hints(s: Line, steps: int) -> list[Hint]:
    causes = s.syncs.by_cause
    often = how_often(s.steps_active, steps)
    every = often == "every step" or not steps
    burst = steps >= 2 and s.steps_active == 1  # many syncs in one step: a loop in the line
    when = f"{s.syncs.count:,} times in one step" if burst else often if steps else "in a loop"
    fetches = causes.get("item", 0) + causes.get("copy_to_host", 0)
    items, to_host = causes.get("item", 0), causes.get("copy_to_host", 0)
    found: list[Hint] = []
    if fetches and not _once(s, steps, fetches, True) and _LOGGING.search(s.source):
        fix = "fetch once every N steps or per epoch"
        if not every:
            fix = "fetch less often still, or copy it with non_blocking=True and read it later"
        found.append(LOG_EVERY_STEP(s, when=when, fix=fix, n=fetches, causes=causes_text(causes)))
    elif items and not _once(s, steps, items, True):
        if DECIDES.search(s.source):
            found.append(CHECK_ON_HOST(s, when=when, n=items))
        else:
            read = "once" if every else "less often, or not at all inside the loop"
            if burst:
                read = "all at once (one .tolist() or .cpu() of the whole tensor), not one by one"
            found.append(ITEM_IN_LOOP(s, when=when, read=read, n=items))
    elif to_host and not _once(s, steps, to_host, True):
        size = fmt.size(s.d2h.bytes)
        found.append(D2H_IN_LOOP(s, when=when, n=to_host, copies=s.d2h.count, size=size))
    dependent = causes.get("data_dependent_shape", 0)
    if dependent and not _once(s, steps, dependent, True):
        found.append(DATA_DEPENDENT(s, when=when, n=dependent))
    return found


def origins_of(s: Line) -> dict[str, OriginCount]:
    """The line's host-to-GPU copies by origin; a report from before origins were recorded
    reads its copies as made at the line where a factory op ran there, else as ``host``."""
    found = dict(s.origins)
    rest = s.h2d.count - sum(c.count for c in found.values())
    if rest > 0:  # copies no origin was recorded for (older reports, comm functions)
        made = FACTORY if any(op.startswith(_FACTORY_OPS) for op in s.op_breakdown) else HOST
        share = rest / s.h2d.count
        extra = OriginCount(
            rest,
            round(s.h2d.bytes * share),
            min(rest, s.h2d.pageable),
            min(rest, s.h2d.non_blocking),
            f"{s.file}:{s.line}" if made == FACTORY else None,
        )
        found[made] = found[made].copy() if made in found else OriginCount()
        found[made].merge(extra)
    return found


def _copy_hints(s: Line, steps: int, runs: FactoryRuns) -> list[Hint]:
    """At most one hint for the line's host-to-GPU copies: the fix of its largest origin (by
    copies), none for a copy made once (a one-time move is never "in a loop")."""
    if not s.h2d.count or _once(s, steps, s.h2d.count):
        return []
    origins = origins_of(s)
    if PARAMETER in origins and (steps < 2 or s.steps_active < 2 or _in_library(s)):
        # NB: a module moved to the GPU is moved once (Module.to is a no-op for what is there
        # already): "in a loop" is said only where steps show it moved in two or more; a
        # library's train function that moves the model once runs in every step of its line
        del origins[PARAMETER]
    often = how_often(s.steps_active, steps) if steps else "in a loop"
    ranked = sorted(origins.items(), key=lambda kv: (kv[1].count, kv[1].bytes), reverse=True)
    for origin, c in ranked:
        made = _copy_hint(s, Copy(origin, c, f"{s.file}:{s.line}", runs(c.made_at, c.op)), often)
        if made is not None:
            return [made]
    return []


def _in_library(s: Line) -> bool:
    """Whether a library made every host-to-GPU copy of the line (its train function)."""
    return bool(s.library) and sum(f.copies for f in s.library) >= s.h2d.count


@dataclass(frozen=True)
class Copy:
    """One origin's host-to-GPU copies at a line (``at``), what :data:`COPY_ADVICE` reads."""

    origin: str
    c: OriginCount
    at: str
    made_runs: int | None
    """How often the op that made the tensor ran at its line (None: not counted)."""

    @property
    def blocking(self) -> int:
        return self.c.count - self.c.non_blocking

    @property
    def elsewhere(self) -> bool:
        return self.c.made_at is not None and self.c.made_at != self.at

    @property
    def nb_pageable(self) -> bool:
        """Copied with non_blocking=True from pageable memory (where it has no effect)."""
        return bool(self.c.non_blocking) and self.c.pageable >= self.c.non_blocking


@dataclass(frozen=True)
class Advice:
    """The fix of one origin's copies, where ``when`` holds: a hint of ``kind`` with these
    words and evidence (templates of :func:`_copy_hint`'s fields); no words: no hint."""

    origin: str
    kind: str
    when: Callable[[Copy, Line], bool]
    words: str = ""
    evidence: str = "{counts}"


#: The ops a tensor made from Python data reaches the dispatcher as (``torch.tensor(0.5)``).
_FROM_DATA = frozenset({"lift_fresh", "lift_fresh_copy", "scalar_tensor", "tensor"})

_RANDOM_OPS = ("rand", "normal", "bernoulli", "multinomial")
_MADE = ", made by {op}{made_there}"
#: The fix of a line's copies by their origin, the first row whose ``when`` holds; NB: a
#: tensor made elsewhere once and copied every step is held on the host (a data set): pinning
#: it once is the fix, not making it on the GPU each step.
COPY_ADVICE: tuple[Advice, ...] = (
    Advice(
        PARAMETER,
        "model_moved_in_loop",
        lambda k, s: True,
        "a module's parameters or buffers are moved to the GPU {often} (Module.to/.cuda inside "
        "the loop, on a model that is back on the CPU each time): move the model once, before "
        "the loop, and keep it there",
    ),
    # NB: where every copy already says non_blocking=True, telling the user to add it reads
    # as if they had not; what is missing is the pinning that makes it work
    Advice(
        LOADER,
        "loader_pin",
        lambda k, s: k.c.pageable > 0,
        "the DataLoader's batch is copied to the GPU {often} from pageable memory, so the host "
        "waits for each copy: DataLoader(pin_memory=True); {then}{library}",
        "{counts} of loader batches; {pageable}{nb_too}",
    ),
    Advice(
        LOADER,
        "loader_non_blocking",
        lambda k, s: k.blocking > 0,
        "the DataLoader's batch is pinned already, but copied without non_blocking: "
        ".to(device, non_blocking=True) lets the copy overlap the step (the GPU, not the host, "
        "waits for it)",
        "{counts} of pinned loader batches; {blocking:,} blocking",
    ),
    Advice(
        FACTORY,
        "non_blocking_pageable",
        lambda k, s: k.elsewhere and k.nb_pageable,
        "a tensor made on the CPU {where} is copied to the GPU {often} with non_blocking=True, "
        "which has no effect from pageable memory: pin it once where it is made (.pin_memory() "
        "at {made_at}) so each copy overlaps the step, or, if it fits, move it to the GPU whole "
        "once, before the loop",
        "{counts}, {nb:,} non_blocking from pageable memory, made by {op} at {made_at}",
    ),
    Advice(
        FACTORY,
        "blocking_h2d",
        lambda k, s: (
            k.elsewhere and k.made_runs is not None and k.made_runs < k.c.count and k.c.pageable > 0
        ),
        "a tensor made once on the CPU {where} is copied to the GPU {often} from pageable "
        "memory, and the host waits for each copy: pin it once where it is made (.pin_memory() "
        "at {made_at}) and copy with .to(device, non_blocking=True), or, if it fits, move it "
        "to the GPU whole once, before the loop",
        "{counts}, {blocking:,} blocking, from a tensor {op} made {times} at {made_at}",
    ),
    # NB: random numbers a library makes on the CPU (a pipeline's noise) come from the
    # generator the user passes; a library's other host tensors (a scheduler's timesteps)
    # have no fix on the user's side: no hint
    Advice(
        FACTORY,
        "created_on_cpu",
        lambda k, s: _in_library(s) and (k.c.op or "").startswith(_RANDOM_OPS),
        "random numbers made on the CPU inside a library are copied to the GPU {often}: pass "
        "it a CUDA generator (generator=torch.Generator('cuda')), or make them on the GPU "
        "yourself (torch.randn(..., device='cuda')) and pass them in",
        "{counts}" + _MADE,
    ),
    Advice(FACTORY, "", lambda k, s: _in_library(s)),
    # NB: torch.tensor(data, device=...) copies from the host all the same: a constant is made
    # once; data that changes is copied from a pinned buffer
    Advice(
        FACTORY,
        "created_on_cpu",
        lambda k, s: k.c.op in _FROM_DATA,
        "a tensor made from Python data {where} (torch.tensor) is copied to the GPU {often}: if "
        "its values never change, make it once before the loop (register_buffer for a module's "
        "constant); if they do, write them into a pinned buffer made once and copy with "
        ".to(device, non_blocking=True)",
        "{counts}" + _MADE,
    ),
    Advice(
        FACTORY,
        "created_on_cpu",
        lambda k, s: True,
        "a tensor made on the CPU {where} is copied to the GPU {often}: make it on the GPU "
        "({there}device=...), or, if it never changes, once before the loop (register_buffer "
        "for a module's constant)",
        "{counts}" + _MADE,
    ),
    Advice(
        PINNED,
        "pinned_non_blocking",
        lambda k, s: k.blocking > 0,
        "the source is in pinned memory already, but copied without non_blocking: .to(device, "
        "non_blocking=True) lets the copy overlap the GPU's work",
        "{counts}, all from pinned memory; {blocking:,} blocking",
    ),
    Advice(
        HOST,
        "non_blocking_pageable",
        lambda k, s: k.nb_pageable,
        "non_blocking=True has no effect when the source is pageable memory: pin it "
        "(tensor.pin_memory(), into a buffer reused each step) so the copy can overlap compute",
        "{nb:,} non_blocking copies, {c.pageable:,} from pageable memory{host}",
    ),
    Advice(
        HOST,
        "blocking_h2d",
        lambda k, s: k.blocking > 0,
        "a host tensor{host} is copied to the GPU {often} and the host waits for each copy: if "
        "it is the same each time, keep it on the GPU; otherwise copy from pinned memory (a "
        "buffer pinned once) with .to(device, non_blocking=True)",
        "{blocking:,} blocking copies, {size} in all",
    ),
)


def _copy_hint(s: Line, k: Copy, often: str) -> Hint | None:
    """The fix of one origin's copies at ``s``: the first row of :data:`COPY_ADVICE` for its
    origin (any other than those named: ``host``) whose ``when`` holds."""
    origin = k.origin if k.origin in (PARAMETER, LOADER, FACTORY, PINNED) else HOST
    row = next((a for a in COPY_ADVICE if a.origin == origin and a.when(k, s)), None)
    if row is None or not row.kind:
        return None
    c, op = k.c, _factory_name(k.c.op)
    host = ""
    if c.made_at:  # NB: a host tensor lifted from NumPy (torch.from_numpy) is no factory's
        host = "NumPy or Python data" if c.op in _FROM_DATA else f"made by {op}"
        host = f" ({host} at {c.made_at})"
    lib = next((f for f in s.library if f.copies), None)
    fields = dict(
        often=often,
        c=c,
        op=op,
        made_at=c.made_at,
        where=f"at {c.made_at}" if k.elsewhere else "at this line",
        there="there, " if k.elsewhere else "",
        made_there=f" at {c.made_at}" if k.elsewhere else "",
        counts=f"{c.count:,} host->GPU copies, {fmt.size(c.bytes)} in all",
        pageable=f"{c.pageable:,} from pageable memory" if c.pageable else "all from pinned memory",
        nb=c.non_blocking,
        nb_too=f", {c.non_blocking:,} non_blocking" if c.non_blocking else "",
        blocking=k.blocking,
        size=fmt.size(c.bytes),
        host=host,
        times=f"{k.made_runs or 0:,} time{'s' if k.made_runs != 1 else ''}",
        then="the non_blocking=True already given has no effect until the batch is pinned"
        if k.blocking == 0
        else "then .to(device, non_blocking=True) so the copy overlaps the step",
        library=f" (the copy is made inside {lib.file.split('/')[0]}, at {lib.file}:{lib.line} "
        f"{lib.function}: pin the DataLoader you pass it, or set pin_memory= in the library's "
        "own loader function)"
        if lib and _in_library(s)
        else "",
    )
    return Hint(KINDS[row.kind].name, s, row.words.format(**fields), row.evidence.format(**fields))


def causes_text(causes: dict[str, int]) -> str:
    """``item 3, copy_to_host 1``: syncs by cause."""
    return ", ".join(f"{k} {v:,}" for k, v in causes.items())


# -- lines that cost time without a copy or a sync ---------------------------------------------


def _time_hints(r: Report) -> list[Hint]:
    """The loader's hint at each line whose input wait is a share of the step worth one, and on a
    launch-bound GPU (measured or predicted) the launch hint at each line whose launches are."""
    t = r.time
    if not t:
        return _host_waits(r)
    run, _ = basis_of(t)
    costs = cause_costs(r)
    lines = {f"{s.file}:{s.line}": s for s in r.lines}
    on_gpu = measured_gpu(run) or predicted_gpu(run) is not None
    # NB: where the what-if replays a saving for overlapping the loader at a line, its hint is
    # given whatever the share: the what-if's first row had no hint to go with it (HF's
    # Trainer: 4% of the step, under TIME_SHARE_PCT, yet the largest saving replayed)
    overlapped = {
        str(s["site"])
        for s in (r.what_if.savings if r.what_if else [])
        if s.get("kind") == "overlap_input" and float(s.get("saving_ms") or 0.0) > 0
    }
    out: list[Hint] = []
    for where, causes in costs.items():
        line = lines.get(where)
        if line is None:
            continue
        input_ms, input_pct = causes.get("input", (0.0, 0.0))  # per step, % of the step
        if (
            input_pct >= TIME_SHARE_PCT
            or (run.get("verdict") == "input-bound" and input_ms > 0)
            or (where in overlapped and input_ms > 0)
        ):
            out.append(loader_hint(line, lines))
        launch_pct = causes.get("launch", (0.0, 0.0))[1]
        launched = on_gpu and run.get("verdict") == "launch-bound" and _launches_from_python(line)
        if launched and launch_pct >= TIME_SHARE_PCT:
            knob, eager = compile_knob(line), _ran_eager(r)
            out.append(LAUNCH_BOUND(line, knob=knob, eager=eager, ops=line.ops))
    return out


def _host_waits(r: Report) -> list[Hint]:
    """With no time view (``--fake-cuda`` without ``--gpu``: the host's time is the fake GPU's), the
    loader's hint where the host's wait for its batches (no GPU in it) is most of the run's time."""
    wall = r.duration_s * 1000.0 * len(r.ranks or [0])  # a merged report's waits are summed
    lines = {f"{s.file}:{s.line}": s for s in r.lines}
    steps = int(r.steps["count"]) if r.steps else 0
    out: list[Hint] = []
    for s in r.lines:
        wait = float((s.loader or {}).get("wait_ms") or 0.0)
        if wall <= 0 or 100.0 * wait / wall < MOST_PCT:
            continue
        h = loader_hint(s, lines)
        each = f"{fmt.duration_ms(wait / steps)} per step" if steps else fmt.duration_ms(wait)
        evidence = (
            f"the host waits {each} here for its batches ({100.0 * wait / wall:.0f}% of the "
            f"run's {fmt.duration_ms(wall)}, measured on this host, no GPU time in it); "
        )
        out.append(replace(h, cost_ms=wait / max(1, steps), evidence=evidence + h.evidence))
    return out


#: How a framework that runs the step for the user compiles it, by the package of a frame
#: inside the line (read in transformers 5.24.0 training_args.py ``torch_compile``,
#: ``torch_compile_mode``; accelerate 1.15.0 accelerator.py ``dynamo_backend``; Lightning
#: 2.6.6 has no Trainer flag: the module is compiled before ``fit``).
COMPILE_KNOBS = (
    (
        "transformers/",
        "HF Trainer: TrainingArguments(torch_compile=True), "
        "torch_compile_mode='reduce-overhead' for CUDA graphs",
    ),
    ("lightning/", "Lightning: model = torch.compile(model) before trainer.fit(model)"),
    ("pytorch_lightning/", "Lightning: model = torch.compile(model) before trainer.fit(model)"),
    ("accelerate/", "accelerate: Accelerator(dynamo_backend='inductor')"),
)


#: A line whose ops autograd's engine launches, in C++ (``loss.backward()``).
_BACKWARD = re.compile(r"\.backward\(|\bautograd\.(backward|grad)\(")


def _launches_from_python(line: Line) -> bool:
    """Whether the line's launches come from Python ops: not a backward's (autograd launches them
    in C++), nor a line whose ops are its copies (a copy's wait is no launch to compile away)."""
    return not _BACKWARD.search(line.source) and line.ops > copies_of(line)


def compile_knob(line: Line) -> str:
    """Where a framework runs the line's step (a frame of it made the line's copies or syncs:
    ``trainer.train()``), how to compile it there: the line itself cannot be compiled."""
    files = [f.file for f in line.library]
    for package, knob in COMPILE_KNOBS:
        if any(f.startswith(package) for f in files):
            return f"; this line runs a framework's step: {knob}"
    return ""


def _ran_eager(r: Report) -> str:
    """Where the script's torch.compile'd code ran eager under the profile: the launches counted
    are eager's, and a script that compiles already was told to compile (reduce-overhead too)."""
    under = r.compiled.ran_eager if r.compiled is not None else None
    if not under:
        return ""
    return (
        f". NB: torch.compile ran eager in this profile (under {under}): where this line "
        "runs your compiled code, these launches are the eager code's, not the compiled "
        "program's, which launches fewer kernels"
    )


def loader_hint(line: Line, lines: dict[str, Line]) -> Hint:
    """What to change in the loader the step waits for at ``line``, chosen from the settings
    it has (``line.loader``); a source that is not a DataLoader gets the general fix."""
    ld = line.loader
    if not ld:
        return INPUT_BOUND(
            line,
            next="its next batch",
            fixes="prepare batches while the step runs (a DataLoader with num_workers > 0, or a "
            "background thread that prefetches), and move decoding and augmentation off the "
            "training thread",
            evidence="input waits at this line (not a DataLoader: no settings to read)",
        )
    workers, epochs = int(ld.get("num_workers") or 0), int(ld.get("iterators") or 0)
    fixes: list[str] = []
    if workers == 0:
        fixes.append(
            "load batches in worker processes while the step runs: DataLoader(num_workers=N) "
            "with N up to the CPU cores per GPU (4-8 is a common start), "
            "persistent_workers=True so each epoch does not start them anew"
        )
    else:
        more = f"raise num_workers (now {workers})"
        prefetch = ld.get("prefetch_factor")
        if prefetch is not None:
            more += f" and prefetch_factor (now {prefetch})"
        fixes.append(
            f"the {workers} worker{'s' if workers != 1 else ''} cannot keep up: {more}, or make "
            "each item cheaper: decode and augment on the GPU (torchvision.transforms.v2 on "
            "GPU tensors, NVIDIA DALI), or store the data preprocessed"
        )
        if not ld.get("persistent_workers") and epochs > 1:
            fixes.append(
                f"persistent_workers=True: each of the {epochs} epochs started its workers anew"
            )
    pageable = sum(s.origins[LOADER].pageable for s in lines.values() if LOADER in s.origins)
    if not ld.get("pin_memory") and pageable:
        fixes.append("pin_memory=True, with .to(device, non_blocking=True) for its batches")
    names = "num_workers pin_memory persistent_workers prefetch_factor batch_size".split()
    settings = ", ".join(f"{k}={ld[k]}" for k in names if ld.get(k) is not None)
    batches = int(ld.get("batches") or 0)
    return INPUT_BOUND(
        line,
        next="the DataLoader's next batch",
        fixes="; ".join(fixes),
        evidence=f"DataLoader({settings}); {batches:,} batches in {epochs:,} "
        f"epoch{'s' if epochs != 1 else ''}",
    )


def _factory_name(op: str | None) -> str:
    """The factory a user called to make a tensor (``torch.randn``), from its op's name (the
    ops of Python data, ``torch.tensor(0.5)`` lifting a fresh constant: ``torch.tensor``)."""
    if not op or op == "DataLoader":
        return "a factory"
    if op.startswith("torch."):
        return op
    return "torch.tensor" if op in _FROM_DATA else f"torch.{op}"


def label(w: Mapping[str, object]) -> str:
    """``PREDICTED for H100-SXM`` or ``replayed``: where the figures come from."""
    if w.get("measured") == "predicted":
        return f"PREDICTED for {w.get('gpu')}"
    return "replayed"


def saving_words(ms: float, pct: float, w: Mapping[str, object]) -> str:
    """``the fix saves about 1.2 ms per step (31%, PREDICTED for H100-SXM)``: what the step
    gives back, not what the line costs (a sync in a busy GPU's shadow costs its wait and
    saves nothing)."""
    return f"the fix saves about {fmt.duration_ms(ms)} per step ({fmt.pct(pct)}, {label(w)})"
