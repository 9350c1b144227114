"""--fake-cuda on the everyday code of a training script: formatting and printing GPU tensors
(what a print reads, counted as on a GPU: torch/_tensor_str.py), torch.save, the memory
statistics, the RNG state, CUDA graphs, NVTX, and one line for what cannot be simulated."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import profilers
from tests import conftest
from tests.profiler_helpers import copies, line_of, site_at

pytestmark = [
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
    pytest.mark.usefixtures("both_paths"),  # the exact counts hold on both counting paths
]


def profiled(fn, devices: int = 1):
    from profilers.fake_cuda import fake_cuda

    with fake_cuda(devices) as harness, profilers.profile(kernel_timing=False) as prof:
        fn()
    return prof.report(), harness


def test_a_loss_formats_as_its_item_one_sync():
    out: list[str] = []

    def work():
        model = nn.Linear(8, 1).to("cuda")
        loss = model(torch.randn(4, 8).to("cuda")).square().mean()
        out.append(f"loss {loss:.4f}")  # @format
        out.append(f"{loss}")  # @plain

    r, _ = profiled(work)
    assert out == ["loss 0.0000", "0.0"]
    for marker in ("format", "plain"):
        site = site_at(r, line_of(marker))
        assert site.syncs.to_dict() == {"count": 1, "by_cause": {"item": 1}}
        assert site.d2h.counts() == copies(count=1, bytes=4, pageable=1)


def test_printing_shows_placeholders_as_a_gpu_prints_them():
    shown: list[str] = []

    def work():
        shown.append(repr(torch.randn(4).to("cuda")))
        shown.append(str(torch.arange(3).to("cuda:1")))
        shown.append(f"{torch.randn(2, 2, dtype=torch.float16).to('cuda')}")
        w = nn.Linear(2, 1).to("cuda").weight
        shown.append(repr(w))
        shown.append(repr(w * 2))
        shown.append(repr(torch.empty(0, 3).to("cuda")))

    profiled(work, devices=2)
    assert shown == [
        "tensor([0., 0., 0., 0.], device='cuda:0')",
        "tensor([0, 0, 0], device='cuda:1')",
        "tensor([[0., 0.],\n        [0., 0.]], device='cuda:0', dtype=torch.float16)",
        "Parameter containing:\ntensor([[0., 0.]], device='cuda:0', requires_grad=True)",
        "tensor([[0., 0.]], device='cuda:0', grad_fn=<MulBackward0>)",
        "tensor([], device='cuda:0', size=(0, 3))",
    ]


def test_a_print_counts_what_it_reads_by_dtype():
    def work():
        ints = torch.arange(3).to("cuda")
        floats = torch.randn(4).to("cuda")
        print(ints)  # @print_int
        print(floats)  # @print_float

    r, harness = profiled(work)
    ints = site_at(r, line_of("print_int"))
    # f"{value}" of each element: 3 .item() of 8 bytes; then one tolist() of the row (24 bytes)
    assert ints.d2h.counts() == copies(count=3 + 1, bytes=3 * 8 + 24, pageable=4)
    assert ints.syncs.by_cause == {"item": 3, "copy_to_host": 1}
    floats = site_at(r, line_of("print_float"))
    # masked_select of the finite non-zero values (every element kept: 4), then bool reads of
    # one byte: 4 `value != ceil(value)`, 2 for sci_mode's first two tests, 1 `if sci_mode`
    # and 4 more in format() (sci_mode stays a tensor); 4 float32 widths; one tolist() (16 B)
    bools, widths = 4 + 2 + 1 + 4, 4
    assert floats.syncs.by_cause == {
        "data_dependent_shape": 1,
        "item": bools + widths,
        "copy_to_host": 1,
    }
    assert floats.d2h.counts() == copies(
        count=bools + widths + 1, bytes=bools + widths * 4 + 16, pageable=bools + widths + 1
    )
    assert harness.placeholders.values == 3 + bools + widths


def test_printing_a_host_tensor_reads_nothing_from_the_gpu():
    def work():
        print(torch.arange(3))  # @host

    r, _ = profiled(work)
    assert not [s for s in r.sites if s.line == line_of("host") and s.syncs.count]
