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


WORD_LM = """\
import torch
from torch import nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.LSTM(4, 6).to(dev)
head = nn.Linear(6, 3).to(dev)
lr = 0.5
for i in range(3):
    x = torch.randn(5, 2, 4).to(dev)
    out, _ = model(x)
    loss = head(out).square().mean()
    model.zero_grad()
    head.zero_grad()
    loss.backward()
    for p in [*model.parameters(), *head.parameters()]:
        p.data.add_(p.grad, alpha=-lr)
with open("model.pt", "wb") as f:
    torch.save(model, f)
with open("model.pt", "rb") as f:
    model = torch.load(f, weights_only=False)
print("loaded on", next(model.parameters()).device.type)
"""


@pytest.mark.slow
def test_a_word_language_model_like_script_runs_saves_and_loads_under_fake_cuda(tmp_path):
    """pytorch/examples' word_language_model in small: an LSTM trained by hand, saved whole
    and loaded back with no map_location, as on a GPU. It died twice under --fake-cuda (the
    fused LSTM step, then torch.load); now it runs, prints what a GPU run prints, exits 0."""
    import json

    from tests.helpers import run_gpuwatch

    (tmp_path / "lm.py").write_text(WORD_LM)
    done = run_gpuwatch(["profile", "--fake-cuda", "--json", "r.json", "lm.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "loaded on cuda\n"
    assert "Traceback" not in done.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    lines = {s["line"]: s for s in doc["sites"] if s["file"] == "lm.py"}
    assert lines[10]["h2d"]["count"] == 3  # the input, each step
    # the load: the LSTM's 4 storages, one host-to-GPU copy each; a one-time move (no hint)
    assert lines[21]["h2d"]["count"] == 4 and lines[21]["syncs"]["by_cause"] == {
        "copy_to_device": 4
    }
    assert set(lines[21]["origins"]) == {"parameter"}
    assert "lm.py:21" not in done.stderr.split("Hints", 1)[-1].split("Copies", 1)[0]
