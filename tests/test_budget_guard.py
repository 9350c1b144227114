"""``profilers.budget()`` in tests: a block over budget raises naming its lines; each guard sees
its own thread (and what that thread starts) only; the pytest plugin runs it on a fake GPU."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

import profilers
from profilers.fake_cuda.harness import fake_cuda
from tests.conftest import FAKE_CUDA_MISSING

pytestmark = [
    pytest.mark.fake_cuda,
    pytest.mark.skipif(FAKE_CUDA_MISSING is not None, reason=str(FAKE_CUDA_MISSING)),
]
HERE = Path(__file__).name


def _line(marker: str) -> int:
    return next(i for i, t in enumerate(Path(__file__).read_text().splitlines(), 1) if marker in t)


@pytest.mark.slow
def test_a_block_over_budget_names_each_line_its_backward_and_its_thread_included():
    with fake_cuda():
        w = torch.ones(4, device="cuda:0", requires_grad=True)
        with pytest.raises(profilers.BudgetExceeded) as caught:
            with profilers.no_syncs() as guard:
                loss = (w * 2).sum()
                loss.item()  # sync: item
                loss.backward()  # autograd's device thread runs its ops
                t = threading.Thread(target=lambda: w.detach().cpu())  # sync: copy_to_host
                t.start()
                t.join()
        report = guard.report()
        assert report.totals.syncs.by_cause == {"item": 1, "copy_to_host": 1}
        backward = next(s for s in report.lines if s.line == _line("# autograd's device thread"))
        assert backward.ops > 0  # the backward's ops, charged to the .backward() line
    head, total, *lines = str(caught.value).splitlines()
    assert head == f"over budget (syncs<=0) in the block at tests/{HERE}:{_line('as guard:')}:"
    assert total == "syncs<=0: 2 (2 over), from"
    assert sorted(lines) == [
        f"  1  tests/{HERE}:{_line('# sync: item')} "
        "(test_a_block_over_budget_names_each_line_its_backward_and_its_thread_included) "
        "loss.item() # sync: item",
        f"  1  tests/{HERE}:{_line('# sync: copy_to_host')} (<lambda>) "
        "t = threading.Thread(target=lambda: w.detach().cpu()) # s...",
    ]


def test_two_threads_guarded_at_once_never_see_each_other():
    both_in = threading.Barrier(2, timeout=30)
    outcome: dict[str, object] = {}

    def work(name: str, syncs: int) -> None:
        try:
            with profilers.budget(syncs_item=0, h2d=1) as guard:
                x = torch.ones(8).to("cuda:0")
                both_in.wait()  # both guards are on from here
                for _ in range(syncs):
                    x.sum().item()
                both_in.wait()
            outcome[name] = guard.report().totals
        except profilers.BudgetExceeded as exc:
            outcome[name] = exc

    with fake_cuda():
        threads = [
            threading.Thread(target=work, args=("clean", 0)),
            threading.Thread(target=work, args=("dirty", 3)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    clean, dirty = outcome["clean"], outcome["dirty"]
    assert isinstance(clean, profilers.Totals), clean
    # its own copy (8 float32: 32 bytes, a blocking one: one sync), none of the other's items
    assert clean.syncs.by_cause == {"copy_to_device": 1}
    assert (clean.h2d.count, clean.h2d.bytes) == (1, 32)
    assert isinstance(dirty, profilers.BudgetExceeded)
    assert dirty.report.totals.syncs.by_cause == {"item": 3, "copy_to_device": 1}
    assert "syncs.item<=0: 3 (3 over), from" in str(dirty)


def test_the_blocks_own_exception_wins_and_every_patch_is_undone():
    originals = (
        torch.cuda.synchronize,
        threading.Thread.start,
        torch.Tensor.backward,
        torch.tensor,
    )
    with fake_cuda():
        x = torch.ones(2, device="cuda:0")
        with pytest.raises(KeyError), profilers.no_syncs():
            x.sum().item()
            raise KeyError("the user's own")
    assert (
        torch.cuda.synchronize,
        threading.Thread.start,
        torch.Tensor.backward,
        torch.tensor,
    ) == originals


def test_a_guard_is_a_decorator_and_reads_spec_strings():
    calls = []

    @profilers.budget("syncs<=1,line:h2d=0")
    def step(x: torch.Tensor) -> None:
        calls.append(x.sum().item())

    with fake_cuda():
        x = torch.ones(2, device="cuda:0")
        step(x)
        step(x)  # each call guarded on its own: one sync each
        with pytest.raises(profilers.BudgetExceeded, match=r"line:d2h<=0: 1 line over it"):
            with profilers.budget("line:d2h=0"):
                x.cpu()
    assert len(calls) == 2
    with pytest.raises(ValueError, match="judged as a whole, not per step"):
        profilers.budget("syncs/step<=1")
    with pytest.raises(profilers.BudgetError, match="did you mean 'h2d'"):
        profilers.budget(h2e=0)


GUARDED = """\
import torch

def train_step(model, x):
    loss = model(x).square().mean()
    loss.backward()
    return loss
"""

SUITE = """\
import pytest
import torch
from steps import train_step

@pytest.fixture
def model():
    return torch.nn.Linear(4, 2).to("cuda:0")

@pytest.mark.gpuwatch_budget(syncs=0)
def test_step_never_syncs(model):
    train_step(model, torch.ones(3, 4, device="cuda:0"))
"""


#: The inner sessions' plugins: not the snapshot plugin, whose session end (in this process)
#: removes the folder the outer session's own end then reads (a crash there without xdist).
INNER = ("-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:textual-snapshot")


def test_pytest_plugin_fails_a_test_when_an_item_is_added_naming_that_line(pytester, monkeypatch):
    # NB: in this process (pytester restores sys.modules after each run); no -p: the plugin
    # comes from gpuwatch's pytest11 entry point. torch's own modules that the fake GPU imports
    # go in first: registered twice, their op libraries would raise. The edited project is a
    # copy in a folder of its own: one process sees each source file once, as a user's would.
    import torch._inductor.test_operators  # noqa: F401

    args = [*INNER, "--gpuwatch-fake-cuda"]
    for folder, steps, ret, said in (
        ("clean", GUARDED, 0, "1 passed"),
        ("synced", GUARDED.replace("    return loss", "    print(loss.item())\n    return loss"), 1,
         "1 failed"),
    ):  # fmt: skip
        project = pytester.mkdir(folder)
        (project / "steps.py").write_text(steps)
        (project / "test_steps.py").write_text(SUITE)
        monkeypatch.chdir(project)
        done = pytester.runpytest_inprocess(*args)
        out = done.stdout.str()
        assert done.ret == ret, out + done.stderr.str()
        assert said in out
    assert "over budget (syncs<=0) in test_steps.py::test_step_never_syncs:" in out
    assert "1  steps.py:6 (train_step) print(loss.item())" in out


AFTER_THE_FAKE = """
import pytest, torch

SEEN = []


def attempt():
    try:
        torch.ones(2).cuda()
    except Exception as exc:  # no GPU here: what torch says
        return type(exc).__name__, str(exc).splitlines()[0]
    return None


def test_a_before():
    SEEN.append(attempt())
    assert SEEN[0] is not None


@pytest.mark.gpuwatch_budget(syncs=1)
def test_b_on_the_fake_gpu():
    torch.ones(2).cuda()


def test_c_after():
    assert attempt() == SEEN[0]
"""


def test_after_a_test_on_the_fake_gpu_cuda_fails_as_it_did_before_it(pytester, monkeypatch):
    # NB: the fake GPU's first tensor on it sets torch's C++ "CUDA initialized" flag for good
    # (through the fake's lazy init): a later test's .cuda() then skipped torch's own check and
    # died in the dispatcher with a 100-line dump, not "Torch not compiled with CUDA enabled".
    import torch._inductor.test_operators  # noqa: F401  (as above)

    project = pytester.mkdir("after")
    (project / "test_after.py").write_text(AFTER_THE_FAKE)
    monkeypatch.chdir(project)
    done = pytester.runpytest_inprocess(*INNER, "--gpuwatch-fake-cuda")
    assert done.ret == 0, done.stdout.str()
    assert "3 passed" in done.stdout.str()
