"""Ways a script ends that plain ``python`` handles and gpuwatch must too: replacing itself with
``os.exec*``, closing ``sys.stderr``, and recursing until Python stops it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from gpuwatch.cli import main as cli
from gpuwatch.output.load import problem
from tests.helpers import GPUWATCH, default_signals, run

# Three copies to a (fake) GPU of 16 floats, 64 bytes each.
COPIES = textwrap.dedent("""
    import os, sys, torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    with FakeTensorMode(shape_env=ShapeEnv()):
        for _ in range(3):
            torch.randn(16).to("cuda:0")
""")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("call", "shown"),
    [
        ('os.execlp("sh", "sh", "-c", "echo replaced; exit 7")', "/bin/sh"),
        (
            'os.execve("/bin/sh", ["sh", "-c", "echo replaced; exit 7"], dict(os.environ))',
            "/bin/sh",
        ),
    ],
    ids=["execlp", "execve"],
)
def test_exec_writes_the_partial_report_before_the_image_is_replaced(tmp_path, call, shown):
    # NB: execlp first tries PATH entries that have no sh: those fail and must not end the run.
    (tmp_path / "ex.py").write_text(COPIES + 'print("before exec", flush=True)\n' + call + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "profile", "--json", "r.json", "ex.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=default_signals,
        env={**os.environ, "PATH": f"{tmp_path}/nothing:/usr/bin:/bin:{os.environ['PATH']}"},
    )
    assert done.returncode == 7, done.stderr  # the new program's own exit code
    assert done.stdout == "before exec\nreplaced\n"
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["partial"] is True and doc["exit_code"] == 0
    name = "execv" if "execlp" in call else "execve"
    assert doc["error"].startswith(f"replaced by exec: the script called os.{name}('")
    assert os.path.realpath(doc["error"].split("'")[1]) == os.path.realpath(shown)
    assert (doc["totals"]["h2d"]["count"], doc["totals"]["h2d"]["bytes"]) == (3, 192)
    assert problem(doc) is None
    assert "gpuwatch: wrote r.json" in done.stderr and "replaced by exec" in done.stderr


def test_an_exec_that_fails_leaves_the_run_going(tmp_path, monkeypatch, capfd):
    (tmp_path / "ex.py").write_text(
        COPIES
        + textwrap.dedent("""
        try:
            os.execv("/nonexistent/prog", ["prog"])
        except FileNotFoundError:
            print("exec failed, going on")
        with FakeTensorMode(shape_env=ShapeEnv()):
            torch.randn(16).to("cuda:0")
    """)
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["profile", "-q", "--json", "r.json", "ex.py"]) == 0
    assert capfd.readouterr().out == "exec failed, going on\n"
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["partial"] is False and doc["totals"]["h2d"]["count"] == 4
    # nothing of the hold is left installed in this process
    assert os.execv.__module__ in ("posix", "os") and os.execve.__module__ in ("posix", "os")


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags", [[], pytest.param(["--fake-cuda"], marks=pytest.mark.fake_cuda)], ids=["plain", "fake"]
)
def test_a_script_that_does_not_compile_shows_its_syntax_error_alone(tmp_path, flags):
    (tmp_path / "bad.py").write_text("import torch\nif torch\n    print(1)\n")
    plain = run([sys.executable, "bad.py"], tmp_path)
    done = run([*GPUWATCH, "profile", *flags, "--json", "r.json", "bad.py"], tmp_path)
    assert done.returncode == plain.returncode == 1
    assert f'File "{tmp_path / "bad.py"}", line 2' in done.stderr
    assert done.stderr.endswith("SyntaxError: expected ':'\n")
    assert done.stderr == plain.stderr  # file, line, caret and message, as python shows them
    for said in (done.stdout, done.stderr):
        assert "gpuwatch profile" not in said and "exit code" not in said
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_a_script_that_closes_stderr_exits_0_as_python_does(tmp_path):
    (tmp_path / "quiet.py").write_text(
        'import sys\nprint("done", flush=True)\nsys.stderr.close()\n'
    )
    plain = run([sys.executable, "quiet.py"], tmp_path)
    done = run(["gpuwatch", "profile", "--json", "r.json", "quiet.py"], tmp_path)
    assert (plain.returncode, done.returncode) == (0, 0), done.stderr
    assert done.stdout == "done\n" and "lost sys.stderr" not in done.stderr
    assert "gpuwatch: wrote r.json" in done.stderr  # gpuwatch's own lines still reach fd 2
    assert json.loads((tmp_path / "r.json").read_text())["partial"] is False


@pytest.mark.slow
def test_a_script_that_closes_stderr_and_then_raises_exits_1_with_its_traceback(tmp_path):
    (tmp_path / "raises.py").write_text(
        "import sys\nsys.stderr.close()\nraise ValueError('after closing stderr')\n"
    )
    done = run(["gpuwatch", "profile", "-q", "--json", "r.json", "raises.py"], tmp_path)
    assert done.returncode == 1
    assert done.stderr.endswith("ValueError: after closing stderr\n")
    assert json.loads((tmp_path / "r.json").read_text())["error"] == (
        "ValueError: after closing stderr"
    )


@pytest.mark.parametrize("flags", [[], ["--no-kernel-timing"]], ids=["every_op", "fast_path"])
def test_a_recursion_error_shows_the_scripts_traceback_only(tmp_path, monkeypatch, capfd, flags):
    # An op on every level: the recursion limit is met inside the profiler's own code.
    (tmp_path / "deep.py").write_text(
        "import torch\n\ndef f(t, n):\n    t = t + 1\n    return f(t, n + 1)\n\nf(torch.ones(2), 0)\n"
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["profile", "-q", *flags, "--json", "r.json", "deep.py"]) == 1
    err = capfd.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n")
    assert err.count("Traceback") == 1 and "During handling" not in err
    files = {line.split('"')[1] for line in err.splitlines() if line.startswith("  File ")}
    assert files == {f"{tmp_path}/deep.py"}  # no frame of gpuwatch, the profiler or torch
    assert "[Previous line repeated" in err
    last = err.splitlines()[-1]  # Python's own words (it may add "while calling ...")
    assert last.startswith("RecursionError: maximum recursion depth exceeded")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["error"] == last
    assert doc["partial"] is True and doc["exit_code"] == 1


def test_a_scripts_own_chained_exceptions_are_shown_whole(tmp_path, monkeypatch, capfd):
    (tmp_path / "chain.py").write_text(
        textwrap.dedent("""
        import torch
        try:
            {}["missing"]
        except KeyError:
            torch.ones(2) + torch.ones(3)  # raised inside the profiler's dispatch
    """)
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["profile", "-q", "chain.py"]) == 1
    err = capfd.readouterr().err
    assert "KeyError: 'missing'" in err and "During handling of the above exception" in err
    assert "RuntimeError: The size of tensor a (2) must match" in err
    assert "profilers" not in err and "gpuwatch" not in err


@pytest.mark.slow
def test_a_scripts_traceback_keeps_pythons_carets(tmp_path, monkeypatch, capfd):
    # Python 3.11 marks the failing expression of each frame with ^^^^: under gpuwatch the
    # script's traceback is byte for byte the one plain python prints.
    (tmp_path / "carets.py").write_text(
        "import torch\n\ndef load(cfg):\n    return cfg['lr'] * 2\n\n"
        "torch.ones(2).sum()\nx = load({'epochs': 1}) + 1\n"
    )
    plain = run([sys.executable, "carets.py"], tmp_path)
    assert plain.returncode == 1 and "~~~^^^^^^\n" in plain.stderr  # under cfg["lr"]
    monkeypatch.chdir(tmp_path)
    assert cli.main(["profile", "-q", "carets.py"]) == 1
    assert capfd.readouterr().err == plain.stderr


@pytest.mark.slow
def test_a_keyboard_interrupt_shows_where_the_script_was_as_python_does(
    tmp_path, monkeypatch, capfd
):
    # Ctrl-C in a function: plain python prints the traceback to it (then dies of SIGINT, which
    # a shell reads as 130); gpuwatch prints the same lines and exits 130 with its report.
    (tmp_path / "kbi.py").write_text(
        "import torch\n\ndef train():\n    torch.ones(2).sum()\n    raise KeyboardInterrupt\n\n"
        "train()\n"
    )
    plain = run([sys.executable, "kbi.py"], tmp_path)
    assert plain.returncode == -signal.SIGINT and "line 5, in train" in plain.stderr
    monkeypatch.chdir(tmp_path)
    assert cli.main(["profile", "-q", "--json", "r.json", "kbi.py"]) == 130
    assert capfd.readouterr().err == plain.stderr
    assert json.loads((tmp_path / "r.json").read_text())["error"] == "KeyboardInterrupt"
