"""A live session attached to a few lines of ``sh`` that speak the ``--live`` protocol: the
model and the view tested in milliseconds, with a real process and real pipes but no torch; and
the messages a child profiling a small copy loop sends, for a script held in memory
(:class:`~gpuwatch.profile.live.session.InMemorySource`)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from gpuwatch.profile.live.protocol import Done, LiveSnapshot, Message, encode
from gpuwatch.profile.live.session import ChildSession
from gpuwatch.profile.run import ProfileOptions
from gpuwatch.profile.runner import Target
from profilers import Line, LineStats, OpCount, Report


def sh_child(
    body: str,
    messages: Sequence[Message] = (),
    on_int: Sequence[Message] = (),
    target: Target | None = None,
) -> ChildSession:
    """A session attached to ``sh -c BODY`` that first writes ``messages`` to the message pipe;
    with ``on_int``, SIGINT (the view's stop) makes it write those and exit 130."""
    session = ChildSession(target or Target("train.py", ["--steps", "3"]), ProfileOptions())
    read_fd, write_fd = os.pipe()
    pipe = f"/dev/fd/{write_fd}"  # NB: any fd number (sh's own redirections stop at 9)
    trap = f"trap 'printf %s \"$ON_INT\" > {pipe}; exit 130' INT; " if on_int else ""
    process = subprocess.Popen(
        ["sh", "-c", f'{trap}printf %s "$MESSAGES" > {pipe}; {body}'],
        env={
            **os.environ,
            "MESSAGES": "".join(encode(m) for m in messages),
            "ON_INT": "".join(encode(m) for m in on_int),
        },
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(write_fd,),
    )
    os.close(write_fd)
    session.attach(process, os.fdopen(read_fd, "rb"))
    return session


def copies_report(path: str, steps: int, device: str | None = "cuda:0") -> Report:
    """What a profile of ``steps`` steps of a loop at ``path`` finds: per step a 6 KiB copy
    to ``device`` at line 8, then at line 9 a 16-byte copy there and an ``.item()`` (4 bytes
    back); ``device`` None: a script that used no GPU (no lines of copies, no devices)."""
    lines = []
    if device is not None:
        big = LineStats(path, 8, "<module>")
        big.source = f'torch.randn(1536).to("{device}")  # 6.0 KiB each'
        small = LineStats(path, 9, "<module>")
        small.source = f'torch.randn(4).to("{device}").sum().item()'
        for _ in range(steps):
            big.h2d.add(6144, True, False)
            big.syncs.add("copy_to_device")
            small.h2d.add(16, True, False)
            small.syncs.add("copy_to_device")
            small.d2h.add(4, True, False)
            small.syncs.add("item")
        big.op_breakdown["_to_copy.default"] = OpCount(steps, 0.0)
        small.op_breakdown["_local_scalar_dense.default"] = OpCount(steps, 0.0)
        for s in (big, small):
            s.steps_active = steps
            s.settle()
            lines.append(Line.of(s))
    r = Report(command=[path], duration_s=1.0).with_lines(lines)
    return r.replace(devices=[{"device": device}] if device is not None else [])


def snapshot_of(report: Report, elapsed_s: float) -> LiveSnapshot:
    """The live snapshot a child sends of ``report`` so far."""
    d = report.to_dict()
    events = d["totals"]["h2d"]["count"] + d["totals"]["d2h"]["count"]
    return LiveSnapshot(
        elapsed_s, d["totals"], d["devices"], d["sites"], len(d["sites"]), events, "every_op"
    )


def finished(report: Report, exit_code: int = 0) -> Done:
    """The child's last message: its exit and its report."""
    return Done(exit_code, True, None, report.to_dict() | {"exit_code": exit_code})
