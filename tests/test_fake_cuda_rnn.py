"""--fake-cuda runs recurrent networks as a GPU without cuDNN does: nn.LSTM, nn.GRU and their
cells take the fused CUDA kernel per step and layer (``_thnn_fused_lstm_cell``,
``_thnn_fused_gru_cell``, aten/src/ATen/native/RNN.cpp), which the CPU has no kernel for. The
word-language-model example of pytorch/examples died on it; now it runs, with the values and
gradients the CPU's own (unfused) LSTM and GRU give, and the copies counted as a GPU makes them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import profilers
from tests import conftest

pytestmark = [
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
    pytest.mark.fake_cuda,
]


def _fake_run(model: nn.Module, x: torch.Tensor) -> tuple[profilers.Report, list[torch.Tensor]]:
    """Forward and backward of ``model`` on the fake GPU: the report, and the output and the
    parameters' gradients read back (``model`` back on the CPU, its gradients cleared)."""
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda(1), profilers.profile(kernel_timing=False) as prof:
        gpu = model.to("cuda")
        out = gpu(x.to("cuda"))
        out = out[0] if isinstance(out, tuple) else out
        out.square().sum().backward()
        got = [out.detach().cpu()] + [p.grad.cpu() for p in gpu.parameters()]
        gpu.to("cpu")
        gpu.zero_grad(set_to_none=True)
    return prof.report(), got


@pytest.mark.usefixtures("both_values", "both_paths")
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    "make",
    [
        lambda bias: nn.LSTM(5, 7, num_layers=2, bias=bias),
        lambda bias: nn.GRU(5, 7, num_layers=2, bias=bias),
        lambda bias: nn.LSTMCell(5, 7, bias=bias),
        lambda bias: nn.GRUCell(5, 7, bias=bias),
    ],
    ids=["LSTM", "GRU", "LSTMCell", "GRUCell"],
)
def test_lstm_and_gru_run_forward_and_back_with_the_cpus_values(make, bias, both_values):
    torch.manual_seed(0)
    model = make(bias)
    x = torch.randn(6, 3, 5) if isinstance(model, nn.RNNBase) else torch.randn(3, 5)
    params = len(list(model.parameters()))
    assert params == (8 if isinstance(model, nn.RNNBase) else 4) // (1 if bias else 2)

    r, got = _fake_run(model, x)

    # copies: the parameters and the input up; the output, each gradient and (model.to("cpu"))
    # each parameter and its gradient down; each a blocking copy, so a sync each
    assert r.totals.h2d.count == params + 1
    assert r.totals.d2h.count == 1 + params + 2 * params
    assert r.totals.syncs.count == r.totals.h2d.count + r.totals.d2h.count
    if both_values == "real":
        out = model(x)
        out = out[0] if isinstance(out, tuple) else out
        out.square().sum().backward()
        want = [out.detach()] + [p.grad for p in model.parameters()]
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
