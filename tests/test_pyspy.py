"""The py-spy stack view's helper against real processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from gpuwatch.monitor.pyspy import StackDumpError, dump_stack, explain_failure


@pytest.fixture
def sleeper(tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text(
        textwrap.dedent("""
        import sys, time
        def waiting_for_godot():
            print("ready", flush=True)
            time.sleep(60)
        waiting_for_godot()
    """)
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.slow
def test_dump_of_a_python_process_shows_its_function(sleeper):
    try:
        text = dump_stack(sleeper.pid)
    except StackDumpError as exc:  # e.g. a container without CAP_SYS_PTRACE
        assert "permission" in str(exc)
        pytest.skip(str(exc))
    assert "waiting_for_godot" in text and "sleeper.py" in text


@pytest.mark.slow
def test_a_process_that_is_not_python():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(StackDumpError, match=r"(not a Python process|permission)"):
            dump_stack(proc.pid)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_a_process_that_has_exited():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(StackDumpError, match="has exited"):
        dump_stack(proc.pid)


def test_permission_message_says_what_to_do():
    msg = explain_failure(7, "Error: Permission denied (os error 13)")
    assert "no permission" in msg and "ptrace" in msg and "\n" not in msg


def test_unknown_errors_keep_py_spy_first_line():
    assert explain_failure(7, "\nError: something new\nStack backtrace:") == (
        "py-spy failed on process 7: something new"
    )
