"""The fast path of ``--no-kernel-timing`` (profilers/counting/kernels.py): Python kernels for only the
ops that copy, sync or communicate. It counts what the dispatch mode counts, changes nothing the
program computes, leaves the dispatcher as it found it, and says so when it cannot serve."""

from __future__ import annotations

import threading

import pytest
import torch

import profilers
from profilers.counting import kernels as _kernels
from tests import conftest
from tests.helpers import gpuwatch_here
from tests.profiler_helpers import copies, line_at, line_of

needs_fake_cuda = pytest.mark.skipif(
    conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
)


def counted(r: profilers.Report) -> dict[tuple[str, int], tuple]:
    """Per line: what both paths must agree on (copies each way, syncs by cause, collectives)."""
    return {
        (s.file, s.line): (
            s.h2d.counts(),
            s.d2h.counts(),
            s.d2d.counts(),
            s.p2p.counts(),
            s.syncs.to_dict(),
            (s.comm.count, s.comm.bytes, dict(s.comm.by_op)),
        )
        for s in r.lines
        if s.bytes_moved or s.syncs.count or s.comm.count
    }


def both(work, fake_gpus: int = 0) -> tuple[profilers.Report, profilers.Report]:
    """``work`` profiled on the fast path, then through the dispatch mode."""
    reports = []
    for count_ops in (None, True):
        if fake_gpus:
            from profilers.fake_cuda.harness import fake_cuda

            with (
                fake_cuda(fake_gpus),
                profilers.profile(kernel_timing=False, count_ops=count_ops) as prof,
            ):
                work()
        else:
            with profilers.profile(kernel_timing=False, count_ops=count_ops) as prof:
                work()
        reports.append(prof.report())
    fast, mode = reports
    assert fast.options.counting == "copies" and mode.options.counting == "every_op"
    return fast, mode


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_a_backward_copy_on_autograd_device_thread_is_counted_on_the_fast_path():
    seen: list[int] = []

    def work():
        x = torch.randn(64, 64, requires_grad=True)
        y = x.to("cuda:0")  # @h2d
        y.register_hook(lambda g: seen.append(threading.get_ident()))
        (y * 2).sum().backward()  # @backward
        assert x.grad is not None and x.grad.device.type == "cpu"

    fast, mode = both(work, fake_gpus=1)
    assert seen and all(t != threading.get_ident() for t in seen)  # a device thread, as on a GPU
    assert counted(fast) == counted(mode)
    assert line_at(fast, line_of("h2d")).h2d.counts() == copies(count=1, bytes=16384, pageable=1)
    # The gradient goes back to the host on the device thread: ToCopyBackward's copy.
    assert line_at(fast, line_of("backward")).d2h.counts() == copies(
        count=1, bytes=16384, pageable=1
    )


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_inference_mode_copies_and_syncs_are_counted_on_both_paths():
    # NB: in inference mode autograd (which makes ``to`` and ``item`` of ``_to_copy`` and
    # ``_local_scalar_dense``) is off: the ops come to a mode whole, and both paths decompose
    # them to count their parts.
    def work():
        model = torch.nn.Linear(16, 4).to("cuda:0")
        with torch.inference_mode():
            out = model(torch.randn(8, 16).to("cuda:0"))  # @infer_in
            out.cpu()  # @infer_out
            float(out.sum())  # @infer_item
        with torch.no_grad():
            out = model(torch.randn(8, 16).to("cuda:0"))
            out.argmax(dim=1).tolist()  # @tolist

    fast, mode = both(work, fake_gpus=1)
    assert counted(fast) == counted(mode)
    assert line_at(fast, line_of("infer_in")).h2d.count == 1
    assert line_at(fast, line_of("infer_out")).d2h.counts() == copies(
        count=1, bytes=128, pageable=1
    )
    assert line_at(fast, line_of("infer_item")).syncs.by_cause == {"item": 1}
    assert line_at(fast, line_of("tolist")).d2h.count == 1


def test_collectives_are_counted_on_the_fast_path(tmp_path):
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:

        def work():
            t = torch.ones(256)
            dist.all_reduce(t)  # @all_reduce
            dist.broadcast(t, src=0)  # @broadcast
            dist.all_gather([torch.empty(256)], t)  # @all_gather
            dist.barrier()

        fast, mode = both(work)
    finally:
        dist.destroy_process_group()
    assert counted(fast) == counted(mode)
    assert line_at(fast, line_of("all_reduce")).comm.by_op == {
        "all_reduce": profilers.CommOp(1, 1024)
    }
    assert line_at(fast, line_of("broadcast")).comm.by_op == {
        "broadcast": profilers.CommOp(1, 1024)
    }
    assert line_at(fast, line_of("all_gather")).comm.by_op == {
        "all_gather": profilers.CommOp(1, 1024)
    }


@pytest.mark.slow
def test_compiled_code_is_counted_where_it_runs_never_while_traced(monkeypatch):
    import torch._dynamo

    from profilers.counting import ops as _ops

    # A rule that takes every _to_copy for a 4-byte copy to the GPU: CPU code to count with.
    def every_cast_is_a_copy(args, kwargs, out, is_pinned):
        return _ops.Transfer("h2d", 4, src="cpu", dst="cuda:0")

    monkeypatch.setitem(_ops.CLASSIFIERS, torch.ops.aten._to_copy.default, every_cast_is_a_copy)

    def body(x):  # @body_def
        return x.to(torch.float64).sum() * 2  # @body_return

    torch._dynamo.reset()
    compiled = torch.compile(body, backend="aot_eager")
    x = torch.randn(8)
    with profilers.profile(kernel_timing=False) as prof:
        for _ in range(3):
            assert torch.equal(compiled(x), body(x))
    r = prof.report()
    assert not [s for s in r.lines if s.file.startswith("<")]  # no generated code as a line
    # The graph's ops ran on fake tensors inside the compiler first: none of those counts.
    # Three calls of body(x) and three runs of the compiled graph, one _to_copy each, all at
    # body's return: the graph's too (its node's record of where dynamo traced it), not at
    # the def line of the frame dynamo runs the graph in.
    by_line = {s.line: s.h2d.count for s in r.lines}
    assert by_line == {line_of("body_return"): 6}
    assert line_of("body_def") == line_of("body_return") - 1


def test_the_dispatcher_is_left_as_it_was_also_after_an_exception():
    key = torch._C.DispatchKey.PreDispatch

    def table(op: str) -> str:
        return "\n".join(
            line
            for line in torch._C._dispatch_dump_table(op).splitlines()
            if line.startswith("PreDispatch")
        )

    before = {op: table(op) for op in ("aten::add.Tensor", "aten::_to_copy", "c10d::allreduce_")}
    with pytest.raises(ZeroDivisionError):
        with profilers.profile(kernel_timing=False):
            assert torch._C._dispatch_tls_is_dispatch_key_included(key)
            assert "kernels.py" in table("aten::_to_copy")
            torch.ones(2).to(torch.float64)
            raise ZeroDivisionError("the user's code failed")
    assert not torch._C._dispatch_tls_is_dispatch_key_included(key)
    assert {op: table(op) for op in before} == before


def test_a_torch_without_the_hooks_falls_back_to_the_mode_with_one_line(monkeypatch, capsys):
    from gpuwatch.profile.worded import warnings_worded

    monkeypatch.setattr(_kernels, "missing", lambda: "torch._C._IncludeDispatchKeyGuard")
    with pytest.warns(profilers.SlowerCounting) as caught:
        with profilers.profile(kernel_timing=False) as prof:
            torch.ones(2) + 1
    r = prof.report()
    assert r.options.counting == "every_op" and r.totals.ops == 2  # ones, add: every op
    assert [w.message.lacking for w in caught] == ["torch._C._IncludeDispatchKeyGuard"]
    assert capsys.readouterr().err == ""  # the library warns; it prints nothing
    # the CLI (its one run path) words it: one line on stderr
    with warnings_worded(), profilers.profile(kernel_timing=False):
        pass
    assert capsys.readouterr().err.splitlines() == [
        "gpuwatch: this torch lacks torch._C._IncludeDispatchKeyGuard; counting through the "
        "dispatch mode instead (every op enters Python: slower, same counts)"
    ]


def test_the_cli_says_ops_were_not_counted_and_counts_them_with_count_ops(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import torch\nx = torch.randn(8, 8)\nprint(float((x @ x).sum()) != 1.5)\n")
    for flags, counting in (([], "copies"), (["--count-ops"], "every_op")):
        out = tmp_path / f"{counting}.json"
        proc = gpuwatch_here(
            ["profile", "--no-kernel-timing", *flags, "--json", str(out), str(script)], tmp_path
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("True\n")  # the script's own output, untouched
        report = profilers.Report.load(out)
        assert report.options.counting == counting
        if counting == "copies":
            assert "ops: not counted    kernel time: not timed" in proc.stderr
        else:
            assert report.totals.ops >= 4  # randn, mm, sum, _local_scalar_dense


# A Python number in CPU arithmetic reaches the fast path as a cast (``_to_copy``) of a wrapped
# number to the tensor's dtype; most are made at once (no redispatch), the rest run as the op.
NUMBERS = [
    (torch.float32, 1),
    (torch.float32, 0.1),
    (torch.float32, True),
    (torch.float32, 1e39),  # the cast gives inf, making the number would raise: the op runs
    (torch.float32, float("nan")),
    (torch.float32, float("inf")),
    (torch.float32, 1j),
    (torch.float64, 0.1),
    (torch.float16, 1e6),
    (torch.bfloat16, 0.1),
    (torch.uint8, 300),  # wraps to 44 in the cast
    (torch.uint8, -1),
    (torch.int8, -129),
    (torch.int16, 5),
    (torch.int32, 2**40),
    (torch.int32, True),
    (torch.int64, 2**62),
    (torch.bool, 1),
    (torch.complex64, 1.5),
    (torch.complex64, 1j),
]


def test_arithmetic_with_python_numbers_gives_what_it_gives_without_the_profiler():
    def run() -> list[object]:
        out: list[object] = []
        for dtype, number in NUMBERS:
            for op in (torch.add, torch.mul, torch.sub, torch.div):
                try:
                    r = op(torch.ones(2, dtype=dtype), number)
                    out.append((r.dtype, r.tolist()))
                except RuntimeError as exc:  # torch's own refusal, the same with us
                    out.append(str(exc))
        return out

    plain = run()
    with profilers.profile(kernel_timing=False) as prof:
        fast = run()
    assert prof.report().options.counting == "copies"
    assert repr(fast) == repr(plain)  # NB: repr: NaN != NaN


def test_a_number_cast_is_made_directly_only_where_that_is_the_casts_exact_result():
    cast = _kernels._cast_number
    made = cast(0.1, {"dtype": torch.float32})
    assert (
        made is not None and made.dtype == torch.float32 and made.item() == torch.tensor(0.1).item()
    )
    assert cast(7, {"dtype": torch.int32}).item() == 7  # type: ignore[union-attr]
    assert cast(2.5, {}).dtype == torch.float64  # type: ignore[union-attr]  # its own dtype
    for number, kwargs in [
        (300, {"dtype": torch.uint8}),  # the cast wraps it
        (1e39, {"dtype": torch.float32}),  # the cast rounds it to inf
        (float("nan"), {"dtype": torch.float32}),
        (0.1, {"dtype": torch.float16}),
        (1, {"dtype": torch.float32, "device": torch.device("meta")}),
        (1, {"dtype": torch.float32, "pin_memory": True}),
    ]:
        assert cast(number, kwargs) is None, (number, kwargs)
