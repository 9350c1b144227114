"""The messages between the profiled child and the live app: one JSON object per line.

Every message carries ``"v": VERSION`` and a ``"type"``:

* ``hello``: ``{"pid", "command"}``, once, before the script starts;
* ``snapshot``: :meth:`profilers.Profile.live_snapshot`'s dict, several times a second;
* ``done``: ``{"exit_code", "finished", "error", "report"}`` with the full report document;
* ``fatal``: ``{"error"}`` when the child could not run the script at all.
"""

from __future__ import annotations

import json
from typing import Any

VERSION = 1
TYPES = ("hello", "snapshot", "done", "fatal")


class ProtocolError(ValueError):
    """A line that is not a message of this protocol; the text says why, in one line."""


def encode(kind: str, **fields: Any) -> str:
    return json.dumps({"v": VERSION, "type": kind, **fields}, separators=(",", ":")) + "\n"


def decode(line: str) -> dict[str, Any]:
    try:
        msg = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(msg, dict):
        raise ProtocolError("not a JSON object")
    if msg.get("v") != VERSION:
        raise ProtocolError(f"protocol version {msg.get('v')!r}, expected {VERSION}")
    if msg.get("type") not in TYPES:
        raise ProtocolError(f"unknown message type {msg.get('type')!r}")
    return msg
