"""The model of a named GPU (profilers/timing/gpu_model/): published figures looked up by name,
FLOPs and bytes of known ops exact, and a roofline worked out by hand. Meta tensors throughout:
only shapes and dtypes matter."""

from __future__ import annotations

import math

import pytest
import torch

from profilers.timing.gpu_model import SPECS, UnknownGpuError, gpu_spec
from profilers.timing.gpu_model.rates import (
    COPY_LATENCY_NS,
    MEMORY_FRACTION,
    MIN_KERNEL_NS,
    copy_ns,
    fill_ns,
    memory_check,
    pcie_bytes_per_s,
)
from profilers.timing.gpu_model.roofline import op_cost, predict_op_ns

aten = torch.ops.aten


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, device="meta", dtype=dtype)


def test_a_matmuls_flops_and_bytes_are_exact():
    a, b = meta(64, 128), meta(128, 32)
    cost = op_cost(aten.mm.default, (a, b), {}, aten.mm.default(a, b), allow_tf32=False)
    assert cost.flops == 2 * 64 * 128 * 32 == 524_288
    assert cost.nbytes == (64 * 128 + 128 * 32 + 64 * 32) * 4 == 57_344
    assert (cost.dtype, cost.tensor_cores, cost.tiles) == ("float32", True, 1)


def test_a_convolutions_flops_and_bytes_are_exact():
    x, w, bias = meta(8, 3, 32, 32), meta(16, 3, 3, 3), meta(16)
    args = (x, w, bias, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    out = aten.convolution.default(*args)
    assert tuple(out.shape) == (8, 16, 32, 32)
    cost = op_cost(aten.convolution.default, args, {}, out, allow_tf32=True)
    # 2 FLOPs per multiply-add, each output element sums 3 x 3 x 3 products.
    assert cost.flops == 2 * (8 * 16 * 32 * 32) * (3 * 3 * 3) == 7_077_888
    assert cost.nbytes == (8 * 3 * 32 * 32 + 16 * 27 + 16 + 8 * 16 * 32 * 32) * 4 == 624_384
    assert cost.dtype == "tf32"  # cuDNN's default for float32 convolutions
    assert cost.tiles == math.ceil(8 * 32 * 32 / 128) * 1 == 64


def test_an_add_is_one_flop_per_output_element_and_views_cost_nothing():
    a = meta(1000, dtype=torch.float16)
    cost = op_cost(aten.add.Tensor, (a, a), {}, aten.add.Tensor(a, a))
    assert (cost.flops, cost.nbytes, cost.dtype, cost.tensor_cores) == (
        1000,
        6000,
        "float16",
        False,
    )
    h100 = gpu_spec("H100")
    assert predict_op_ns(h100, aten.add.Tensor, (a, a), {}, a) == MIN_KERNEL_NS
    view = aten.view.default(a, [10, 100])
    assert predict_op_ns(h100, aten.view.default, (a, [10, 100]), {}, view) == 0


def test_a_matmuls_time_on_an_h100_is_the_roofline_worked_out_by_hand():
    a = meta(4096, 4096, dtype=torch.bfloat16)
    out = aten.mm.default(a, a)
    # 2 x 4096^3 FLOPs on the tensor cores (989.4 TFLOP/s bfloat16 dense, H100 SXM datasheet);
    # 32 x 32 tiles of 128 x 128 over 132 SMs: 8 waves, 1,024 of 1,056 SM slots busy.
    compute_s = 2 * 4096**3 / (989.4e12 * 1024 / 1056)
    # 3 matrices of 4096^2 bfloat16 at 90% of 3.35 TB/s: well under the compute time.
    memory_s = 3 * 4096 * 4096 * 2 / (3.35e12 * MEMORY_FRACTION)
    assert memory_s < compute_s
    assert predict_op_ns(gpu_spec("H100"), aten.mm.default, (a, a), {}, out) == round(
        compute_s * 1e9
    )  # 143,252 ns
    # In float32 without TF32 it runs on the CUDA cores (66.9 TFLOP/s).
    f = meta(4096, 4096)
    got = predict_op_ns(gpu_spec("H100-SXM"), aten.mm.default, (f, f), {}, f, allow_tf32=False)
    assert got == round(2 * 4096**3 / (66.9e12 * 1024 / 1056) * 1e9)


def test_a_memory_bound_op_runs_at_the_achievable_bandwidth():
    a = meta(64 * 1024 * 1024)  # 256 MiB read twice, written once
    out = aten.mul.Tensor(a, a)
    l4 = gpu_spec("l4")
    expected = round(3 * 256 * 2**20 / (300e9 * MEMORY_FRACTION) * 1e9)
    assert predict_op_ns(l4, aten.mul.Tensor, (a, a), {}, out) == expected


def test_copies_go_at_the_buss_rate_pinned_or_staged():
    h100, t4 = gpu_spec("h100"), gpu_spec("T4")
    gen5 = 32e9 * 128 / 130 / 8 * 16 * 256 / 280  # per direction, TLP payload share
    assert pcie_bytes_per_s(h100) == pytest.approx(gen5)
    assert copy_ns(h100, "h2d", 10**9) == COPY_LATENCY_NS + round(1e9 / gen5 * 1e9)
    # Pageable: the host's staging copy (12.8 GB/s) in series with the link.
    assert copy_ns(t4, "h2d", 10**9, pinned=False) == COPY_LATENCY_NS + round(
        1e9 * (1 / (8e9 * 128 / 130 / 8 * 16 * 256 / 280) + 1 / 12.8e9) * 1e9
    )
    assert copy_ns(h100, "p2p", 450 * 10**6) == COPY_LATENCY_NS + 1_000_000  # NVLink 450 GB/s
    assert copy_ns(t4, "p2p", 10**6) == copy_ns(t4, "h2d", 10**6)  # no NVLink: PCIe
    assert fill_ns(h100, 1024) == MIN_KERNEL_NS


def test_a_peak_that_does_not_fit_says_so_with_its_line():
    l4 = gpu_spec("L4")
    assert memory_check(l4, 20 * 2**30) is None
    assert memory_check(l4, int(31.2 * 2**30), "train.py:88") == (
        "would not fit on an L4: 31.2 GiB at train.py:88 (the L4 has 24 GiB)"
    )
    assert memory_check(gpu_spec("T4"), 17 * 2**30).startswith("would not fit on a T4: 17.0 GiB")


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("h100", "H100-SXM"),
        ("H100-SXM", "H100-SXM"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("h100 pcie", "H100-PCIe"),
        ("rtx4090", "RTX-4090"),
        ("GeForce RTX 4090", "RTX-4090"),
        ("A100-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("Tesla T4", "T4"),
        ("gtx1080", "GTX-1080"),
        ("GTX 980", "GTX-980"),
        ("k80", "K80"),
        ("H200", "H200"),
    ],
)
def test_names_are_looked_up_forgivingly(name: str, canonical: str):
    assert gpu_spec(name).name == canonical


@pytest.mark.parametrize(
    ("device_name", "canonical", "memory_gib", "bandwidth"),
    [
        # torch.cuda.get_device_name() / NVML on the Hopper cards a lent machine may have
        ("NVIDIA H100 80GB HBM3", "H100-SXM", 80, 3.35e12),
        ("NVIDIA H100 SXM5 80GB", "H100-SXM", 80, 3.35e12),
        ("NVIDIA H100 PCIe", "H100-PCIe", 80, 2.0e12),
        ("NVIDIA H100 NVL", "H100-NVL", 94, 3.9e12),
        ("NVIDIA H200", "H200", 141, 4.8e12),
        ("NVIDIA H200 141GB HBM3e", "H200", 141, 4.8e12),
        ("NVIDIA H200 NVL", "H200-NVL", 141, 4.8e12),
    ],
)
def test_a_hopper_devices_own_name_finds_its_variant(
    device_name: str, canonical: str, memory_gib: int, bandwidth: float
):
    spec = gpu_spec(device_name)
    assert (spec.name, spec.memory_bytes, spec.memory_bytes_per_s) == (
        canonical,
        memory_gib * 2**30,
        bandwidth,
    )


def test_the_nvl_cards_are_rated_apart_from_the_sxm_ones():
    # Datasheets, "with sparsity" halved: H100 NVL bfloat16 1,671 -> 835.5; SXM 1,979 -> 989.4.
    assert gpu_spec("NVIDIA H100 NVL").peak_flops("bfloat16", tensor_cores=True) == 835.5e12
    assert gpu_spec("NVIDIA H200 NVL").peak_flops("tf32", tensor_cores=True) == 417.5e12
    assert gpu_spec("NVIDIA H200").peak_flops("bfloat16", tensor_cores=True) == 989.4e12
    assert gpu_spec("NVIDIA H100 PCIe").sms == 114 and gpu_spec("NVIDIA H100 NVL").sms == 132


@pytest.mark.parametrize(
    "device_name",
    # a size the table's card does not have: another card, whose memory check would be wrong
    ["Tesla V100-SXM2-32GB", "NVIDIA H100 64GB HBM3", "NVIDIA A100 80GB PCIe"],
)
def test_a_memory_size_the_table_does_not_have_is_unknown(device_name: str):
    with pytest.raises(UnknownGpuError):
        gpu_spec(device_name)


def test_an_unknown_gpu_is_a_typed_error_listing_the_known_ones():
    with pytest.raises(UnknownGpuError) as err:
        gpu_spec("B200")
    assert err.value.name == "B200"
    assert "H100-SXM" in err.value.known and "GTX-980" in err.value.known
    assert str(err.value).startswith("unknown GPU 'B200'; known: H200, H100-SXM, ")


def test_the_table_covers_the_gpus_users_have_with_dense_peaks():
    names = {s.name for s in SPECS}
    wanted = "H200 H100-SXM A100-80GB A100-40GB L40S L4 A10 T4 V100 RTX-4090 RTX-3090 P100 K80"
    assert set(wanted.split()) | {"GTX-1080", "GTX-980"} <= names
    for s in SPECS:
        assert s.source and s.memory_bytes > 0 and s.memory_bytes_per_s > 0
        for dtype, rate in s.tensor_flops.items():
            # Tensor cores never rate below the CUDA cores (GeForce TF32: equal).
            assert rate >= s.peak_flops(dtype, tensor_cores=False), (s.name, dtype)
    # Dense figures: the datasheets' "with sparsity" ones halved (A100: 624 -> 312).
    assert gpu_spec("a100").tensor_flops["bfloat16"] == 312e12
    assert gpu_spec("h100").peak_flops("float8", tensor_cores=True) == 1978.9e12
    assert gpu_spec("t4").peak_flops("bfloat16", tensor_cores=True) == 8.1e12  # no bf16 cores


def test_a_training_batch_norm_reads_its_input_twice_and_its_backward_both_inputs_twice():
    x, w = meta(8, 16, 4, 4), meta(16)
    n = 8 * 16 * 4 * 4 * 4  # bytes of x (and of y, dy, dx)
    train = (x, w, w, w, w, True, 0.1, 1e-5)
    out = aten.native_batch_norm.default(*train)
    once = sum(t.numel() * t.element_size() for t in (x, w, w, w, w, *out))
    # statistics first, then normalize: x read twice
    assert op_cost(aten.native_batch_norm.default, train, {}, out).nbytes == once + n
    evaluation = (x, w, w, w, w, False, 0.1, 1e-5)
    out = aten.native_batch_norm.default(*evaluation)
    assert op_cost(aten.native_batch_norm.default, evaluation, {}, out).nbytes == once
    back = (x, x, w, w, w, w, w, True, 1e-5, [True, True, True])
    grads = aten.native_batch_norm_backward.default(*back)
    once = sum(t.numel() * t.element_size() for t in (x, x, w, w, w, w, w, *grads))
    # the gradient's sums first, then dx: dy and x read twice
    assert op_cost(aten.native_batch_norm_backward.default, back, {}, grads).nbytes == once + 2 * n


def test_a_tensor_core_convolution_over_nchw_pays_the_transposes_and_over_nhwc_does_not():
    # big enough to be far above the shortest kernel: 64 x 64 x 56 x 56 halves, 25.7 MB
    x, w = meta(64, 64, 56, 56, dtype=torch.float16), meta(64, 64, 1, 1, dtype=torch.float16)
    args = (x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    out = aten.convolution.default(*args)
    nchw = op_cost(aten.convolution.default, args, {}, out)
    # input and output read and written once more in the other layout (the 1x1 weight too)
    moved = 2 * (x.numel() + w.numel() + out.numel()) * 2
    assert nchw.transpose_bytes == moved
    a100, v100_fp32 = gpu_spec("A100"), gpu_spec("V100")
    no_transpose = op_cost(aten.convolution.default, args, {}, out)
    no_transpose.transpose_bytes = 0
    extra_ns = round(moved / (a100.memory_bytes_per_s * MEMORY_FRACTION) * 1e9)
    from profilers.timing.gpu_model.roofline import kernel_ns

    assert kernel_ns(a100, nchw) - kernel_ns(a100, no_transpose) == pytest.approx(extra_ns, abs=1)
    # laid out channels-last (a model moved with memory_format=torch.channels_last: its 1x1
    # weight too, told by its strides): cuDNN runs NHWC, nothing to transpose
    xl, wl = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))
    args = (xl, wl, *args[2:])
    assert (
        op_cost(aten.convolution.default, args, {}, aten.convolution.default(*args)).transpose_bytes
        == 0
    )
    # float32 on a GPU without TF32 runs on the CUDA cores: no transposes charged there
    x32, w32 = meta(64, 64, 56, 56), meta(64, 64, 1, 1)
    args = (x32, w32, *args[2:])
    out32 = aten.convolution.default(*args)
    cost = op_cost(aten.convolution.default, args, {}, out32, allow_tf32=True)
    plain = op_cost(aten.convolution.default, args, {}, out32, allow_tf32=True)
    plain.transpose_bytes = 0
    assert cost.transpose_bytes > 0 and kernel_ns(v100_fp32, cost) == kernel_ns(v100_fp32, plain)
