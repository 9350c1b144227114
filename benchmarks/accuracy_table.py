"""The GPU model's accuracy as tables, for ``gpu_model_accuracy.py``: which class an
op belongs to, and per workload and op class the count, the measured and predicted totals and
the ratio predicted/measured (median, p90); per step the error. No torch, no CUDA: the tables
are tested on hand-built records (tests/test_gpu_model_accuracy.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

SCHEMA = "gpuwatch.model_accuracy/1"

MATMUL, CONV, ATTENTION, ELEMENTWISE = "matmul", "conv", "attention", "elementwise"
REDUCTION, NORM, H2D, D2H, OTHER = "reduction", "norm", "copy h2d", "copy d2h", "other"
CLASSES = (MATMUL, CONV, ATTENTION, ELEMENTWISE, REDUCTION, NORM, H2D, D2H, OTHER)

_MATMULS = frozenset(
    ("mm", "addmm", "bmm", "baddbmm", "addbmm", "_scaled_mm", "mv", "addmv", "dot", "matmul")
)
_NORMS = ("batch_norm", "layer_norm", "group_norm", "rms_norm", "instance_norm")
# NB: pooling is a reduction over a window; softmax and the losses reduce along a dimension
_REDUCTIONS = frozenset(
    ("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std", "var_mean",
     "std_mean", "norm", "linalg_vector_norm", "_foreach_norm", "prod", "logsumexp", "cumsum",
     "any", "all", "topk", "sort", "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward",
     "nll_loss2d_backward", "count_nonzero")
)  # fmt: skip
# Ops that read and write memory once per element without the pointwise tag: fills, random
# numbers, copies within the device, dropout, and the optimizers' multi-tensor kernels.
_ELEMENTWISE = frozenset(
    ("fill", "zero", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "copy",
     "_to_copy", "clone", "contiguous", "arange", "scalar_tensor", "lift_fresh", "rand", "randn",
     "randint", "normal", "uniform", "bernoulli", "native_dropout", "native_dropout_backward",
     "threshold_backward", "masked_fill", "where", "_fused_dropout")
)  # fmt: skip


def op_class(name: str, pointwise: bool, copy_direction: str | None) -> str:
    """The class of an aten op named ``name`` (its overload packet, trailing ``_`` dropped),
    ``pointwise`` when torch tags it so, ``copy_direction`` ``"h2d"``/``"d2h"`` for a copy
    across the bus."""
    if copy_direction == "h2d":
        return H2D
    if copy_direction == "d2h":
        return D2H
    if "attention" in name:
        return ATTENTION
    if "convolution" in name:
        return CONV
    if name in _MATMULS:
        return MATMUL
    if any(n in name for n in _NORMS):
        return NORM
    if name in _REDUCTIONS or "softmax" in name or "pool" in name:
        return REDUCTION
    if pointwise or name in _ELEMENTWISE or name.startswith(("_foreach_", "_fused_")):
        return ELEMENTWISE
    return OTHER


@dataclass(frozen=True, slots=True)
class OpTime:
    """One op run on the GPU: the step it ran in, its class, its name, and its time measured
    (CUDA events) and predicted (the model), in ns."""

    step: int
    cls: str
    name: str
    measured_ns: int
    predicted_ns: int


def percentile(values: Sequence[float], pct: float) -> float:
    """The nearest-rank percentile (one of the values: no interpolation)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def _ms(ns: float) -> float:
    return round(ns / 1e6, 4)


def class_rows(ops: Iterable[OpTime]) -> list[dict[str, Any]]:
    """Per class present (in :data:`CLASSES` order): count, measured and predicted totals (ms),
    median and p90 of predicted/measured over the ops measured above zero."""
    by: dict[str, list[OpTime]] = {}
    for op in ops:
        by.setdefault(op.cls, []).append(op)
    rows = []
    for cls in CLASSES:
        group = by.get(cls)
        if not group:
            continue
        ratios = [op.predicted_ns / op.measured_ns for op in group if op.measured_ns > 0]
        rows.append(
            {
                "class": cls,
                "count": len(group),
                "measured_ms": _ms(sum(op.measured_ns for op in group)),
                "predicted_ms": _ms(sum(op.predicted_ns for op in group)),
                "ratio_median": round(median(ratios), 3) if ratios else None,
                "ratio_p90": round(percentile(ratios, 90), 3) if ratios else None,
                "ops_by_name": dict(sorted(_names(group).items(), key=lambda kv: -kv[1])[:6]),
            }
        )
    return rows


def _names(group: list[OpTime]) -> dict[str, int]:
    out: dict[str, int] = {}
    for op in group:
        out[op.name] = out.get(op.name, 0) + 1
    return out


def step_row(ops: Sequence[OpTime], walls_ns: Sequence[int]) -> dict[str, Any]:
    """The step: its wall time measured unprofiled (median over ``walls_ns``), its GPU time
    (the sum of its ops) measured and predicted (medians over the steps), and the error."""
    measured: dict[int, int] = {}
    predicted: dict[int, int] = {}
    for op in ops:
        measured[op.step] = measured.get(op.step, 0) + op.measured_ns
        predicted[op.step] = predicted.get(op.step, 0) + op.predicted_ns
    gpu_measured = median(measured.values()) if measured else 0
    gpu_predicted = median(predicted.values()) if predicted else 0
    wall = median(walls_ns) if walls_ns else 0
    return {
        "steps": len(measured),
        "wall_ms": _ms(wall),
        "gpu_measured_ms": _ms(gpu_measured),
        "gpu_predicted_ms": _ms(gpu_predicted),
        "error_pct": round(100 * (gpu_predicted / gpu_measured - 1), 1) if gpu_measured else None,
        "gpu_busy_pct": round(100 * gpu_measured / wall, 1) if wall else None,
    }


def workload_dict(name: str, ops: Sequence[OpTime], walls_ns: Sequence[int]) -> dict[str, Any]:
    return {"name": name, "step": step_row(ops, walls_ns), "classes": class_rows(ops)}


def result_dict(
    gpu: dict[str, Any], workloads: list[dict[str, Any]], all_ops: Sequence[OpTime]
) -> dict[str, Any]:
    """The JSON the script writes: the GPU (device name, the spec it matched), each workload,
    and the classes over all workloads."""
    return {
        "schema": SCHEMA,
        "gpu": gpu,
        "workloads": workloads,
        "classes": class_rows(all_ops),
    }


def _ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}"


def _pct(p: float | None) -> str:
    return "-" if p is None else f"{p:+.1f}%"


def _busy(p: float | None) -> str:
    return "-" if p is None else f"{p:.0f}%"


def _step_line(name: str, s: dict[str, Any]) -> str:
    return (
        f"{name}: {s['steps']} steps; step wall {s['wall_ms']:.3f} ms (measured, unprofiled), "
        f"GPU {s['gpu_measured_ms']:.3f} ms measured, {s['gpu_predicted_ms']:.3f} ms "
        f"predicted: error {_pct(s['error_pct'])}"
    )


def text_table(rows: list[dict[str, Any]]) -> list[str]:
    head = f"  {'class':<12} {'ops':>6} {'measured ms':>12} {'predicted ms':>13} {'median':>7} {'p90':>6}"
    lines = [head]
    for r in rows:
        lines.append(
            f"  {r['class']:<12} {r['count']:>6} {r['measured_ms']:>12.3f} "
            f"{r['predicted_ms']:>13.3f} {_ratio(r['ratio_median']):>7} {_ratio(r['ratio_p90']):>6}"
        )
    return lines


def render_text(result: dict[str, Any]) -> str:
    """What the script prints: per workload its step and its classes, then all workloads."""
    gpu = result["gpu"]
    lines = [
        f"GPU model accuracy on {gpu['device_name']} (model: {gpu['spec']}); "
        "ratios are predicted/measured per op (median, p90)"
    ]
    for w in result["workloads"]:
        lines += ["", _step_line(w["name"], w["step"]), *text_table(w["classes"])]
    lines += ["", "all workloads:", *text_table(result["classes"])]
    return "\n".join(lines) + "\n"


def render_markdown(result: dict[str, Any]) -> str:
    """Two tables ready to paste into the README: per workload the step, then per op class over
    all workloads."""
    gpu = result["gpu"]
    out = [
        f"Measured on {gpu['device_name']} (torch {gpu['torch']}) against the model of the "
        f"{gpu['spec']}: GPU time per step (the sum of its ops' CUDA-event times) and per op.",
        "",
        "| workload | step wall ms | GPU busy | GPU ms measured | GPU ms predicted | error |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for w in result["workloads"]:
        s = w["step"]
        out.append(
            f"| {w['name']} | {s['wall_ms']:.3f} | {_busy(s['gpu_busy_pct'])} | "
            f"{s['gpu_measured_ms']:.3f} | "
            f"{s['gpu_predicted_ms']:.3f} | {_pct(s['error_pct'])} |"
        )
    out += [
        "",
        "| op class | ops | measured ms | predicted ms | predicted/measured: median | p90 |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result["classes"]:
        out.append(
            f"| {r['class']} | {r['count']} | {r['measured_ms']:.3f} | {r['predicted_ms']:.3f} "
            f"| {_ratio(r['ratio_median'])} | {_ratio(r['ratio_p90'])} |"
        )
    return "\n".join(out) + "\n"
