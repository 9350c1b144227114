"""--fake-cuda on the torch people really have: the CPU-only build and the CUDA build from the
package index (what ``pip install torch`` gives on Linux), on a machine with no GPU, and on one
with GPUs (the fake ones never touch the real ones). CI runs every test that uses the fake GPU
(the ``fake_cuda`` marker) a second time in an environment with the CUDA build (.ci/run)."""

from __future__ import annotations

import pytest
import torch

from tests import conftest
from tests.helpers import run_gpuwatch

pytestmark = [
    pytest.mark.fake_cuda,
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
]

SCRIPT = """\
import torch
x = torch.ones(4).to("cuda")
print("devices", torch.cuda.device_count(), x.device)
"""


def accelerator() -> str | None:
    """What ATen's accelerator hooks say, below every Python patch (at::getAccelerator asks
    at::hasCUDA): None where there is none (a CPU-only torch raises then)."""
    try:
        return str(torch._C._get_accelerator().type)
    except RuntimeError:
        return None


def test_the_harness_takes_cudas_hooks_and_gives_them_back():
    from profilers.fake_cuda.harness import fake_cuda

    before = accelerator()
    real_gpus = torch.cuda.device_count()
    with fake_cuda(devices=3):
        assert accelerator() == "cuda"
        assert torch.cuda.device_count() == 3
        x = torch.ones(2, device="cuda:2")
        assert x.device == torch.device("cuda:2")
        # a second round of the hooks inside is a no-op, not a second swap
        from profilers.fake_cuda.build import cuda_hooks

        with cuda_hooks(3):
            assert accelerator() == "cuda"
        assert accelerator() == "cuda"
    assert accelerator() == before
    assert torch.cuda.device_count() == real_gpus
    if not torch.cuda.is_available():
        assert before != "cuda"  # no GPU: not CUDA again after, as before


def test_a_harness_that_cannot_start_is_one_error_with_no_report(monkeypatch, tmp_path):
    import profilers.fake_cuda.harness as fc
    from gpuwatch.profile.run import ProfileOptions, run_profiled
    from gpuwatch.profile.runner import Target

    def broken(devices):
        raise fc.FakeCudaUnavailable("is broken on purpose")

    monkeypatch.setattr(fc, "cuda_hooks", broken)
    script = tmp_path / "s.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    reports = []
    with pytest.raises(fc.FakeCudaUnavailable, match="broken on purpose"):
        run_profiled(
            Target(name=str(script), module=False, args=[]),
            ProfileOptions(fake_cuda=True),
            reports.append,
        )
    assert reports == []  # nothing ran: no report was built on top of the error
    assert fc.HARNESS is None


@pytest.mark.slow
def test_where_it_cannot_run_plain_and_live_say_one_line_and_exit_2(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    for live in ([], ["--live"]):
        done = run_gpuwatch(
            ["profile", *live, "--fake-cuda", "train.py"],
            tmp_path,
            CXX=str(tmp_path / "no-such-c++"),
            XDG_CACHE_HOME=str(tmp_path / "cache"),
        )
        assert done.returncode == 2, (live, done.stderr)
        assert done.stderr.startswith("gpuwatch: error: --fake-cuda could not run "), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stdout == ""  # the script never started


@pytest.mark.slow
def test_this_torch_build_runs_an_unmodified_cuda_script(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    done = run_gpuwatch(["profile", "--fake-cuda", "--fake-gpus", "2", "train.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["devices 2 cuda:0"]
    assert "SIMULATED: --fake-cuda, 2 fake GPUs" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_machine_with_gpus_the_fake_ones_never_touch_the_real_ones():
    from profilers.fake_cuda.harness import fake_cuda

    real = torch.cuda.device_count()
    allocated = torch.cuda.memory_allocated(0)
    with fake_cuda(devices=real + 2):
        assert torch.cuda.device_count() == real + 2
        x = torch.zeros(1024, 1024, device=f"cuda:{real + 1}")  # a GPU the machine lacks
        (x * 2).sum().item()
    assert torch.cuda.device_count() == real
    assert torch.cuda.memory_allocated(0) == allocated  # nothing was allocated on a real GPU
    y = torch.ones(8, device="cuda:0") * 2  # and the real GPU works as before
    assert y.sum().item() == 16.0


@pytest.mark.slow
def test_dataparallel_runs_on_fake_gpus_with_the_copies_a_gpu_makes():
    import profilers
    from profilers.fake_cuda.harness import fake_cuda
    from tests.profiler_helpers import line_at, line_of

    with fake_cuda(devices=2), profilers.profile(kernel_timing=False) as prof:
        model = torch.nn.DataParallel(torch.nn.Linear(8, 4).to("cuda:0"))
        x = torch.ones(6, 8, device="cuda:0")
        out = model(x)  # @dp_forward
        out.sum().backward()  # @dp_backward
        assert out.shape == (6, 4) and out.device == torch.device("cuda:0")
        assert model.module.weight.grad is not None
        assert model.module.weight.grad.device == torch.device("cuda:0")
    r = prof.report()
    fwd, bwd = line_at(r, line_of("dp_forward")), line_at(r, line_of("dp_backward"))
    # forward: half the batch to cuda:1 (3*8*4 = 96 B), the replica's weight and bias
    # ((8*4 + 4)*4 = 144 B), cuda:1's half of the output back to cuda:0 (3*4*4 = 48 B)
    assert (fwd.p2p.count, fwd.p2p.bytes) == (3, 96 + 144 + 48)
    # backward: the output's gradient scattered (48 B), the replica's gradients reduced (144 B)
    assert (bwd.p2p.count, bwd.p2p.bytes) == (2, 48 + 144)
    assert r.totals.p2p.count == 5
    # the only syncs: the model's blocking move to cuda:0 (weight and bias); DataParallel adds none
    assert r.totals.syncs.by_cause == {"copy_to_device": 2} and r.totals.h2d.bytes == 144
