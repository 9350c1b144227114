"""gpuwatch never changes what a script does: every module of torch (and of the frameworks
installed) imports under ``gpuwatch profile`` exactly as it does plainly, and torch's functions
look the same to TorchScript, tracing, pickling, ``inspect`` and ``functools.wraps``."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import run, run_gpuwatch
from tests.profiler_helpers import copies, line_at, line_of
from tests.test_fake_cuda import fake_cuda

PROGRAMS = Path(__file__).parent / "programs"
SWEEP = PROGRAMS / "import_sweep.py"
"""Every module of the packages named, imported in one process (tests and ``__main__`` aside)."""
USER_FUNCTIONS = PROGRAMS / "torch_functions.py"
"""What torch's public functions (the profiler's and the fake GPU's patches among them) look like
to a script, and what scripted, traced and ignored functions that call them return."""

FRAMEWORKS = (
    "transformers",
    "accelerate",
    "lightning",
    "timm",
    "torchvision",
    "diffusers",
    "ignite",
)

#: The fake GPU's Stream and Event are classes of its own (fake_cuda/torch_api.py): a simulated
#: stream has no CUDA handle to wrap; their ``synchronize`` says so by its module.
FAKE_OWN = {"torch.cuda.Event.synchronize module", "torch.cuda.Stream.synchronize module"}


def _three_ways(path: Path, args: list[str], tmp_path: Path, out: str) -> list[dict[str, object]]:
    found = []
    for how in ([], ["profile", "-q"], ["profile", "-q", "--fake-cuda"]):
        target = tmp_path / f"{len(found)}.json"
        env = {out: str(target)}
        if how:
            done = run_gpuwatch([*how, str(path), *args], tmp_path, **env)
        else:
            done = run([sys.executable, str(path), *args], tmp_path, env=env, timeout=900)
        assert target.exists(), (how, done.stdout[-2000:], done.stderr[-4000:])
        found.append(json.loads(target.read_text()))
    return found


@pytest.mark.slow
@pytest.mark.fake_cuda
@pytest.mark.parametrize("packages", [("torch",), FRAMEWORKS], ids=["torch", "frameworks"])
def test_every_module_imports_under_the_profiler_as_it_does_plainly(tmp_path, packages):
    # NB: torch.distributed.optim's @torch.jit.script classes call torch.tensor: with
    # torch.tensor patched, TorchScript compiled our wrapper and 19 modules raised.
    present = [p for p in packages if importlib.util.find_spec(p) is not None]
    if not present:
        pytest.skip(f"none of {', '.join(packages)} is installed (the frameworks extra)")
    plain, profiled, fake = _three_ways(SWEEP, present, tmp_path, "SWEEP_OUT")
    assert plain["imported"] > (1500 if packages == ("torch",) else 50)
    for run_of in (profiled, fake):
        assert run_of["failed"] == plain["failed"]
        assert run_of["imported"] == plain["imported"]


@pytest.mark.slow
@pytest.mark.fake_cuda
def test_torch_functions_look_to_a_script_as_they_do_without_gpuwatch(tmp_path):
    plain, profiled, fake = _three_ways(USER_FUNCTIONS, [], tmp_path, "USERFNS_OUT")
    # the scripted, traced and ignored functions ran, and gave these values
    assert plain["script"] == "[12.0, 12.0]" and plain["trace"] == "[5.0, 8.0]"
    assert plain["backward"] == "([5.0, 5.0, 5.0], [2.0, 2.0, 2.0])"
    assert plain["identity grad"] == "True" and plain["torch.tensor pickle"] == "True"
    assert profiled == plain
    assert {k: v for k, v in fake.items() if k not in FAKE_OWN} == {
        k: v for k, v in plain.items() if k not in FAKE_OWN
    }


@pytest.mark.fake_cuda
def test_torch_tensor_made_on_a_gpu_is_counted_from_its_lift():
    # NB: on a real GPU, torch.tensor(data, device="cuda") copies inside the call with modes
    # excluded; the lift_fresh after it, on the GPU tensor, is all a mode sees (ops._lift_fresh).
    # Here the fake GPU's tensor is lifted by hand, as torch does.
    import profilers

    with fake_cuda(1):
        t = torch.zeros(3, device="cuda:0")
        with profilers.profile(kernel_timing=False) as prof:
            torch.ops.aten.lift_fresh.default(t)  # @lift
            torch.ops.aten.lift_fresh.default(torch.zeros(3))  # @host
    r = prof.report()
    line = line_at(r, line_of("lift"))
    assert line.h2d.counts() == copies(count=1, bytes=12, pageable=1)
    assert line.syncs.by_cause == {"copy_to_device": 1}
    made = line.origins["factory"]
    assert (made.count, made.op, made.made_at) == (1, "lift_fresh", f"{line.file}:{line.line}")
    assert r.totals.h2d.count == 1  # the host tensor's lift moves nothing
