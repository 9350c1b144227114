"""``gpuwatch top --json | head -c 400``: a reader that goes away ends gpuwatch quietly, as it
ends ``cat`` (exit status 128 + SIGPIPE, nothing on stderr)."""

from __future__ import annotations

import signal
import subprocess

import pytest

pytestmark = pytest.mark.slow


def test_a_closed_pipe_ends_top_json_quietly():
    # NB: 64 GPUs make about 100 KB of JSON, more than a pipe holds (64 KiB), so gpuwatch is
    # still writing when the reader closes its end: the write fails every time, not by chance.
    proc = subprocess.Popen(
        ["gpuwatch", "top", "--demo", "--demo-gpus", "64", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    head = proc.stdout.read(400)
    proc.stdout.close()
    assert proc.wait(timeout=60) == 128 + signal.SIGPIPE
    assert head.startswith(b'{\n  "schema": "gpuwatch.snapshot/1",')
    assert proc.stderr.read() == b""
