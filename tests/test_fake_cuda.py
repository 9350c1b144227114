"""--fake-cuda: real model code (modules, backward, optimizers, masks, DataLoader) run against a
simulated GPU on this CPU-only machine, every copy, byte and sync counted exactly, per line.

The rules are PyTorch's: the sync cases are those of PyTorch's own test of
``torch.cuda.set_sync_debug_mode`` (test/test_torch.py, test_sync_warning, in its later form with
a boolean mask on the host), and ATen's indexing code for the masks (see profilers/counting/ops.py)."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn as nn

import profilers
from tests import conftest
from tests.profiler_helpers import copies, line_at, line_of

pytestmark = [
    pytest.mark.fake_cuda,
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
    pytest.mark.usefixtures("both_paths"),  # the exact counts hold on both counting paths
]


def fake_cuda(devices: int = 1, values: str | None = None):
    from profilers.fake_cuda.harness import fake_cuda

    return fake_cuda(devices, values=values)


def profiled(
    fn, devices: int = 1, values: str | None = None, **kw
) -> tuple[profilers.Report, object]:
    with (
        fake_cuda(devices, values=values) as harness,
        profilers.profile(kernel_timing=False, **kw) as prof,
    ):
        fn()
    return prof.report(), harness


@pytest.mark.slow
@pytest.mark.usefixtures("both_values")
def test_an_ordinary_training_loop_counts_what_a_gpu_run_would():
    steps, batch = 5, 16

    def work():
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
        model.to(device)  # @model
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        data, labels = torch.randn(steps * batch, 32), torch.randint(0, 10, (steps * batch,))
        for step in range(steps):
            x = data[step * batch : (step + 1) * batch].to(device)  # @x
            y = labels[step * batch : (step + 1) * batch].to(device)  # @y
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            _ = f"step {step} loss {loss.item():.4f}"  # @item

    r, harness = profiled(work)
    params = 32 * 64 + 64 + 64 * 10 + 10
    assert line_at(r, line_of("model")).h2d.counts() == copies(
        count=4, bytes=params * 4, pageable=4
    )
    x = line_at(r, line_of("x"))
    assert x.h2d.counts() == copies(count=steps, bytes=steps * batch * 32 * 4, pageable=steps)
    assert x.syncs.to_dict() == {"count": steps, "by_cause": {"copy_to_device": steps}}
    assert line_at(r, line_of("y")).h2d.counts() == copies(
        count=steps, bytes=steps * batch * 8, pageable=steps
    )
    item = line_at(r, line_of("item"))
    assert item.d2h.counts() == copies(count=steps, bytes=steps * 4, pageable=steps)
    assert item.syncs.to_dict() == {"count": steps, "by_cause": {"item": steps}}
    # Nothing else moved or waited: backward and Adam's foreach steps stay on the GPU.
    assert r.totals.syncs.count == 4 + 3 * steps
    assert r.totals.d2h.count == steps and r.totals.p2p.count == 0
    # with real values nothing the script read back was a placeholder
    assert harness.placeholders.values == (steps if harness.values == "placeholder" else 0)


def test_backward_runs_on_autograd_device_thread_and_is_charged_to_forward_lines():
    threads: list[int] = []

    def work():
        w = torch.randn(8, 8).to("cuda:0").requires_grad_()
        h = w * 2  # @mul
        h.register_hook(lambda g: threads.append(threading.get_ident()))
        h.sum().backward()  # @backward
        assert w.grad is not None and w.grad.device == torch.device("cuda:0")

    r, _ = profiled(work, count_ops=True)  # op counts: the dispatch mode's
    assert threads and threads[0] != threading.get_ident()  # a device thread, as on a GPU
    mul = line_at(r, line_of("mul"))
    assert mul.backward_ops > 0  # the backward of w * 2 charged to its forward line
    assert line_at(r, line_of("backward")).ops > 0


def test_values_read_back_are_placeholders_and_said_so():
    def work():
        t = torch.randn(4, 4).to("cuda:0")
        assert t.sum().item() == 0.0
        assert float(t.mean()) == 0.0 and bool(t.max() > 0) is False
        assert t.cpu().eq(0).all() and t.tolist() == [[0.0] * 4] * 4
        assert t.nonzero().shape == (16, 2)  # every element: the largest output
        assert t[t > 0].shape == (16,)

    _, harness = profiled(work, values="placeholder")
    assert harness.placeholders.to_dict() == {"values": 3, "host_copies": 2, "sizes": 2}


def test_torch_cuda_says_what_a_machine_with_gpus_says():
    def work():
        assert torch.cuda.is_available() and torch.cuda.device_count() == 2
        assert torch.cuda.get_device_name(1) == "gpuwatch fake CUDA device"
        torch.cuda.set_device(1)
        assert torch.cuda.current_device() == 1
        assert torch.randn(2).cuda().device == torch.device("cuda:1")
        with torch.cuda.device(0):
            assert torch.randn(2).to("cuda").device == torch.device("cuda:0")
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.randn(2).to("cuda:2")
        torch.cuda.synchronize()  # @sync
        torch.manual_seed(0)

    r, _ = profiled(work, devices=2)
    assert line_at(r, line_of("sync")).syncs.by_cause == {"synchronize": 1}
    assert not torch.cuda.is_available()  # everything put back


@pytest.mark.usefixtures("both_values")
def test_modules_move_between_fake_gpus_and_back():
    def work():
        m = nn.Linear(4, 4)
        m.to("cuda:0")
        m.cuda()  # already there: nothing moves
        m.to("cuda:1")  # @p2p
        m.cpu()  # @back

    r, _ = profiled(work, devices=2)
    assert line_at(r, line_of("p2p")).p2p.counts() == copies(count=2, bytes=80)
    assert line_at(r, line_of("back")).d2h.counts() == copies(count=2, bytes=80, pageable=2)
    assert r.totals.h2d.count == 2


def test_torch_tensor_made_on_the_gpu_is_a_blocking_copy():
    def work():
        torch.tensor([1.0, 2.0, 3.0], device="cuda")  # @tensor

    r, _ = profiled(work)
    line = line_at(r, line_of("tensor"))
    assert line.h2d.counts() == copies(count=1, bytes=12, pageable=1)
    assert line.syncs.by_cause == {"copy_to_device": 1}


@pytest.mark.usefixtures("both_values")
def test_pinned_dataloader_batches_copy_without_waiting():
    def work():
        ds = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
        for xb, _yb in torch.utils.data.DataLoader(ds, batch_size=16, pin_memory=True):
            assert xb.is_pinned()
            xb.to("cuda", non_blocking=True)  # @nb

    r, _ = profiled(work)
    assert line_at(r, line_of("nb")).h2d.counts() == copies(
        count=4, bytes=64 * 8 * 4, non_blocking=4
    )
    assert r.totals.syncs.count == 0


@pytest.mark.usefixtures("both_values")
def test_non_blocking_copy_to_the_host_is_decided_from_the_op():
    def work():
        t = torch.randn(8).to("cuda:0", non_blocking=True)
        host = t.to("cpu", non_blocking=True)  # @nb_d2h
        assert host.is_pinned()
        t.cpu()  # @blocking

    r, _ = profiled(work)
    nb = line_at(r, line_of("nb_d2h"))
    assert nb.d2h.counts() == copies(count=1, bytes=32, non_blocking=1)
    assert nb.syncs.count == 0
    assert line_at(r, line_of("blocking")).syncs.by_cause == {"copy_to_host": 1}


# -- PyTorch's own list of what syncs (test_torch.py, test_sync_warning) ---------------------------


def _sync_cases():
    size = 4
    x = torch.rand(size).to("cuda")
    y = torch.rand(()).to("cuda")
    ind = torch.randint(size, (3,)).to("cuda")
    ind_cpu = torch.randint(size, (3,))
    repeats = torch.full((1,), 2).to("cuda")
    mask = torch.randint(2, (size,), dtype=torch.bool).to("cuda")
    mask_cpu = torch.tensor([True, False, True, True])

    def put(ind, val):
        x[ind] = val

    def cond():
        return x if y else 2 * x

    no_sync = {
        "x[mask] = 1.": lambda: put(mask, 1.0),
        "x[mask_cpu] = y": lambda: put(mask_cpu, y),
        "x[ind] = y": lambda: put(ind, y),
        "x[mask_cpu]": lambda: x[mask_cpu],
        "x[ind]": lambda: x[ind],
        "one_hot(ind, num_classes)": lambda: nn.functional.one_hot(ind, num_classes=size),
        "randperm": lambda: torch.randperm(20000, device="cuda"),
        "repeat_interleave(x, 2, output_size)": lambda: torch.repeat_interleave(
            x, 2, output_size=2 * size
        ),
        "repeat_interleave(x, repeats, output_size)": lambda: torch.repeat_interleave(
            x, repeats, output_size=2 * size
        ),
        "any(y)": lambda: torch.any(y),
    }
    sync = {
        "x[mask] = y": lambda: put(mask, y),
        "x[ind_cpu] = y": lambda: put(ind_cpu, y),
        "x[mask]": lambda: x[mask],
        "x[ind_cpu]": lambda: x[ind_cpu],
        "x.nonzero()": lambda: x.nonzero(),
        "if y:": cond,
        "one_hot(ind)": lambda: nn.functional.one_hot(ind),
        "repeat_interleave(x, repeats)": lambda: torch.repeat_interleave(x, repeats),
    }
    return no_sync, sync


@pytest.mark.slow
@pytest.mark.usefixtures("both_values")
def test_syncs_agree_with_pytorchs_sync_debug_mode_test():
    found: dict[str, int] = {}
    with fake_cuda():
        no_sync, sync = _sync_cases()
        for name, fn in {**no_sync, **sync}.items():
            with profilers.profile(kernel_timing=False) as prof:
                fn()
            found[name] = prof.report().totals.syncs.count
    assert {n: found[n] for n in no_sync} == dict.fromkeys(no_sync, 0)
    assert {n: found[n] for n in sync} == dict.fromkeys(sync, 1)


@pytest.mark.slow
@pytest.mark.usefixtures("both_values")
def test_indexing_with_host_indices_counts_their_copies():
    def work():
        x = torch.randn(100, 4).to("cuda:0")
        keep = torch.zeros(100, dtype=torch.bool)
        keep[:30] = True
        x[torch.tensor([1, 2, 3])]  # @ind_cpu
        x[keep]  # @mask_cpu
        boxes = x.clone()
        gpu_keep = (boxes[:, 0] > 0).to("cuda:0")
        boxes[~gpu_keep] = 0.0  # @masked_fill
        boxes[gpu_keep] = x[gpu_keep]  # @mask_put

    r, _ = profiled(work)
    ind = line_at(r, line_of("ind_cpu"))
    assert ind.h2d.counts() == copies(count=1, bytes=24, pageable=1)  # the index, blocking
    assert ind.syncs.by_cause == {"copy_to_device": 1}
    mask = line_at(r, line_of("mask_cpu"))
    # nonzero on the host into pinned memory: 30 int64 indices, copied without waiting
    assert mask.h2d.counts() == copies(count=1, bytes=30 * 8, non_blocking=1)
    assert mask.syncs.count == 0
    # masked_fill_: no nonzero (the fast path keeps no line that neither copies nor syncs)
    assert not [s for s in r.lines if s.line == line_of("masked_fill") and s.syncs.count]
    assert line_at(r, line_of("mask_put")).syncs.by_cause == {"data_dependent_shape": 2}


@pytest.mark.usefixtures("both_values")
def test_an_optimizer_made_before_the_move_steps_the_moved_parameters():
    def work():
        model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10))
        model[1].weight = model[0].weight  # a shared (10, 4) weight
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model.to("cuda")  # @move
        assert model[0].weight is model[1].weight  # still shared
        params = [p for g in opt.param_groups for p in g["params"]]
        assert all(p.device.type == "cuda" for p in params)
        assert {id(p) for p in params} == {id(p) for p in model.parameters()}
        loss = model(torch.tensor([1, 2]).to("cuda")).sum()
        loss.backward()
        opt.step()

    r, _ = profiled(work)
    # the shared weight moves once: 40 floats, + Linear's bias (10) = 2 copies
    assert line_at(r, line_of("move")).h2d.counts() == copies(count=2, bytes=200, pageable=2)


def test_a_step_window_profiles_those_steps_only():
    def work():
        model = nn.Linear(4, 4).to("cuda")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(20):
            x = torch.ones(2, 4).to("cuda")  # @window_copy
            model(x).sum().backward()
            opt.step()

    with fake_cuda(), profilers.profile(kernel_timing=False, steps=(5, 8)) as prof:
        work()
    r = prof.report()
    assert r.steps == {"count": 3, "source": "optimizer", "window": [5, 8], "seen": 20}
    # steps 5, 6 and 7: three batches copied, and not the model's move before step 0
    assert line_at(r, line_of("window_copy")).h2d.count == 3
    assert r.totals.h2d.count == 3

    with profilers.profile(kernel_timing=False, steps=(2, None)) as prof:
        torch.ones(3) + 1  # no step ever ends
    r = prof.report()
    assert r.steps is not None and r.steps["seen"] == 0 and r.totals.ops == 0
    from gpuwatch.output.text import step_lines

    assert "no step was seen" in step_lines(r)[0]


@pytest.mark.usefixtures("both_values")
def test_tensors_of_no_elements_cross_without_a_copy_or_a_sync():
    # NB: copy_impl (aten/src/ATen/native/Copy.cpp) returns before CUDA's copy kernel when the
    # copy has no elements; torch.tensor(data, device=) and .to() copy through it.
    got: list[object] = []

    def work():
        a = torch.tensor([], device="cuda")  # @none_tensor
        b = torch.empty(0).to("cuda:0")  # @none_to
        got.append(a.cpu().tolist())  # @none_cpu
        got.append(b.tolist())  # @none_tolist
        torch.empty(0, device="cuda").copy_(torch.empty(0))  # @none_copy_
        x = torch.arange(4.0).to("cuda")  # @four_floats
        got.append(x[torch.tensor([], dtype=torch.long)].shape)  # @none_index

    r, harness = profiled(work)
    assert got == [[], [], torch.Size([0])]
    assert r.totals.h2d.counts() == copies(count=1, bytes=16, pageable=1)  # 4 floats
    assert r.totals.d2h.counts() == copies()
    assert r.totals.syncs.to_dict() == {"count": 1, "by_cause": {"copy_to_device": 1}}
    assert line_at(r, line_of("four_floats")).h2d.count == 1
    for marker in ("none_tensor", "none_to", "none_cpu", "none_tolist", "none_copy_", "none_index"):
        line = line_of(marker)
        assert not [s for s in r.lines if s.line == line and (s.syncs.count or s.h2d.count)]
    assert harness.placeholders.to_dict() == {"values": 0, "host_copies": 0, "sizes": 0}


HF_LIKE = """\
import dataclasses

import torch


@dataclasses.dataclass
class TrainingArguments:
    output_dir: str = "out"

    def __post_init__(self):
        self.scale = torch.ones(3).to("cuda")
"""


def test_a_dataclass_made_init_is_never_named_the_users_line(tmp_path, monkeypatch):
    # NB: dataclasses.py exec()s the __init__ it writes: its frames say "<string>", between the
    # library's __post_init__ and the user's call (HF's TrainingArguments)
    import importlib.util

    from profilers.counting import user_code

    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "hf_like.py").write_text(HF_LIKE)
    roots = user_code._library_roots()
    monkeypatch.setattr(user_code, "_library_roots", lambda: (*roots, f"{lib}/"))
    spec = importlib.util.spec_from_file_location("hf_like", lib / "hf_like.py")
    assert spec is not None and spec.loader is not None
    hf_like = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hf_like)

    def work():
        hf_like.TrainingArguments()  # @args
        exec(compile("torch.zeros(2).to('cuda')", "<string>", "exec"))  # @exec

    r, _ = profiled(work)
    assert not [s.file for s in r.lines if s.file.startswith("<")]
    assert line_at(r, line_of("args")).h2d.counts() == copies(count=1, bytes=12, pageable=1)
    assert line_at(r, line_of("exec")).h2d.counts() == copies(count=1, bytes=8, pageable=1)
