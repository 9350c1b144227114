"""torch.compile under gpuwatch: where dynamo compiles (the fast path of --no-kernel-timing) the
report says what it compiled and where its graphs broke, in dynamo's words, and gpuwatch adds no
break of its own; where a dispatch mode keeps it from compiling (kernel timing, --fake-cuda) the
report's first lines say the code ran eager, and its copies and syncs are counted at their
lines. fullgraph=True refused in one line that is true of the options given."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import profilers
from gpuwatch.analysis import analyze
from gpuwatch.output.compiled import compiled_lines
from gpuwatch.output.html import render_html
from profilers import Report
from tests.helpers import gpuwatch_here

HERE = "tests/test_compiled.py"
"""This file as the report names it (relative to the working directory, the repository's)."""

ITEM_BREAK = "Unsupported Tensor.item() call with capture_scalar_outputs=False"
"""Dynamo's own first line for the graph break of ``.item()`` (torch 2.9 to 2.15)."""


def _with_item(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    s = y.sum().item()  # a graph break: dynamo runs it eagerly, between two graphs
    return y + s


def _breaks_without_gpuwatch() -> list[dict[str, object]]:
    """The graph breaks of _with_item compiled and run without any profile (a fresh compile:
    dynamo.reset forgets the code compiled before)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    before = dict(counters["graph_break"])
    f = torch.compile(_with_item, backend="eager")
    for _ in range(3):
        f(torch.ones(4))
    return [
        {"reason": str(k).splitlines()[0], "count": v - before.get(k, 0)}
        for k, v in counters["graph_break"].items()
        if v - before.get(k, 0)
    ]


def test_the_fast_path_lets_dynamo_compile_and_reports_its_graphs_and_breaks():
    assert _breaks_without_gpuwatch() == [{"reason": ITEM_BREAK, "count": 1}]
    torch._dynamo.reset()
    f = torch.compile(_with_item, backend="eager")
    with profilers.profile(kernel_timing=False) as prof:
        for _ in range(3):
            assert torch.equal(f(torch.ones(4)), torch.full((4,), 10.0))  # 2 + 8
    c = prof.report().compiled
    assert c is not None
    # Two graphs: x * 2 and its sum before the .item(), y + s after it (its resume function).
    # NB: gpuwatch's own kernel (the .item() runs eagerly through it between the graphs) is
    # hidden from dynamo: before, dynamo compiled it too and broke at its perf_counter_ns, a
    # second graph break the run without gpuwatch does not have.
    assert c["graphs"] == 2
    assert c["graph_breaks"] == [{"reason": ITEM_BREAK, "count": 1}]
    # the break's line: where dynamo resumed after it, the .item() line
    line = _with_item.__code__.co_firstlineno + 2
    assert c["graph_break_lines"] == [{"file": HERE, "line": line, "function": "_with_item"}]
    assert (c["recompiled"], c["ran_eager"]) == ([], None)
    assert c["frames"] >= 2  # _with_item and its resume function, at least
    assert compiled_lines(prof.report()) == [
        f"torch.compile: dynamo compiled 2 graphs, 1 graph break (at {HERE}:{line}): "
        f"{ITEM_BREAK} (x1)"
    ]


def _scaled(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * n


def test_a_function_dynamo_compiles_again_is_named_with_its_versions():
    torch._dynamo.reset()
    f = torch.compile(_scaled, backend="eager")
    with profilers.profile(kernel_timing=False) as prof:
        for n in (1, 2, 3):  # 1: specialised on n; 2: recompiled with n dynamic; 3: reused
            f(torch.ones(4), n)
    r = prof.report()
    assert r.compiled is not None
    line = _scaled.__code__.co_firstlineno
    assert r.compiled["graphs"] == 2 and r.compiled["graph_breaks"] == []
    assert r.compiled["recompiled"] == [
        {"file": HERE, "line": line, "function": "_scaled", "compiles": 2}
    ]
    assert compiled_lines(r) == [
        "torch.compile: dynamo compiled 2 graphs",
        f"torch.compile recompiled: {HERE}:{line} _scaled (2 versions)",
    ]


def test_on_the_fast_path_the_item_of_a_graph_break_is_a_sync_at_its_line(monkeypatch):
    from profilers.counting import ops as _ops

    # A rule that takes every .item() for a GPU's (a 4-byte read back and a sync): CPU code
    # to count with, as on a GPU where the fast path's kernel sees the same op.
    def every_item_syncs(args, kwargs, out, is_pinned):
        return _ops.Transfer("d2h", 4, True, False, _ops.ITEM, "cuda:0", "cpu")

    monkeypatch.setitem(
        _ops.CLASSIFIERS, torch.ops.aten._local_scalar_dense.default, every_item_syncs
    )
    torch._dynamo.reset()
    f = torch.compile(_with_item, backend="eager")
    with profilers.profile(kernel_timing=False) as prof:
        for _ in range(3):
            f(torch.ones(4))
    r = prof.report()
    assert r.compiled is not None and r.compiled["graphs"] == 2  # it ran compiled
    first = _with_item.__code__.co_firstlineno
    # dynamo runs the .item() eagerly between its two graphs, once a call, at its own line
    syncs = {s.line - first: (s.syncs.count, s.d2h.count) for s in r.lines if s.syncs.count}
    assert syncs == {2: (3, 3)}


def _widened(y: torch.Tensor) -> torch.Tensor:
    return y.to(torch.float64) + 1  # the copy (a GPU's would leave the device)


def _with_copy(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    z = _widened(y)
    return z.sum()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_on_the_fast_path_a_copy_inside_a_compiled_graph_is_at_its_own_line(
    monkeypatch, backend: str
):
    from profilers.counting import ops as _ops

    # A rule that takes every cast to float64 for a copy to the host (8 bytes an element, a
    # sync): CPU code to count with, as a GPU's .to("cpu") inside the graph would be.
    def widening_is_a_copy(args, kwargs, out, is_pinned):
        if out.dtype != torch.float64:
            return None
        return _ops.Transfer(
            "d2h", out.numel() * 8, True, False, _ops.COPY_TO_HOST, "cuda:0", "cpu"
        )

    monkeypatch.setitem(_ops.CLASSIFIERS, torch.ops.aten._to_copy.default, widening_is_a_copy)
    torch._dynamo.reset()
    f = torch.compile(_with_copy, backend=backend)
    with profilers.profile(kernel_timing=False) as prof:
        for _ in range(3):
            f(torch.ones(4))
    r = prof.report()
    assert r.compiled is not None and r.compiled["graphs"] == 1  # one graph, no break
    assert r.compiled["graph_breaks"] == []
    # NB: the graph runs in _with_copy's frame, whose line is its def while it runs: the
    # copy's own line is the graph's record of where dynamo traced it (in _widened, inlined)
    (line,) = [s for s in r.lines if s.d2h.count]
    lineno = _widened.__code__.co_firstlineno + 1
    assert (line.file, line.line, line.function) == (HERE, lineno, "_widened")
    assert (line.d2h.count, line.d2h.bytes, line.syncs.by_cause) == (3, 96, {"copy_to_host": 3})
    assert (
        line.source == "return y.to(torch.float64) + 1  # the copy (a GPU's would leave the device)"
    )
    # its caller: the line of _with_copy that called _widened, then this test
    called_at = _with_copy.__code__.co_firstlineno + 2
    assert line.stack[0] == f"{HERE}:{called_at} _with_copy"
    # made by the user's own code: no library frame (never torch.fx's or dynamo's plumbing)
    assert line.library == ()


def test_code_inductor_wrote_is_never_the_users_line(tmp_path: Path, monkeypatch):
    # Inductor's wrapper code (its cache folder, outside site-packages) calls the ops a graph
    # could not fuse: a device copy, an .item() kept in the graph. Those belong to the user's
    # line that ran the graph, never to a line of generated code.
    from torch._inductor.runtime import cache_dir_utils

    from profilers.counting.user_code import UserCode

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    assert cache_dir_utils.default_cache_dir()  # loaded: what a compiled run has
    user = UserCode()
    assert not user(str(tmp_path / "inductor" / "ab" / "cabcdef.py"))
    assert user(str(tmp_path / "train.py"))


@pytest.mark.slow  # inductor starts the C++ compiler on a cold cache
@pytest.mark.skipif(
    not any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "clang++", "c++")),
    reason="inductor compiles CPU graphs with a C++ compiler, and none is installed",
)
def test_reduce_overhead_on_a_cpu_tensor_runs_compiled_without_cuda_graphs_and_says_so():
    # mode="reduce-overhead" asks inductor for CUDA graphs; a graph on a CPU tensor (all there
    # is on a torch without CUDA) is compiled and run without them, which inductor only logs
    # under TORCH_LOGS=cudagraphs: the report says it
    torch._dynamo.reset()
    model = torch.nn.Linear(8, 8)
    f = torch.compile(model, mode="reduce-overhead")
    with profilers.profile(kernel_timing=False) as prof:
        for _ in range(3):  # CUDA graph trees: a warm-up call, a recording, then replays
            out = f(torch.ones(2, 8))
    assert torch.allclose(out, model(torch.ones(2, 8)))
    r = prof.report()
    c = r.compiled
    assert c is not None
    assert (c["graphs"], c["ran_eager"], c["cudagraph_skips"]) == (1, None, 1)
    assert compiled_lines(r) == [
        "torch.compile: dynamo compiled 1 graph",
        'torch.compile: inductor ran 1 graph without CUDA graphs (mode="reduce-overhead" asked '
        "for them; a graph on a CPU device, one that mutates its input or has dynamic shapes "
        "is skipped: TORCH_LOGS=cudagraphs says which)",
    ]


LIBRARY = """\
import torch


def widen(y):
    return y.to(torch.float64)
"""


def test_a_copy_a_library_made_inside_a_compiled_graph_names_its_frame(tmp_path, monkeypatch):
    import importlib.util

    from profilers.counting import ops as _ops
    from profilers.counting import user_code

    # a library of its own (its folder a site-packages), called from the compiled function:
    # dynamo inlines it, and the graph's node keeps both frames
    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "widening.py").write_text(LIBRARY)
    roots, (ours, site_dirs, stdlib, torch_dir) = (
        user_code._library_roots(),
        user_code._library_places(),
    )
    monkeypatch.setattr(user_code, "_library_roots", lambda: (*roots, f"{lib}/"))
    monkeypatch.setattr(
        user_code, "_library_places", lambda: (ours, (f"{lib}/", *site_dirs), stdlib, torch_dir)
    )
    spec = importlib.util.spec_from_file_location("widening", lib / "widening.py")
    assert spec is not None and spec.loader is not None
    widening = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(widening)
    monkeypatch.setitem(sys.modules, "widening", widening)  # dynamo guards its globals by name

    def widening_is_a_copy(args, kwargs, out, is_pinned):
        if out.dtype != torch.float64:
            return None
        return _ops.Transfer(
            "d2h", out.numel() * 8, True, False, _ops.COPY_TO_HOST, "cuda:0", "cpu"
        )

    monkeypatch.setitem(_ops.CLASSIFIERS, torch.ops.aten._to_copy.default, widening_is_a_copy)

    def step(x: torch.Tensor) -> torch.Tensor:
        return widening.widen(x * 2).sum()  # @widen

    torch._dynamo.reset()
    f = torch.compile(step, backend="aot_eager")
    with profilers.profile(kernel_timing=False) as prof:
        for _ in range(2):
            f(torch.ones(4))
    r = prof.report()
    (line,) = [s for s in r.lines if s.d2h.count]
    assert (line.file, line.line) == (HERE, step.__code__.co_firstlineno + 1)
    made = [(f.file, f.line, f.function, f.copies, f.syncs) for f in line.library]
    assert made == [("widening.py", 5, "widen", 2, 2)]
    assert r.compiled is not None and r.compiled["graph_breaks"] == []  # one graph, inlined


def test_under_the_dispatch_mode_the_compiled_code_runs_eager_and_the_report_says_so():
    torch._dynamo.reset()
    f = torch.compile(_with_item, backend="eager")
    with profilers.profile() as prof:  # kernel timing: the dispatch mode
        for _ in range(3):
            f(torch.ones(4))
    r = prof.report()
    c = r.compiled
    assert c is not None
    assert (c["graphs"], c["graph_breaks"], c["ran_eager"]) == (0, [], "gpuwatch's dispatch mode")
    # by torch.compiler's force_eager stance, set while the profile's mode is on: dynamo is
    # handed no frame (no check per frame per call), and each call of f is counted
    assert (c["frames"], c["eager_calls"]) == (0, 3)
    # the eager code's ops, each at its own line of _with_item, 3 calls: mul; sum and
    # _local_scalar_dense; add
    first = _with_item.__code__.co_firstlineno
    ops = {s.line - first: s.ops for s in r.lines if s.function == "_with_item"}
    assert ops == {1: 3, 2: 6, 3: 3}
    # the stance is the script's again: f compiles now
    from torch._dynamo.utils import counters

    graphs = counters["stats"]["unique_graphs"]
    f(torch.ones(4))
    assert counters["stats"]["unique_graphs"] == graphs + 2
    assert compiled_lines(r) == [
        "torch.compile ran eager: dynamo compiled no graph under gpuwatch's dispatch mode (it "
        "skips every frame while a dispatch mode is on), so these counts are of the eager "
        "code; --no-kernel-timing runs it compiled"
    ]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the question is watched with no GPU only")
def test_a_compilers_own_gpu_question_is_not_the_script_asking():
    # Inductor asks torch.cuda.is_available() while it compiles, under the user's call of the
    # compiled model (seen: "NO GPU: the script asked torch.cuda.is_available() at
    # train.py:11" of a script that never asked). Code in torch/_inductor/ asks here.
    asker = os.path.join(os.path.dirname(torch.__file__), "_inductor", "gpuwatch_asker.py")
    ns = {"torch": torch}
    exec(compile("def ask():\n    return torch.cuda.is_available()\n", asker, "exec"), ns)
    with profilers.profile(kernel_timing=False) as prof:
        ns["ask"]()
    assert prof.report().gpu_fallback is None
    with profilers.profile(kernel_timing=False) as prof:
        torch.cuda.is_available()  # the script's own question is kept, at its line
    assert prof.report().gpu_fallback == {
        "asked": "torch.cuda.is_available()",
        "answer": False,
        "file": HERE,
        "line": sys._getframe().f_lineno - 5,
    }


def test_a_run_that_compiles_nothing_has_no_compiled_section():
    with profilers.profile(kernel_timing=False) as prof:
        _with_item(torch.ones(4))
    r = prof.report()
    assert r.compiled is None and "compiled" not in r.to_dict()
    assert compiled_lines(r) == []


def _report(compiled: dict[str, object]) -> Report:
    with profilers.profile(kernel_timing=False) as prof:
        pass
    d = prof.report().to_dict()
    d["compiled"] = compiled
    return Report.from_dict(json.loads(json.dumps(d)))


def test_the_section_round_trips_through_the_json_and_shows_in_the_html_and_schema():
    from jsonschema import Draft202012Validator

    from gpuwatch.output.load import schema

    breaks = [{"reason": f"reason {i}", "count": i + 1} for i in range(5)]
    section = {
        "frames": 9,
        "graphs": 3,
        "graph_breaks": breaks,
        "graph_break_lines": [{"file": "t.py", "line": 4, "function": "f"}],
        "recompiled": [],
        "ran_eager": None,
    }
    r = _report(section)
    Draft202012Validator(schema("gpuwatch.profile/1")).validate(r.to_dict())
    assert r.compiled == section
    # the three most frequent come first in the JSON (dynamo's counts); the summary names
    # those three and says where the rest are: 1 + 2 + 3 + 4 + 5 = 15 breaks
    line = (
        "torch.compile: dynamo compiled 3 graphs, 15 graph breaks (at t.py:4): reason 0 (x1); "
        "reason 1 (x2); reason 2 (x3); 2 more in the JSON"
    )
    assert compiled_lines(r) == [line]
    assert line in render_html(r, analyze(r))
    eager = _report({"frames": 4, "graphs": 0, "graph_breaks": [], "ran_eager": "x's mode"})
    assert "torch.compile ran eager: dynamo compiled no graph under x&#x27;s mode" in (
        render_html(eager, analyze(eager))
    )
    bad = eager.to_dict()
    bad["compiled"]["graphs"] = -1
    assert not Draft202012Validator(schema("gpuwatch.profile/1")).is_valid(bad)


# -- the CLI, under --fake-cuda: compiled code runs eager, its .item() a sync at its line --------

ITEM_SCRIPT = """\
import torch

@torch.compile(backend="eager")
def f(x):
    y = x * 2
    s = y.sum().item()
    return y + s

x = torch.ones(4, device="cuda")
for _ in range(3):
    f(x)
"""


@pytest.mark.fake_cuda
def test_fake_cuda_runs_compiled_code_eager_counts_its_item_and_says_so(tmp_path: Path):
    (tmp_path / "train.py").write_text(ITEM_SCRIPT)
    done = gpuwatch_here(["profile", "--fake-cuda", "--json", "r.json", "train.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    syncs = {s["line"]: s["syncs"] for s in doc["sites"] if s["syncs"]["count"]}
    assert syncs == {6: {"count": 3, "by_cause": {"item": 3}}}  # one .item() per call
    assert doc["compiled"]["ran_eager"] == "--fake-cuda's dispatch mode"
    assert doc["compiled"]["graphs"] == 0
    # in the header, before the time and the SIMULATED line
    header = " ".join(done.stderr.split("╰")[0].replace("│", " ").split())
    assert (
        "torch.compile ran eager: dynamo compiled no graph under --fake-cuda's dispatch mode "
        "(it skips every frame while a dispatch mode is on), so these counts are of the eager "
        "code; no simulated GPU runs it compiled" in header
    )
    assert header.index("torch.compile ran eager") < header.index("SIMULATED")


MODE_SCRIPT = """\
import sys
import torch

@torch.compile(mode=sys.argv[1])
def f(x):
    y = x * 2
    s = y.sum().item()
    return y + s

x = torch.ones(4, device="cuda")
for _ in range(3):
    f(x)
"""


@pytest.mark.fake_cuda
@pytest.mark.parametrize(
    ("mode", "timing"),
    [
        ("reduce-overhead", []),
        ("reduce-overhead", ["--no-kernel-timing"]),
        ("max-autotune-no-cudagraphs", ["--no-kernel-timing"]),
    ],
)
def test_fake_cuda_runs_every_compile_mode_eager_counted_and_says_so(
    tmp_path: Path, mode: str, timing: list[str]
):
    # NB: the simulated GPU is a dispatch mode whatever the counting path: dynamo compiles
    # nothing under it, so no CUDA graph is recorded (the fake GPU's own CUDA graphs are for
    # torch.cuda.graph in the script) and inductor never runs: the code runs eager, counted
    (tmp_path / "train.py").write_text(MODE_SCRIPT)
    args = ["profile", "-q", "--fake-cuda", *timing, "--json", "r.json", "train.py", mode]
    done = gpuwatch_here(args, tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    doc = json.loads((tmp_path / "r.json").read_text())
    syncs = {s["line"]: s["syncs"] for s in doc["sites"] if s["syncs"]["count"]}
    assert syncs == {7: {"count": 3, "by_cause": {"item": 3}}}  # the .item(), once a call
    c = doc["compiled"]
    assert (c["graphs"], c["ran_eager"], c["cudagraph_skips"]) == (
        0,
        "--fake-cuda's dispatch mode",
        0,
    )


FULLGRAPH = """\
import torch
model = torch.nn.Linear(8, 8).cuda()
f = torch.compile(model, backend="eager", fullgraph=True)
print(f(torch.ones(2, 8, device="cuda")).sum().item())
"""


@pytest.mark.fake_cuda
@pytest.mark.parametrize("timing", [[], ["--no-kernel-timing"]])
def test_fullgraph_under_fake_cuda_runs_eager_counted_and_says_so(
    tmp_path: Path, timing: list[str]
):
    # NB: the simulated GPU is a dispatch mode whatever the counting path: dynamo compiles
    # nothing under it. fullgraph=True raised for that ("found no compiled frames"); under
    # the profile's force_eager stance the model runs as plain Python, counted
    (tmp_path / "train.py").write_text(FULLGRAPH)
    args = ["profile", "-q", "--fake-cuda", *timing, "--json", "r.json", "train.py"]
    done = gpuwatch_here(args, tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    doc = json.loads((tmp_path / "r.json").read_text())
    c = doc["compiled"]
    assert (c["graphs"], c["ran_eager"], c["eager_calls"]) == (0, "--fake-cuda's dispatch mode", 1)
    syncs = {s["line"]: s["syncs"]["by_cause"] for s in doc["sites"] if s["syncs"]["count"]}
    # the Linear's weight and bias to the GPU (pageable: a sync each), the .item()
    assert syncs == {2: {"copy_to_device": 2}, 4: {"item": 1}}


def test_fullgraph_with_an_option_that_keeps_the_mode_runs_eager(tmp_path: Path):
    (tmp_path / "train.py").write_text(
        textwrap.dedent("""
            import torch
            f = torch.compile(lambda x: (x * 2).sum(), backend="eager", fullgraph=True)
            print(f(torch.ones(4)).item())
        """)
    )
    args = ["profile", "-q", "--no-kernel-timing", "--count-ops", "--json", "r.json", "train.py"]
    done = gpuwatch_here(args, tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "8.0\n", "")
    compiled = json.loads((tmp_path / "r.json").read_text())["compiled"]
    assert (compiled["ran_eager"], compiled["eager_calls"]) == ("gpuwatch's dispatch mode", 1)
    done = gpuwatch_here(
        ["profile", "-q", "--no-kernel-timing", "--json", "r.json", "train.py"], tmp_path
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "8.0\n", "")
    compiled = json.loads((tmp_path / "r.json").read_text())["compiled"]
    assert (compiled["graphs"], compiled["ran_eager"], compiled["eager_calls"]) == (1, None, 0)


@pytest.mark.slow
def test_in_a_fresh_process_the_first_torch_compile_sets_the_stance(tmp_path: Path):
    # gpuwatch never imports dynamo (3 s) for a script that compiles nothing: where it is not
    # loaded when the profile starts, the stance is set at the script's first torch.compile
    from tests.helpers import run

    (tmp_path / "train.py").write_text(
        textwrap.dedent("""
            import sys
            import torch
            assert "torch._dynamo" not in sys.modules
            f = torch.compile(lambda x: (x * 2).sum(), backend="eager", fullgraph=True)
            for _ in range(2):
                print(f(torch.ones(4)).item())
            print(torch._dynamo.eval_frame._stance.stance)
        """)
    )
    gpuwatch = os.path.join(os.path.dirname(sys.executable), "gpuwatch")
    done = run([gpuwatch, "profile", "-q", "--json", "r.json", "train.py"], tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "8.0\n8.0\nforce_eager\n", "")
    compiled = json.loads((tmp_path / "r.json").read_text())["compiled"]
    assert (compiled["ran_eager"], compiled["eager_calls"]) == ("gpuwatch's dispatch mode", 2)
