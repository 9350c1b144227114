"""--fake-cuda runs what a GPU runs in mixed precision: autocast in float16 and bfloat16 with
GradScaler, softmax's ``half_to_float`` kernel, attention in every dtype, fused and foreach
optimizers; with real values and placeholders, on both counting paths, each copy and sync
counted as a GPU makes it (the truths derived from PyTorch's source, cited at each)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import profilers
from tests import conftest
from tests.helpers import run_gpuwatch
from tests.profiler_helpers import copies, line_at, line_of, torch_release

pytestmark = [
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
    pytest.mark.fake_cuda,
]


def profiled(fn) -> tuple[profilers.Report, object]:
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda(1) as harness, profilers.profile(kernel_timing=False) as prof:
        fn()
    return prof.report(), harness


def no_syncs_but(r: profilers.Report, **by_cause: int) -> None:
    assert r.totals.syncs.to_dict() == {"count": sum(by_cause.values()), "by_cause": by_cause}


# -- softmax from half to float ----------------------------------------------------------------


@pytest.mark.usefixtures("both_values", "both_paths")
def test_softmax_of_half_into_float_runs_the_gpus_one_kernel_forward_and_back(both_values):
    # NB: aten/src/ATen/native/SoftMax.cpp: a CUDA Half tensor asked for Float goes to
    # _softmax(x, dim, half_to_float=True) (no cast op); the CPU's kernel refuses that.
    torch.manual_seed(0)
    x = torch.randn(4, 8, dtype=torch.float16)
    got: dict[str, torch.Tensor] = {}

    def work():
        xg = x.to("cuda").requires_grad_()  # @h2d
        s = torch.softmax(xg, -1, dtype=torch.float32)
        ls = F.log_softmax(xg, -1, dtype=torch.float32)
        (s * torch.arange(8.0).to("cuda")).sum().add(ls.sum()).backward()  # @weights
        got["s"], got["ls"], got["grad"] = s.cpu(), ls.cpu(), xg.grad.cpu()  # @d2h

    r, _ = profiled(work)
    assert {k: v.dtype for k, v in got.items()} == {
        "s": torch.float32,
        "ls": torch.float32,
        "grad": torch.float16,
    }
    if both_values == "real":  # the values a GPU gives: computed in float from the half input
        ref = x.float().requires_grad_()
        (torch.softmax(ref, -1) * torch.arange(8.0)).sum().add(ref.log_softmax(-1).sum()).backward()
        torch.testing.assert_close(got["s"], torch.softmax(x.float(), -1))
        torch.testing.assert_close(got["ls"], torch.log_softmax(x.float(), -1))
        # each gradient made in float, then half (as input_dtype asks), then summed in half
        torch.testing.assert_close(got["grad"], ref.grad.half(), atol=1e-3, rtol=1e-3)
    # 32 halves in (64 B), 8 floats in; out: 2 x 32 floats (128 B each) and 32 halves (64 B)
    assert line_at(r, line_of("h2d")).h2d.counts() == copies(count=1, bytes=64, pageable=1)
    assert line_at(r, line_of("weights")).h2d.counts() == copies(count=1, bytes=32, pageable=1)
    assert r.totals.d2h.counts() == copies(count=3, bytes=128 + 128 + 64, pageable=3)
    no_syncs_but(r, copy_to_device=2, copy_to_host=3)


@pytest.mark.usefixtures("both_values")
def test_a_half_to_float_softmax_of_bfloat16_log_softmax_is_refused_in_torchs_words():
    def work():
        x = torch.randn(2, 3, dtype=torch.bfloat16).to("cuda")
        torch._log_softmax(x, -1, True)

    if torch_release() < (2, 11):
        # NB: the refusal is the decomposition's (torch/_decomp/decompositions.py): a bare
        # ``assert x.dtype == torch.half`` before torch 2.11, these words from 2.11
        with pytest.raises(AssertionError):
            profiled(work)
        return
    with pytest.raises(Exception, match=r"half_to_float is True but x.dtype is torch.bfloat16"):
        profiled(work)


# -- attention ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("both_values")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_attention_runs_in_every_dtype_with_and_without_masks(dtype, both_values):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=dtype) for _ in range(3))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    additive = torch.randn(5, 5, dtype=dtype)
    cases = [{}, {"is_causal": True}, {"attn_mask": causal}, {"attn_mask": additive}]
    got: list[torch.Tensor] = []

    def work():
        qg, kg = q.to("cuda").requires_grad_(), k.to("cuda")
        vg = v.to("cuda")
        masks = {"attn_mask": causal.to("cuda")}, {"attn_mask": additive.to("cuda")}
        for kw in [{}, {"is_causal": True}, *masks]:
            out = F.scaled_dot_product_attention(qg, kg, vg, **kw)
            out.float().sum().backward()
            got.append(out.cpu())
        got.append(qg.grad.cpu())

    r, _ = profiled(work)
    assert [t.dtype for t in got] == [dtype] * 5
    if both_values == "real":
        for kw, out in zip(cases, got, strict=False):
            kw = {n: m.float() if m is additive else m for n, m in kw.items()}
            expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), **kw)
            torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)
    size = dtype.itemsize
    # in: q, k, v (2*3*5*4 = 120 elements each), the masks (25 bools, 25 of dtype)
    assert r.totals.h2d.counts() == copies(
        count=5, bytes=3 * 120 * size + 25 + 25 * size, pageable=5
    )
    # out: 4 outputs and q's gradient
    assert r.totals.d2h.counts() == copies(count=5, bytes=5 * 120 * size, pageable=5)
    no_syncs_but(r, copy_to_device=5, copy_to_host=5)


@pytest.mark.usefixtures("both_values", "both_paths")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_attention_under_autocast_computes_in_autocasts_dtype_as_a_gpu(dtype):
    # NB: aten/src/ATen/autocast_mode.cpp lists scaled_dot_product_attention lower_precision_fp
    # for CUDA: float32 inputs, float16/bfloat16 output; the casts are on the GPU, no copy.
    got: list[torch.dtype] = []

    def work():
        x = torch.randn(1, 2, 4, 8).to("cuda")  # @x
        with torch.autocast("cuda", dtype=dtype):
            got.append(F.scaled_dot_product_attention(x, x, x, is_causal=True).dtype)
        got.append(F.scaled_dot_product_attention(x, x, x).dtype)

    r, _ = profiled(work)
    assert got == [dtype, torch.float32]
    assert r.totals.h2d.counts() == copies(count=1, bytes=64 * 4, pageable=1)
    assert r.totals.d2d.count == 0
    no_syncs_but(r, copy_to_device=1)


# -- GradScaler and the optimizers -------------------------------------------------------------

STEPS = 3


def amp_steps(opt_kw: dict[str, object], dtype: torch.dtype = torch.float16) -> list[str]:
    """A few steps of autocast + GradScaler on a small conv net; returns the loss dtypes."""
    dtypes: list[str] = []
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5)
    ).to("cuda")  # @model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **opt_kw)  # type: ignore[arg-type]
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(STEPS):
        x = torch.randn(2, 3, 8, 8).to("cuda", non_blocking=True)
        y = torch.randint(0, 5, (2,)).to("cuda", non_blocking=True)
        with torch.autocast("cuda", dtype=dtype):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        dtypes.append(f"{str(logits.dtype)[6:]}/{str(loss.dtype)[6:]}")
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)  # @scaler_step
        scaler.update()  # @scaler_update
    return dtypes


@pytest.mark.usefixtures("both_values", "both_paths")
@pytest.mark.parametrize(
    "opt_kw", [{}, {"foreach": False}, {"fused": True}], ids=["foreach", "for-loop", "fused"]
)
def test_gradscaler_reads_found_inf_once_a_step_unless_the_optimizer_is_fused(opt_kw):
    dtypes: list[str] = []
    r, _ = profiled(lambda: dtypes.extend(amp_steps(opt_kw)))
    # autocast: Linear's output in float16, cross_entropy (log_softmax) in float32
    assert dtypes == ["float16/float32"] * STEPS
    step = line_at(r, line_of("scaler_step"))
    if opt_kw.get("fused"):
        # NB: torch/amp/grad_scaler.py step(): an optimizer with _step_supports_amp_scaling
        # (fused Adam/AdamW/SGD/Adagrad) gets found_inf as a tensor and its kernel skips the
        # update on the GPU: nothing is read back
        assert step.syncs.count == 0 and step.d2h.count == 0
        no_syncs_but(r, copy_to_device=4)
    else:
        # NB: grad_scaler.py _maybe_opt_step: sum(v.item() for v in found_inf_per_device)
        # per step, one GPU here: one float32 read (4 B) and one sync a step
        assert step.syncs.to_dict() == {"count": STEPS, "by_cause": {"item": STEPS}}
        assert step.d2h.counts() == copies(count=STEPS, bytes=4 * STEPS, pageable=STEPS)
        no_syncs_but(r, copy_to_device=4, item=STEPS)
    # NB: unscale_ -> _unscale_grads_: _MultiDeviceReplicator.get() copies inv_scale and
    # found_inf to the grads' device with .to(copy=True, non_blocking=True): 2 float32 a step
    assert step.d2d.counts() == copies(count=2 * STEPS, bytes=8 * STEPS, non_blocking=2 * STEPS)
    # NB: update(): found_inf .to(_scale.device) is the same device (no op), then
    # _amp_update_scale_ on the GPU: no copy, no sync
    update = [s for s in r.lines if s.line == line_of("scaler_update")]
    assert not [s for s in update if s.syncs.count or s.d2h.count or s.d2d.count]
    # the model's 4 tensors move blocking, each batch's two without blocking
    assert line_at(r, line_of("model")).h2d.count == 4
    assert r.totals.h2d.counts()["non_blocking"] == 2 * STEPS


@pytest.mark.usefixtures("both_values", "both_paths")
def test_bfloat16_autocast_runs_with_gradscaler_too():
    dtypes: list[str] = []
    r, _ = profiled(lambda: dtypes.extend(amp_steps({"fused": True}, torch.bfloat16)))
    assert dtypes == ["bfloat16/float32"] * STEPS
    no_syncs_but(r, copy_to_device=4)


FUSED = [
    (torch.optim.AdamW, {"fused": True}),
    (torch.optim.Adam, {"fused": True, "lr": torch.tensor(0.01)}),  # _fused_adam_.tensor_lr
    (torch.optim.SGD, {"fused": True, "momentum": 0.9}),
    (torch.optim.Adagrad, {"fused": True}),
    (torch.optim.AdamW, {"foreach": True}),
    (torch.optim.SGD, {"foreach": True, "momentum": 0.9}),
]


@pytest.mark.usefixtures("both_values", "both_paths")
@pytest.mark.parametrize(("cls", "kw"), FUSED, ids=lambda p: getattr(p, "__name__", str(p)))
def test_fused_and_foreach_optimizers_step_as_on_a_gpu(cls, kw, both_values):
    torch.manual_seed(0)
    start = nn.Linear(4, 3)
    x = torch.randn(5, 4)

    def train(device: str) -> list[torch.Tensor]:
        model = nn.Linear(4, 3)
        model.load_state_dict(start.state_dict())
        model.to(device)
        opt = cls(model.parameters(), **kw)
        for _ in range(2):
            model(x.to(device)).square().sum().backward()
            opt.step()  # @opt_step
            opt.zero_grad()
        return [p.detach().cpu() for p in model.parameters()]

    on_cpu = train("cpu")
    got: list[torch.Tensor] = []
    if cls is torch.optim.Adagrad and kw.get("fused") and torch_release() < (2, 12):
        # NB: torch 2.9-2.11 have no fused Adagrad for CUDA and refuse it on a GPU
        # (torch/optim/adagrad.py: _device_dtype_check_for_fused(p, cuda_unsupported=True)):
        # the fake GPU refuses it in the same words
        with pytest.raises(RuntimeError, match=r"`fused=True` requires all the params"):
            profiled(lambda: got.extend(train("cuda")))
        return
    r, _ = profiled(lambda: got.extend(train("cuda")))
    if both_values == "real":  # the CPU's kernels of the same optimizer
        for a, b in zip(got, on_cpu, strict=True):
            torch.testing.assert_close(a, b)
    step = [s for s in r.lines if s.line == line_of("opt_step")]
    assert not [s for s in step if s.syncs.count or s.d2h.count or s.d2d.count or s.h2d.count]
    # the model's weight and bias, 2 batches in; 2 tensors out
    no_syncs_but(r, copy_to_device=4, copy_to_host=2)


# -- a timm-like script under gpuwatch profile --fake-cuda -------------------------------------

TIMM_LIKE = """\
import sys
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10),
).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda")
for step in range(4):
    x = torch.randn(4, 3, 16, 16).cuda(non_blocking=True)
    y = torch.randint(0, 10, (4,)).cuda(non_blocking=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
print("trained", loss.dtype)
"""


def _line(text: str) -> int:
    """The line of TIMM_LIKE that holds ``text``."""
    return next(i for i, t in enumerate(TIMM_LIKE.splitlines(), 1) if text in t)


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    [[], ["--fake-values", "placeholder", "--no-kernel-timing"]],
    ids=["real-values", "placeholders-fast-path"],
)
def test_a_timm_like_amp_script_runs_under_fake_cuda_with_a_gpus_counts(tmp_path, flags):
    (tmp_path / "train.py").write_text(TIMM_LIKE)
    done = run_gpuwatch(
        ["profile", "--fake-cuda", *flags, "--json", "run.json", "train.py"], tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "trained torch.float32" in done.stdout
    r = json.loads((tmp_path / "run.json").read_text())
    lines = {s["line"]: s for s in r["sites"] if s["file"] == "train.py"}
    moved, stepped = _line(").cuda()"), _line("scaler.step(opt)")
    # .cuda() of 9 tensors: conv w/b, BatchNorm's w/b/running mean/var/num_batches_tracked,
    # Linear w/b: 9 blocking copies
    assert lines[moved]["h2d"]["count"] == 9 and lines[moved]["syncs"]["count"] == 9
    # grad_scaler.py _maybe_opt_step: one found_inf .item() a step, 4 bytes each
    assert lines[stepped]["syncs"] == {"count": 4, "by_cause": {"item": 4}}
    assert lines[stepped]["d2h"]["count"] == 4 and lines[stepped]["d2h"]["bytes"] == 16
    assert lines[stepped]["d2d"]["count"] == 8  # inv_scale and found_inf replicated, each step
    assert r["totals"]["syncs"] == {"count": 13, "by_cause": {"copy_to_device": 9, "item": 4}}
    assert r["totals"]["h2d"]["non_blocking"] == 8
    assert r["totals"]["steps"]["count"] == 4
    # made inside torch/amp/grad_scaler.py (its found_inf read first), and a valid report
    assert [f["file"] for f in lines[stepped]["library"]] == ["torch/amp/grad_scaler.py"] * 2
    assert lines[stepped]["library"][0]["syncs"] == {"count": 4, "by_cause": {"item": 4}}
    from gpuwatch.output.load import problem

    assert problem(r) is None


@pytest.mark.usefixtures("both_paths")
def test_gradscaler_skips_a_step_with_inf_gradients_and_backs_off_with_real_values():
    # NB: grad_scaler.py: _amp_foreach_non_finite_check_and_unscale_ sets found_inf, the
    # step is skipped (_maybe_opt_step), _amp_update_scale_ halves the scale (backoff 0.5)
    from profilers.fake_cuda.harness import fake_cuda

    got: list[object] = []

    def work():
        model = nn.Linear(2, 1).to("cuda")
        before = model.weight.detach().clone()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda")
        loss = model(torch.ones(1, 2).to("cuda")).sum() * float("inf")
        scaler.scale(loss).backward()
        scaler.step(opt)  # @inf_step
        scaler.update()
        got.append(bool(torch.equal(model.weight, before)))  # @unchanged
        got.append(scaler.get_scale())  # @scale

    with fake_cuda(1, values="real"), profilers.profile(kernel_timing=False) as prof:
        work()
    assert got == [True, 65536.0 * 0.5]
    r = prof.report()
    assert line_at(r, line_of("inf_step")).syncs.to_dict() == {"count": 1, "by_cause": {"item": 1}}
    assert line_at(r, line_of("scale")).syncs.to_dict() == {"count": 1, "by_cause": {"item": 1}}
