"""A live session attached to a few lines of ``sh`` that speak the ``--live`` protocol: the
model and the view tested in milliseconds, with a real process and real pipes but no torch."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from gpuwatch.profile.live.protocol import Message, encode
from gpuwatch.profile.live.session import ChildSession
from gpuwatch.profile.run import ProfileOptions
from gpuwatch.profile.runner import Target


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
