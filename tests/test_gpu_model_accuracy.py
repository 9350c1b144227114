"""benchmarks/gpu_model_accuracy.py on a machine without a GPU: the op classes, the
tables from hand-built records, and the whole pipeline run with ``--stand-in`` (fake ``cuda:0``
tensors, every op exactly 10 µs), whose table is exact."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import accuracy_table as t
from benchmarks import gpu_model_accuracy as bench
from profilers.timing.gpu_model.rates import (
    COPY_LATENCY_NS,
    HOST_MEMCPY_BYTES_PER_S,
    MIN_KERNEL_NS,
    PCIE_LANE_BYTES_PER_S,
    PCIE_PAYLOAD_EFFICIENCY,
)


@pytest.mark.parametrize(
    ("name", "pointwise", "direction", "cls"),
    [
        ("mm", False, None, "matmul"),
        ("addmm", False, None, "matmul"),
        ("bmm", False, None, "matmul"),
        ("convolution", False, None, "conv"),
        ("convolution_backward", False, None, "conv"),
        ("_scaled_dot_product_efficient_attention", False, None, "attention"),
        ("_scaled_dot_product_flash_attention_backward", False, None, "attention"),
        ("native_batch_norm", False, None, "norm"),
        ("native_layer_norm_backward", False, None, "norm"),
        ("sum", False, None, "reduction"),
        ("_log_softmax", False, None, "reduction"),
        ("max_pool2d_with_indices", False, None, "reduction"),
        ("nll_loss_forward", False, None, "reduction"),
        ("_foreach_norm", False, None, "reduction"),
        ("add", True, None, "elementwise"),
        ("threshold_backward", False, None, "elementwise"),
        ("_foreach_mul", False, None, "elementwise"),
        ("_fused_adamw", False, None, "elementwise"),
        ("_to_copy", False, None, "elementwise"),  # a cast on the device
        ("_to_copy", False, "h2d", "copy h2d"),
        ("_local_scalar_dense", False, "d2h", "copy d2h"),
        ("cat", False, None, "other"),
        ("embedding_dense_backward", False, None, "other"),
    ],
)
def test_each_op_falls_in_its_class(name: str, pointwise: bool, direction: str | None, cls: str):
    assert t.op_class(name, pointwise, direction) == cls


def _toy() -> dict[str, object]:
    ops = [
        t.OpTime(3, "matmul", "mm", 10_000, 10_000),  # ratio 1
        t.OpTime(3, "matmul", "addmm", 20_000, 10_000),  # 0.5
        t.OpTime(4, "matmul", "mm", 40_000, 10_000),  # 0.25
        t.OpTime(4, "copy h2d", "_to_copy", 100_000, 50_000),  # 0.5
    ]
    w = t.workload_dict("toy", ops, [200_000, 100_000, 150_000])
    gpu = {"device_name": "NVIDIA H100 80GB HBM3", "spec": "H100-SXM", "torch": "2.13.0"}
    return t.result_dict(gpu, [w], ops)


def test_the_tables_of_hand_built_records():
    result = _toy()
    (w,) = result["workloads"]  # type: ignore[misc]
    # steps 3 and 4: GPU 30 and 140 µs measured (median 85), 20 and 60 predicted (median 40):
    # 40 / 85 - 1 = -52.9%; walls median 150 µs, so the GPU was busy 85 / 150 = 56.7%
    assert w["step"] == {
        "steps": 2,
        "wall_ms": 0.15,
        "gpu_measured_ms": 0.085,
        "gpu_predicted_ms": 0.04,
        "error_pct": -52.9,
        "gpu_busy_pct": 56.7,
    }
    # matmul ratios 1, 0.5, 0.25: median 0.5; p90 by nearest rank: the 3rd of 3, 1.0
    assert [(r["class"], r["count"], r["measured_ms"], r["predicted_ms"], r["ratio_median"],
             r["ratio_p90"], r["ops_by_name"]) for r in w["classes"]] == [
        ("matmul", 3, 0.07, 0.03, 0.5, 1.0, {"mm": 2, "addmm": 1}),
        ("copy h2d", 1, 0.1, 0.05, 0.5, 0.5, {"_to_copy": 1}),
    ]  # fmt: skip
    assert result["classes"] == w["classes"]
    assert t.render_text(result) == (
        "GPU model accuracy on NVIDIA H100 80GB HBM3 (model: H100-SXM); ratios are "
        "predicted/measured per op (median, p90)\n"
        "\n"
        "toy: 2 steps; step wall 0.150 ms (measured, unprofiled), GPU 0.085 ms measured, "
        "0.040 ms predicted: error -52.9%\n"
        "  class           ops  measured ms  predicted ms  median    p90\n"
        "  matmul            3        0.070         0.030    0.50   1.00\n"
        "  copy h2d          1        0.100         0.050    0.50   0.50\n"
        "\n"
        "all workloads:\n"
        "  class           ops  measured ms  predicted ms  median    p90\n"
        "  matmul            3        0.070         0.030    0.50   1.00\n"
        "  copy h2d          1        0.100         0.050    0.50   0.50\n"
    )
    assert t.render_markdown(result) == (
        "Measured on NVIDIA H100 80GB HBM3 (torch 2.13.0) against the model of the H100-SXM: "
        "GPU time per step (the sum of its ops' CUDA-event times) and per op.\n"
        "\n"
        "| workload | step wall ms | GPU busy | GPU ms measured | GPU ms predicted | error |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: |\n"
        "| toy | 0.150 | 57% | 0.085 | 0.040 | -52.9% |\n"
        "\n"
        "| op class | ops | measured ms | predicted ms | predicted/measured: median | p90 |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: |\n"
        "| matmul | 3 | 0.070 | 0.030 | 0.50 | 1.00 |\n"
        "| copy h2d | 1 | 0.100 | 0.050 | 0.50 | 0.50 |\n"
    )


def test_the_stand_in_pipeline_gives_the_exact_table(tmp_path, capsys):
    out = tmp_path / "acc.json"
    md = tmp_path / "acc.md"
    argv = ["--stand-in", "--steps", "2", "--warmup", "1", "--json", str(out)]
    assert bench.main([*argv, "--markdown", str(md)]) == 0
    result = json.loads(out.read_text())
    assert result["schema"] == "gpuwatch.model_accuracy/1"
    assert {k: result["gpu"][k] for k in ("device_name", "spec", "stand_in", "steps")} == {
        "device_name": "stand-in (no GPU)",
        "spec": "H100-SXM",
        "stand_in": True,
        "steps": 2,
    }
    # The model on an H100 SXM, by hand:
    # mm 1024^3 x 2 = 2.147 GFLOP in float32 (no TF32 for matmuls by default) on the CUDA
    # cores, 66.9 TFLOP/s, with 8 x 8 = 64 tiles of 128 on 132 SMs: one wave, 64/132 busy.
    mm_ns = round(2 * 1024**3 / (66.9e12 * 64 / 132) * 1e9)
    # 4 MiB over PCIe 5 x16 from pageable memory: the staging copy and the link in series.
    link = PCIE_LANE_BYTES_PER_S[5] * 16 * PCIE_PAYLOAD_EFFICIENCY
    staged = 1 / (1 / link + 1 / HOST_MEMCPY_BYTES_PER_S)
    copy_ns = COPY_LATENCY_NS + round(4 * 2**20 / staged * 1e9)
    rows = {r["class"]: r for r in result["classes"]}
    assert list(rows) == list(t.CLASSES)  # one op of each class a step, 2 steps
    for r in rows.values():
        # every op took the stand-in's 10 µs: 2 x 0.010 ms
        assert (r["count"], r["measured_ms"]) == (2, 0.02), r["class"]
    assert rows["matmul"]["predicted_ms"] == round(2 * mm_ns / 1e6, 4) == 0.1324
    assert rows["matmul"]["ratio_median"] == round(mm_ns / bench.TICK_NS, 3) == 6.621
    assert rows["copy h2d"]["predicted_ms"] == rows["copy d2h"]["predicted_ms"]
    assert rows["copy h2d"]["predicted_ms"] == round(2 * copy_ns / 1e6, 4) == 0.805
    # a sum of 1024 x 1024 floats reads 4 MiB: 1.4 µs at 90% of 3.35 TB/s, so the 2 µs floor
    assert rows["reduction"]["predicted_ms"] == 2 * MIN_KERNEL_NS / 1e6
    assert [(c, rows[c]["ratio_median"], rows[c]["ratio_p90"]) for c in t.CLASSES] == [
        ("matmul", 6.621, 6.621),
        ("conv", 6.692, 6.692),  # TF32 on tensor cores over NCHW: cuDNN's transposes in
        ("attention", 3.473, 3.473),
        ("elementwise", 0.278, 0.278),
        ("reduction", 0.2, 0.2),
        ("norm", 0.279, 0.279),
        ("copy h2d", 40.248, 40.248),
        ("copy d2h", 40.248, 40.248),
        ("other", 0.556, 0.556),
    ]
    (w,) = result["workloads"]
    assert w["name"] == "stand-in" and w["classes"] == result["classes"]
    # a GPU-bound stand-in: the step is its 9 ops of 10 µs, run plain and timed alike
    step = w["step"]
    assert (step["steps"], step["wall_ms"], step["gpu_measured_ms"], step["gpu_busy_pct"]) == (
        2,
        0.09,
        0.09,
        100.0,
    )
    predicted_step = sum(r["predicted_ms"] for r in result["classes"]) / 2
    # (each row rounded to 0.1 µs)
    assert step["gpu_predicted_ms"] == pytest.approx(predicted_step, abs=5e-4)
    # NB: the table's error is from the unrounded prediction: 0.1 point either way
    assert step["error_pct"] == pytest.approx(100 * (step["gpu_predicted_ms"] / 0.09 - 1), abs=0.1)
    printed = capsys.readouterr().out
    assert printed == t.render_text(result)
    assert md.read_text() == t.render_markdown(result)
    assert "| stand-in | 0.090 | 100% | 0.090 |" in md.read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: it would measure")
def test_without_a_gpu_it_says_so_in_one_line(capsys):
    assert bench.main([]) == 2
    assert capsys.readouterr().err == (
        "error: no CUDA GPU here (run on one, or --stand-in to test the pipeline)\n"
    )


def test_an_unknown_gpu_is_one_line(capsys):
    assert bench.main(["--stand-in", "--gpu", "B200"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown GPU 'B200'; known: H200, ") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("op", "launches"),
    [
        (torch.ops.aten.mm.default, True),
        (torch.ops.aten._foreach_add_.List, True),  # returns nothing: the optimizer's kernels
        (torch.ops.aten._fused_adamw_.default, True),
        (torch.ops.aten._local_scalar_dense.default, True),  # .item(): a copy back
        (torch.ops.aten.size.default, False),
        (torch.ops.aten.is_pinned.default, False),
        (torch.ops.prim.device.default, False),
    ],
)
def test_ops_that_may_run_a_kernel_are_timed_and_metadata_is_not(op: object, launches: bool):
    assert bench._may_launch(op) is launches
