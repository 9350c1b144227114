"""Advice a user can act on, each tied to one line of their code and the numbers behind it.

Pure functions of a :class:`profilers.Report`: the same report always gives the same hints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from gpuwatch import _format as fmt
from gpuwatch.report.line_costs import cost_text, line_costs
from gpuwatch.report.whatif import saving_words, savings_by_hint
from profilers import Report, Site

#: A line that ran this many times is "in a hot loop".
HOT = 10
#: Bytes of float32 copies at one line worth suggesting half precision for.
HALF_PRECISION_BYTES = 64 * 1024 * 1024

_LOGGING = re.compile(
    r"\b(print|log|logger|logging|writer|wandb|tqdm|append|add_scalar|set_postfix)\b"
)
_FACTORY_OPS = (
    "randn",
    "rand.",
    "zeros",
    "ones",
    "full",
    "arange",
    "empty",
    "lift_fresh",
    "eye",
    "linspace",
    "tensor",
)


@dataclass(frozen=True)
class Hint:
    kind: str
    site: Site
    message: str
    evidence: str
    cost_ms: float = 0.0
    """The time charged to the hint's line, per step (``report.time``; 0 where not measured)."""
    saving_ms: float = 0.0
    """What the hint's fix would save per step, replayed (``report.what_if``; 0: no what-if)."""

    @property
    def where(self) -> str:
        return f"{self.site.file}:{self.site.line}"


def hints(report: Report, hot: int = HOT) -> list[Hint]:
    """Every hint for every site, the costliest first: its line's time per step where measured,
    then syncs, then bytes."""
    out: list[Hint] = []
    steps = int(report.steps["count"]) if report.steps else 0
    for site in report.sites:
        found = _site_hints(site, hot)
        if steps >= 2 and site.steps_active == 1:
            # NB: a line that copied or synced in one step only (model.to(device) before the
            # loop: 15 parameters, 15 copies) ran once: none of the "in a loop" hints is true
            # of it, however high its count.
            found = [h for h in found if h.kind in ONCE_IS_ENOUGH]
        if steps:  # people think in steps: "syncs once every step"
            found = [replace(h, evidence=f"{h.evidence}; {in_steps(h.site, steps)}") for h in found]
        out.extend(found)
    costs = line_costs(report)
    if costs:  # every hint carries its line's time, and the costliest line comes first
        out = [_with_cost(h, costs.get(h.where), report) for h in out]
    saved = savings_by_hint(report)
    if saved and report.what_if:  # ranked by what fixing them would save, where replayed
        out = [_with_saving(h, saved.get((h.kind, h.where)), report.what_if) for h in out]
    out.sort(
        key=lambda h: (h.saving_ms, h.cost_ms, h.site.syncs.count, h.site.bytes_moved),
        reverse=True,
    )
    return out


def _with_saving(h: Hint, saving: tuple[float, float] | None, w: dict[str, object]) -> Hint:
    if saving is None:
        return h
    ms, pct = saving
    return replace(h, saving_ms=ms, evidence=f"{saving_words(ms, pct, w)}; {h.evidence}")


def _with_cost(h: Hint, cost: tuple[float, float] | None, report: Report) -> Hint:
    ms, share = cost or (0.0, 0.0)
    text = f"the line costs {cost_text(report, ms, share)}"
    return replace(h, cost_ms=ms, evidence=f"{text}; {h.evidence}")


#: Hints true of a line however often it ran.
ONCE_IS_ENOUGH = frozenset({"non_blocking_pageable"})


def in_steps(s: Site, steps: int) -> str:
    """The line's figures per step, over the steps in which it copied or synced only:
    ``"1 sync per step"``, ``"2 copies per step, in 5 of 50 steps"``."""
    ran = s.steps_active if 0 < s.steps_active < steps else steps
    return per_step(s, ran) + (f", in {ran:,} of {steps:,} steps" if ran < steps else "")


def per_step(s: Site, steps: int) -> str:
    """``"1 sync and 2 copies per step"``: a line's waits and copies over the run's steps."""
    copies = sum(s.copies(way).count for way in ("h2d", "d2h", "d2d", "p2p"))
    parts = []
    for n, what in ((s.syncs.count, "sync"), (copies, "copy")):
        if n:
            rate = n / steps
            text = f"{rate:.0f}" if rate == int(rate) else f"{rate:.2g}"
            plural = "" if rate == 1 else ("s" if what == "sync" else "")
            parts.append(f"{text} {'copies' if what == 'copy' and rate != 1 else what + plural}")
    return " and ".join(parts) + " per step" if parts else "nothing per step"


def _site_hints(s: Site, hot: int) -> list[Hint]:
    found: list[Hint] = []
    causes = s.syncs.by_cause
    source = s.source
    fetches = causes.get("item", 0) + causes.get("copy_to_host", 0)
    if fetches >= hot and _LOGGING.search(source):
        found.append(
            Hint(
                "log_every_step",
                s,
                "logging fetches a value from the GPU every step, and each fetch waits for all "
                "queued GPU work: accumulate on the device (e.g. total += loss.detach()) and fetch "
                "once every N steps or per epoch",
                f"{fetches:,} syncs ({_causes(causes)})",
            )
        )
    elif causes.get("item", 0) >= hot:
        found.append(
            Hint(
                "item_in_loop",
                s,
                ".item()/float()/bool() on a GPU tensor in a loop: each call waits for the GPU to "
                "finish everything queued; keep the value on the device and read it once",
                f"{causes['item']:,} syncs at this line",
            )
        )
    elif causes.get("copy_to_host", 0) >= hot:
        found.append(
            Hint(
                "d2h_in_loop",
                s,
                ".cpu()/.numpy()/.tolist() in a loop copies to the host and waits each time: "
                "compute the metric on the GPU and copy once, or copy with non_blocking=True into "
                "pinned memory",
                f"{causes['copy_to_host']:,} syncs, {s.d2h.count:,} copies, "
                f"{fmt.size(s.d2h.bytes)} in all",
            )
        )
    if s.h2d.non_blocking and s.h2d.pageable >= s.h2d.non_blocking:
        found.append(
            Hint(
                "non_blocking_pageable",
                s,
                "non_blocking=True has no effect when the source is pageable memory: pin it "
                "(DataLoader(pin_memory=True) or tensor.pin_memory()) so the copy can overlap compute",
                f"{s.h2d.non_blocking:,} non_blocking copies, {s.h2d.pageable:,} from pageable memory",
            )
        )
    blocking_h2d = causes.get("copy_to_device", 0)
    created_here = any(op.startswith(_FACTORY_OPS) for op in s.op_breakdown)
    if s.h2d.count >= hot and created_here:
        found.append(
            Hint(
                "created_on_cpu",
                s,
                "a tensor is created on the CPU and moved to the GPU every time this line runs: "
                "create it on the device (device=...), or once before the loop (register_buffer "
                "for module constants)",
                f"{s.h2d.count:,} host->GPU copies, {fmt.size(s.h2d.bytes)} in all",
            )
        )
    elif blocking_h2d >= hot:
        found.append(
            Hint(
                "blocking_h2d",
                s,
                "blocking host->GPU copies in a loop: the host waits for each; use pinned memory "
                "(DataLoader(pin_memory=True)) and .to(device, non_blocking=True)",
                f"{blocking_h2d:,} blocking copies, {fmt.size(s.h2d.bytes)} in all",
            )
        )
    float32 = s.copy_dtypes.get("float32", 0)
    if float32 >= HALF_PRECISION_BYTES and (s.h2d.count + s.d2h.count) >= hot:
        found.append(
            Hint(
                "float32_copies",
                s,
                "float32 data crosses the bus here; if the model runs in half precision (autocast), "
                "copy float16/bfloat16 (or uint8 images) and convert on the GPU to halve the bytes",
                f"{fmt.size(float32)} of float32 copied",
            )
        )
    if causes.get("data_dependent_shape", 0) >= hot:
        found.append(
            Hint(
                "data_dependent",
                s,
                "an op whose output size depends on the values (nonzero, boolean masks, unique, "
                "masked_select) waits for the GPU each time: use torch.where / masked_fill with a "
                "fixed shape where you can",
                f"{causes['data_dependent_shape']:,} syncs",
            )
        )
    return found


def _causes(causes: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in causes.items())
