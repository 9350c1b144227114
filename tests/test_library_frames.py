"""The library frame beside the user's line: each copy and sync a library made is counted at
the user's line, as always, and at the frame inside the library that made it (the innermost
outside torch, else torch's own), in the JSON (``library`` of each line) and the summary."""

from __future__ import annotations

import importlib.util
import inspect
import io
import sys

import pytest
import torch
from torch import nn

import profilers
from gpuwatch.analysis import analyze
from profilers.libraries import LibraryFrame
from profilers.records import Line
from tests import conftest
from tests.profiler_helpers import line_at, line_of

pytestmark = [
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
    pytest.mark.fake_cuda,
    pytest.mark.usefixtures("both_paths"),  # the same frames on both counting paths
]

TRAINER = """\
import torch


def log_loss(loss):
    return loss.item()


def clip(model):
    return torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)


def wait():
    torch.cuda.synchronize()
"""


def profiled(fn) -> profilers.Report:
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda(1), profilers.profile(kernel_timing=False) as prof:
        fn()
    return prof.report()


def source_line(fn, text: str) -> int:
    """The line of ``fn``'s source (in the installed file) that holds ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, t in enumerate(lines) if text in t)


def frames(line: Line) -> list[tuple[str, int, str, int, int]]:
    return [(f.file, f.line, f.function, f.syncs, f.copies) for f in line.library]


def test_gradscalers_read_and_copies_are_named_inside_grad_scaler_py():
    steps = 2

    def work():
        model = nn.Linear(4, 2).to("cuda")  # @model
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda")
        for _ in range(steps):
            scaler.scale(model(torch.ones(3, 4).to("cuda")).sum()).backward()  # @own
            scaler.step(opt)  # @step
            scaler.update()

    r = profiled(work)
    scaler = torch.amp.grad_scaler
    # the found_inf read (GradScaler._maybe_opt_step) and the replicas of inv_scale and
    # found_inf (_MultiDeviceReplicator.get: .to(copy=True)), in the installed torch's lines
    read = source_line(scaler.GradScaler._maybe_opt_step, ".item()")
    replica = source_line(scaler._MultiDeviceReplicator.get, "copy=True")
    assert frames(line_at(r, line_of("step"))) == [
        ("torch/amp/grad_scaler.py", read, "<genexpr>", steps, steps),
        ("torch/amp/grad_scaler.py", replica, "get", 0, 2 * steps),
    ]
    moved = line_at(r, line_of("model")).library
    assert [(f.file, f.function, f.syncs, f.copies) for f in moved] == [
        ("torch/nn/modules/module.py", "convert", 2, 2)
    ]
    assert line_at(r, line_of("own")).library == ()  # the line's own .to("cuda")


def test_a_third_party_librarys_own_line_is_named_before_torchs(tmp_path, monkeypatch):
    from profilers.counting import user_code

    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "trainer_like.py").write_text(TRAINER)
    roots, places = user_code._library_roots(), user_code._library_places()
    monkeypatch.setattr(user_code, "_library_roots", lambda: (*roots, f"{lib}/"))
    ours, site_dirs, stdlib, torch_dir = places
    monkeypatch.setattr(
        user_code, "_library_places", lambda: (ours, (f"{lib}/", *site_dirs), stdlib, torch_dir)
    )
    spec = importlib.util.spec_from_file_location("trainer_like", lib / "trainer_like.py")
    assert spec is not None and spec.loader is not None
    trainer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer)

    def work():
        model = nn.Linear(4, 2).to("cuda")
        loss = model(torch.ones(3, 4).to("cuda")).sum()
        loss.backward()
        trainer.log_loss(loss)  # @log
        trainer.clip(model)  # @clip
        trainer.wait()  # @wait

    r = profiled(work)
    log = line_at(r, line_of("log"))
    assert frames(log) == [("trainer_like.py", 5, "log_loss", 1, 1)]
    assert log.library[0].by_cause == {"item": 1}
    # clip_grad_norm_'s own check of the norm syncs inside torch: the library's line is named
    clip = line_at(r, line_of("clip"))
    assert clip.syncs.count == 1
    assert frames(clip) == [("trainer_like.py", 9, "clip", 1, 1)]
    # an explicit synchronize (caught at its Python entry point, not by the dispatcher)
    wait = line_at(r, line_of("wait"))
    assert frames(wait) == [("trainer_like.py", 13, "wait", 1, 0)]
    assert wait.library[0].by_cause == {"synchronize": 1}

    # in the JSON, read back, and valid by the published schema
    from gpuwatch.output.load import problem

    doc = r.to_dict()
    assert problem(doc) is None
    entry = next(s for s in doc["sites"] if s["line"] == line_of("log"))
    assert entry["library"] == [
        {
            "file": "trainer_like.py",
            "line": 5,
            "function": "log_loss",
            "source": "return loss.item()",
            "copies": {"count": 1, "bytes": 4, "pageable": 1},  # into pageable memory
            "syncs": {"count": 1, "by_cause": {"item": 1}},
        }
    ]
    back = Line.from_dict(entry)
    assert [f.to_dict() for f in back.library] == entry["library"]

    # and in the summary, beside the user's line
    from rich.console import Console

    from gpuwatch.output.text import summary

    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(summary(r, analyze(r)))
    text = out.getvalue()
    assert "Made inside libraries" in text
    assert "trainer_like.py:5 log_loss" in text and "trainer_like.py:9 clip" in text

    # and in the HTML report's table of lines
    from gpuwatch.output.html import render_html

    page = render_html(r, analyze(r))
    assert "made at <code>trainer_like.py:5</code> log_loss: 1 syncs, 1 copies" in page


def test_a_library_from_another_environments_site_packages_is_not_the_users_code(tmp_path):
    """A PYTHONPATH (or .pth) that points at another environment's site-packages: its files
    are no site directory of this interpreter, yet a library's, never the user's lines."""
    from profilers.counting import user_code

    lib = tmp_path / "other-env" / "lib" / "python3.11" / "site-packages"
    lib.mkdir(parents=True)
    (lib / "trainer_like.py").write_text(TRAINER)
    assert not str(lib).startswith(user_code._library_roots())  # no site dir of ours
    spec = importlib.util.spec_from_file_location("trainer_like", lib / "trainer_like.py")
    assert spec is not None and spec.loader is not None
    trainer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer)

    def work():
        model = nn.Linear(4, 2).to("cuda")
        loss = model(torch.ones(3, 4).to("cuda")).sum()
        trainer.log_loss(loss)  # @other-log
        trainer.wait()  # @other-wait

    r = profiled(work)
    assert all("site-packages" not in line.file for line in r.lines)
    log = line_at(r, line_of("other-log"))
    assert (log.syncs.count, log.d2h.count) == (1, 1)
    assert frames(log) == [("trainer_like.py", 5, "log_loss", 1, 1)]
    wait = line_at(r, line_of("other-wait"))
    assert frames(wait) == [("trainer_like.py", 13, "wait", 1, 0)]
    # a Debian Python's dist-packages is one too, named from inside it
    code = user_code.UserCode()
    assert not code("/usr/lib/python3/dist-packages/somelib/train.py")
    assert code.library_name("/usr/lib/python3/dist-packages/somelib/train.py") == (
        "somelib/train.py"
    )


def test_library_frames_merge_by_file_and_line():
    a, b = LibraryFrame("x.py", 3, "f"), LibraryFrame("x.py", 3, "f", "x.to(d)")
    a.add(True, 4, "item")
    b.add(False, 0, "item")
    b.add(True, 8, None, pageable=True)
    a.merge(b)
    assert a.to_dict() == {
        "file": "x.py",
        "line": 3,
        "function": "f",
        "source": "x.to(d)",
        "copies": {"count": 2, "bytes": 12, "pageable": 1},
        "syncs": {"count": 2, "by_cause": {"item": 2}},
    }
    assert LibraryFrame.from_dict(a.to_dict()).to_dict() == a.to_dict()


def test_lib_lines_charges_each_copy_and_sync_to_the_library_line():
    """``--lib-lines``: GradScaler's found_inf read is a line of its own (its caller the user's
    ``scaler.step`` line), and that line keeps none of it."""
    steps = 2

    def work():
        model = nn.Linear(4, 2).to("cuda")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda")
        for _ in range(steps):
            scaler.scale(model(torch.ones(3, 4).to("cuda")).sum()).backward()  # @own2
            scaler.step(opt)  # @step2
            scaler.update()

    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda(1), profilers.profile(kernel_timing=False, lib_lines=True) as prof:
        work()
    r = prof.report()
    scaler = torch.amp.grad_scaler
    read = source_line(scaler.GradScaler._maybe_opt_step, ".item()")
    replica = source_line(scaler._MultiDeviceReplicator.get, "copy=True")
    found = line_at(r, read, "torch/amp/grad_scaler.py")
    assert (found.file, found.function, found.syncs.count) == (
        "torch/amp/grad_scaler.py",
        "<genexpr>",
        steps,
    )
    assert found.syncs.by_cause == {"item": steps}
    assert found.d2h.count == steps  # found_inf, one float, read each step
    assert ".item()" in found.source
    step_line = f"{line_at(r, line_of('own2')).file}:{line_of('step2')} work"
    assert found.stack[0] == step_line  # its caller: the user's line
    assert line_at(r, replica, "torch/amp/grad_scaler.py").d2d.count == 2 * steps
    # the user's line keeps only what it made itself
    for s in r.lines:
        if s.line == line_of("step2"):  # its ops may be counted; none of the copies or syncs
            assert (s.syncs.count, s.bytes_moved, s.d2h.count, s.d2d.count) == (0, 0, 0, 0)
    own = line_at(r, line_of("own2"))
    assert (own.h2d.count, own.library) == (steps, ())
    assert r.options.profile is not None and r.options.profile.lib_lines
    assert r.to_dict()["options"]["lib_lines"] is True


def test_lib_lines_is_off_by_default_and_absent_from_the_json():
    def work():
        torch.ones(2).to("cuda").sum().item()

    doc = profiled(work).to_dict()
    assert "lib_lines" not in doc["options"]


def test_lib_lines_on_the_command_line_is_saved_in_the_report(tmp_path):
    import json

    from tests.helpers import gpuwatch_here

    (tmp_path / "s.py").write_text(
        "import torch\n"
        "m = torch.nn.Linear(2, 2).to('cuda')\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "scaler = torch.amp.GradScaler('cuda')\n"
        "for _ in range(10):\n"
        "    scaler.scale(m(torch.ones(1, 2, device='cuda')).sum()).backward()\n"
        "    scaler.step(opt)\n"
        "    scaler.update()\n"
    )
    done = gpuwatch_here(
        ["profile", "--fake-cuda", "--lib-lines", "-q", "--json", "r.json", "s.py"], tmp_path
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["options"]["lib_lines"] is True
    lines = {(s["file"], s["function"]): s for s in doc["sites"]}
    read = lines[("torch/amp/grad_scaler.py", "<genexpr>")]
    assert read["syncs"]["by_cause"] == {"item": 10}
    assert read["stack"][0] == "s.py:7 <module>"
    for s in doc["sites"]:
        if (s["file"], s["line"]) == ("s.py", 7):
            assert s["syncs"]["count"] == 0 and s["d2h"]["count"] == 0
    # the knob is found on the library's line as it is on a library frame
    from gpuwatch.analysis.library_hints import all_hints
    from gpuwatch.output.load import load_report

    at_read = [
        h
        for h in all_hints(load_report(str(tmp_path / "r.json")))
        if h.line.file == "torch/amp/grad_scaler.py" and h.line.function == "<genexpr>"
    ]
    # the knob only: 10 reads would be ".item() in a loop", advice about torch's own code
    assert [h.kind for h in at_read] == ["gradscaler_found_inf"]
    assert at_read[0].where == f"torch/amp/grad_scaler.py:{read['line']} <genexpr>"


LOOPING = """\
def read_every(values):
    return [v.item() for v in values]
"""


def test_an_unknown_librarys_frame_that_waits_often_is_named_in_a_hint(tmp_path, monkeypatch):
    """No knob is known for it: the hint names the frame and its line of code, and the user's
    line, whose every sync the library made, loses its '.item() in a loop' advice."""
    from gpuwatch.analysis.library_hints import HOT, LibraryHint
    from gpuwatch.analysis.library_hints import all_hints as hints
    from profilers.counting import user_code

    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "looping_lib.py").write_text(LOOPING)
    roots, places = user_code._library_roots(), user_code._library_places()
    monkeypatch.setattr(user_code, "_library_roots", lambda: (*roots, f"{lib}/"))
    ours, site_dirs, stdlib, torch_dir = places
    monkeypatch.setattr(
        user_code, "_library_places", lambda: (ours, (f"{lib}/", *site_dirs), stdlib, torch_dir)
    )
    spec = importlib.util.spec_from_file_location("looping_lib", lib / "looping_lib.py")
    assert spec is not None and spec.loader is not None
    looping = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(looping)

    def work():
        values = torch.ones(HOT, device="cuda").unbind()
        looping.read_every(values)  # @reads
        for v in values[:HOT]:
            v.item()  # @own_reads

    r = profiled(work)
    found = [h for h in hints(r) if h.line.line == line_of("reads")]
    assert [(type(h), h.kind) for h in found] == [(LibraryHint, "library_syncs")]
    # NB: Python 3.12 runs a list comprehension in its function's own frame (PEP 709)
    function = "read_every" if sys.version_info >= (3, 12) else "<listcomp>"
    assert (
        found[0].where
        == f"looping_lib.py:2 {function} (inside {found[0].line.file}:{line_of('reads')})"
    )
    assert "return [v.item() for v in values]" in found[0].message
    assert found[0].evidence.startswith(f"{HOT} syncs (item {HOT}) and {HOT} copies made at")
    # the user's own .item() loop keeps its hint
    own = [h.kind for h in hints(r) if h.line.line == line_of("own_reads")]
    assert own == ["item_in_loop"]


def test_a_checkpoint_saved_once_gets_no_hint_and_one_saved_every_step_is_told_so(tmp_path):
    """torch.save copies each of a model's storages to the host (torch/serialization.py
    ``_save``): one save of 12 storages used to read as 'torch waits for the GPU here: look for
    a setting of torch that controls pickler.dump(obj)'. Once is no fault; every step is."""
    from gpuwatch.analysis.library_hints import all_hints

    layers = 6  # 6 x (weight, bias): 12 storages, past library_hints.HOT

    def work(save_every_step: bool):
        model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(layers)]).to("cuda")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            model(torch.ones(1, 2, device="cuda")).sum().backward()
            opt.step()
            if save_every_step:
                torch.save(model.state_dict(), tmp_path / "every.pt")  # @every
        torch.save(model.state_dict(), tmp_path / "once.pt")  # @once

    r = profiled(lambda: work(False))
    once = line_at(r, line_of("once"))
    assert once.syncs.by_cause == {"copy_to_host": 2 * layers}
    assert frames(once)[0][:1] == ("torch/serialization.py",)
    assert [h.kind for h in all_hints(r) if h.line.line == line_of("once")] == []

    # a script with no optimizer step (word_language_model steps its weights by hand)
    def no_steps():
        model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(layers)]).to("cuda")
        torch.save(model, tmp_path / "model.pt")  # @no_steps

    r = profiled(no_steps)
    assert line_at(r, line_of("no_steps")).syncs.by_cause == {"copy_to_host": 2 * layers}
    assert [h.kind for h in all_hints(r) if h.line.line == line_of("no_steps")] == []

    r = profiled(lambda: work(True))
    every = line_at(r, line_of("every"))
    assert every.syncs.by_cause == {"copy_to_host": 3 * 2 * layers}
    found = [h for h in all_hints(r) if h.line.line == line_of("every")]
    assert [h.kind for h in found] == ["checkpoint_often"]
    assert "in 3 of 3 steps" in found[0].message and "every N steps" in found[0].message
    assert "look for a setting of torch" not in found[0].message


def test_a_lines_time_hint_stays_first_when_a_library_made_its_syncs(tmp_path):
    """HF's ``trainer.train()`` under ``--gpu H100``: launch-bound, 29 ms per step at that
    line, and every sync of it made inside the Trainer. The line's '.item() in a loop' gives
    way to the library frame's knob, but its launch-bound hint (what its time went to) used to
    be dropped with it, the hints then ordered 'no time measured'."""
    from gpuwatch.analysis.hints import Hint, hints, hints_order
    from gpuwatch.analysis.library_hints import with_library_hints

    lib = tmp_path / "env" / "site-packages"
    lib.mkdir(parents=True)
    (lib / "trainer_like.py").write_text(TRAINER)
    spec = importlib.util.spec_from_file_location("trainer_like", lib / "trainer_like.py")
    assert spec is not None and spec.loader is not None
    trainer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer)

    def work():
        loss = torch.ones(3, device="cuda").sum()
        for _ in range(12):
            trainer.log_loss(loss)  # @train

    r = profiled(work)
    line = line_at(r, line_of("train"))
    assert frames(line) == [("trainer_like.py", 5, "log_loss", 12, 12)]
    launch = Hint("launch_bound", line, "the GPU waits while ...", "", cost_ms=29.0)
    own = hints(r)
    assert [h.kind for h in own] == ["item_in_loop"]  # the line's own, about trainer's code
    got = with_library_hints(r, [launch, *own], 0)
    assert [h.kind for h in got] == ["launch_bound", "library_syncs"]
    assert got[0] is launch and hints_order(got) == "the largest saving first"


def test_a_transformer_encoders_causal_mask_check_is_told_to_pass_is_causal():
    """pytorch/examples' word_language_model (Transformer) calls ``self.encoder(src,
    mask=self.src_mask)``: torch compares the mask with a causal one on every forward
    (torch/nn/modules/transformer.py ``_detect_is_causal_mask``, torch 2.13: ``bool((mask ==
    causal_comparison).all())``), one sync each; ``is_causal=True`` skips it."""
    from gpuwatch.analysis.library_hints import all_hints

    forwards = 3

    def work(is_causal: bool | None):
        layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
        encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).to("cuda")
        mask = nn.Transformer.generate_square_subsequent_mask(5, device="cuda")
        x = torch.zeros(5, 2, 8, device="cuda")
        for _ in range(forwards):
            encoder(x, mask=mask, is_causal=is_causal)  # @encoder

    r = profiled(lambda: work(None))
    line = line_at(r, line_of("encoder"))
    assert line.syncs.by_cause == {"item": forwards}
    (frame,) = line.library
    assert (frame.file, frame.function) == (
        "torch/nn/modules/transformer.py",
        "_detect_is_causal_mask",
    )
    found = [h for h in all_hints(r) if h.line.line == line_of("encoder")]
    assert [h.kind for h in found] == ["torch_causal_mask_check"]
    assert "is_causal=True" in found[0].message

    r = profiled(lambda: work(True))
    at = [s for s in r.lines if s.line == line_of("encoder")]  # none on the fast path
    assert all(s.syncs.count == 0 and s.library == () for s in at)
    assert r.totals.syncs.by_cause == {"copy_to_device": 12}  # the model's .to("cuda") only
