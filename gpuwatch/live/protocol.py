"""The messages between the profiled child and the live app: one JSON object per line.

Every message carries ``"v": VERSION`` and a ``"type"``:

* ``hello``: ``{"pid", "command"}``, once, before the script starts;
* ``snapshot``: :meth:`profilers.Profile.live_snapshot`'s dict, several times a second;
* ``done``: ``{"exit_code", "finished", "error", "report"}`` with the full report document;
* ``fatal``: ``{"error"}`` when the child could not run the script at all.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from profilers.report import SCHEMA, Report

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


def report_from_snapshot(
    snapshot: dict[str, Any] | None, command: Sequence[str], exit_code: int, error: str
) -> Report:
    """The partial report of a child that died before sending its own (SIGKILL, the OOM
    killer): the last ``snapshot`` message that arrived, its top lines only."""
    snap = snapshot or {
        "elapsed_s": 0.0,
        "devices": [],
        "sites": [],
        "totals": {
            w: {"count": 0, "bytes": 0, "pageable": 0, "non_blocking": 0}
            for w in ("h2d", "d2h", "d2d", "p2p")
        }
        | {"syncs": {"count": 0, "by_cause": {}}, "kernel_time_ms": 0.0, "ops": 0},
    }
    return Report.from_dict(
        {
            "schema": SCHEMA,
            "command": list(command),
            "exit_code": exit_code,
            "duration_s": snap["elapsed_s"],
            "partial": True,
            "error": error,
            "devices": snap["devices"],
            "totals": snap["totals"],
            "sites": snap["sites"],
            "options": {"source": "last live snapshot (top lines only)"},
        }
    )
