"""The import boundaries between the layers (ARCHITECTURE.md), enforced by ruff's banned-api rule (mypy --strict runs in
.ci/run). A violation (pynvml outside gpuwatch/monitor/nvml/_real.py, UI imports in profilers/) fails here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> list[str]:
    if shutil.which(name) is None and not (Path(sys.executable).parent / name).exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return [sys.executable, "-m", name]


@pytest.mark.slow
def test_ruff_lint_and_import_boundaries():
    done = subprocess.run([*_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("where", "line", "banned"),
    [
        ("profilers", "import textual", "textual"),
        ("profilers", "from gpuwatch import cli", "gpuwatch"),
        (
            "profilers/timing",
            "from profilers.counting.mode import ProfilerMode",
            "profilers.counting",
        ),
        (
            "profilers/timing",
            "def f():\n    from profilers.counting import dispatch",
            "profilers.counting",
        ),
        ("profilers/timing", "from profilers.fake_cuda import harness", "profilers.fake_cuda"),
        ("profilers/timing", "import textual", "textual"),
        ("gpuwatch/monitor/nvml", "import torch", "torch"),
        ("gpuwatch/monitor/nvml", "from gpuwatch.ui import top", "gpuwatch.ui"),
        ("gpuwatch/output", "import textual", "textual"),
        ("gpuwatch/output", "import torch", "torch"),
        ("gpuwatch/output", "from gpuwatch.ui.widgets import GpuCard", "gpuwatch.ui"),
        ("gpuwatch/output", "from gpuwatch.ui.live.app import LiveApp", "gpuwatch.ui"),
        ("gpuwatch/output", "from gpuwatch.analysis import analyze", "gpuwatch.analysis.analyze"),
        ("gpuwatch/analysis", "from gpuwatch.output import text", "gpuwatch.output"),
        ("gpuwatch/analysis", "import torch", "torch"),
        ("gpuwatch/monitor", "import torch", "torch"),
        ("gpuwatch/monitor", "from gpuwatch.profile import run", "gpuwatch.profile"),
        ("gpuwatch/monitor", "from profilers.registry import OwnThread", "profilers"),
        ("gpuwatch/monitor", "from gpuwatch.ui.widgets import GpuCard", "gpuwatch.ui"),
        ("gpuwatch/ui/top", "from gpuwatch.profile.live.model import LiveRun", "gpuwatch.profile"),
        ("gpuwatch/ui/top", "from gpuwatch.ui.live.app import LiveApp", "gpuwatch.ui.live"),
        ("gpuwatch/ui/top", "import torch", "torch"),
    ],
)
def test_each_layer_bans_what_sits_above_it(where, line, banned):
    # NB: the probe goes to ruff on stdin, named as if it lay in ``where``: nothing is written
    # in the source tree, where a parallel worker's ``ruff check .`` would see it.
    probe = ROOT / where / "_layer_probe.py"
    assert not probe.exists()
    done = subprocess.run(
        [*_tool("ruff"), "check", "--select", "TID251", "--stdin-filename", str(probe), "-"],
        cwd=ROOT,
        input=line + "\n",
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and f"`{banned}` is banned" in done.stdout, done.stdout


def _modules() -> dict[str, Path]:
    out = {}
    for package in ("gpuwatch", "profilers"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


#: What ``gpuwatch top`` must never load: the profiler, torch, the profile run and its reports.
PROFILE_HALF = ("profilers", "torch", "gpuwatch.profile", "gpuwatch.output", "gpuwatch.analysis")

#: Run in a fresh interpreter: imports the top app; then runs ``gpuwatch top --demo`` through
#: the CLI's ``main()`` up to where the app would start. Prints the modules loaded after each.
_TOP_PROBE = """
import json, sys
seen = {}
import gpuwatch.ui.top.app
from gpuwatch.ui import signals
seen["top"] = sorted(sys.modules)
from gpuwatch.cli.main import main
def started(app):
    seen["app"] = type(app).__name__
    seen["entry"] = sorted(sys.modules)
signals.run_restoring_signals = started
seen["code"] = main(["top", "--demo"])
print(json.dumps(seen))
"""


def _profile_half(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in PROFILE_HALF)]


@pytest.mark.slow
def test_the_top_app_loads_nothing_of_the_profile_half():
    """The ruff bans see direct imports only; this sees what the top app loads round about, in
    a fresh interpreter (a shared widget package once pulled in 23 profile modules), and what
    the ``gpuwatch top`` command loads on its way there: the CLI imports only the subcommand
    that runs."""
    import json

    done = subprocess.run(
        [sys.executable, "-c", _TOP_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["app"] == "TopApp" and seen["code"] == 0
    assert _profile_half(seen["top"]) == []
    assert _profile_half(seen["entry"]) == []


#: ``gpuwatch top --once``, the top level's help, then each monitor command's help, in one
#: fresh interpreter: what they loaded of the profiler, together.
_MONITOR_PROBE = """
import contextlib, io, sys
from gpuwatch.cli.main import main
for argv in (["top", "--demo", "--once"], ["--help"], ["top", "--help"], ["export", "--help"]):
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
        main(argv)
    assert "usage: gpuwatch" in out.getvalue() or "GPU" in out.getvalue(), argv
print(sorted(m for m in sys.modules if m.startswith(("profilers", "gpuwatch.profile"))))
"""


@pytest.mark.slow
def test_the_monitor_commands_and_the_help_load_nothing_of_the_profiler():
    """``gpuwatch top --once``, ``gpuwatch --help`` and ``top``/``export --help`` build only
    the parser they show: ``profile``'s options (and the 18 modules they import) stay out."""
    done = subprocess.run(
        [sys.executable, "-c", _MONITOR_PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def _import_graph(collapse: Any = lambda name: name) -> dict[str, set[str]]:
    """Which of our modules each module imports (``collapse`` maps a module to its node), inside
    functions too (a lazy import still ties the two together), not under ``if TYPE_CHECKING``.
    A package's ``__init__`` re-exporting its own modules is not an edge."""
    import ast

    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text())
        typing_only = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
            for n in ast.walk(node)
        }
        deps = graph.setdefault(collapse(name), set())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for n in names:
                if n not in modules or n == name or id(node) in typing_only:
                    continue
                if is_package and n.startswith(name + "."):
                    continue  # an __init__ re-exporting its own modules
                if collapse(n) != collapse(name):
                    deps.add(collapse(n))
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    def reaches(start: str, goal: str) -> bool:
        todo, seen = [start], {start}
        while todo:
            for dep in graph[todo.pop()]:
                if dep == goal:
                    return True
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return False

    return sorted((a, b) for a in graph for b in graph[a] if a < b and reaches(b, a))


def test_no_import_cycles():
    """No two modules import each other, directly or round about."""
    assert _cycles(_import_graph()) == []


def test_the_profilers_subpackages_import_one_way():
    """No two of profilers' subpackages (counting, timing, memory, fake_cuda, kineto) import
    each other, round about or inside a function: timing sits below counting (the hot path
    writes into its clock), the fake GPU above both (ARCHITECTURE.md's layers)."""

    subs = {f"profilers.{d.parent.name}" for d in (ROOT / "profilers").glob("*/__init__.py")}

    def subpackage(name: str) -> str:
        return ".".join(name.split(".")[:2])

    graph = {n: deps & subs for n, deps in _import_graph(subpackage).items() if n in subs}
    assert _cycles(graph) == []
    assert "profilers.counting" not in graph["profilers.timing"]


def test_timing_reaches_no_counting_module_round_about():
    """Not through a module beside the subpackages either (profilers/patches.py imports the
    counting core: timing's input iterator once reached it that way)."""
    graph = _import_graph()
    for start in (m for m in graph if m.startswith("profilers.timing")):
        seen, todo = {start}, [start]
        while todo:
            for dep in graph.get(todo.pop(), ()):
                assert not dep.startswith("profilers.counting"), (start, dep)
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
