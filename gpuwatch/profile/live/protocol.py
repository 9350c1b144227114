"""The messages between the profiled child and the live app: typed dataclasses, one JSON object
per line on the wire.

Every line carries ``"v": VERSION`` and a ``"type"``:

* :class:`Hello` (``hello``), once, before the script starts;
* :class:`LiveSnapshot` (``snapshot``), the run so far, several times a second;
* :class:`Done` (``done``), the exit and the full report document;
* :class:`Fatal` (``fatal``), when the child could not run the script at all.

:func:`decode` checks every field's presence and type, so the app only ever holds well-formed
messages; anything else is a one-line :class:`ProtocolError`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from profilers.records import Totals
from profilers.report import SCHEMA, Report

VERSION = 1


class ProtocolError(ValueError):
    """A line that is not a message of this protocol; the text says why, in one line."""


@dataclass(frozen=True)
class Hello:
    TYPE: ClassVar[str] = "hello"
    pid: int
    command: list[str]


@dataclass(frozen=True)
class LiveSnapshot:
    """:meth:`profilers.Profile.live_snapshot`: totals and the busiest lines so far."""

    TYPE: ClassVar[str] = "snapshot"
    elapsed_s: float
    totals: dict[str, object]
    """``gpuwatch.profile/1`` totals."""
    devices: list[dict[str, object]]
    lines: list[dict[str, object]]
    """The busiest lines, as in the report JSON's ``sites``."""
    line_count: int
    events_recorded: int
    counting: str
    """``"every_op"`` or ``"copies"`` (the fast path of --no-kernel-timing: no op counts)."""
    time: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The last closed step's ``{"step", "verdict", "shares_pct", "wall_unprofiled_ms",
    "start_ms", "end_ms"}`` (profilers/timing/), empty before the first step or where not
    measured."""
    memory: dict[str, object] = dataclasses.field(default_factory=dict)
    """GPU memory now (profilers/memory/section.py ``live_memory``): ``{"tracked", "source",
    "devices": [{"device", "live_bytes", "peak_bytes", "capacity_bytes"}], "lines": [{"file",
    "line", "function", "source", "live_bytes", "max_bytes"}], "line_count", "failure"}``, the
    lines holding the most now only; empty when not tracked and nothing failed."""


@dataclass(frozen=True)
class Done:
    TYPE: ClassVar[str] = "done"
    exit_code: int
    finished: bool
    error: str | None
    report: dict[str, object]
    """The ``gpuwatch.profile/1`` document."""


@dataclass(frozen=True)
class Fatal:
    TYPE: ClassVar[str] = "fatal"
    error: str


Message = Hello | LiveSnapshot | Done | Fatal
KINDS: dict[str, type[Message]] = {k.TYPE: k for k in (Hello, LiveSnapshot, Done, Fatal)}
#: What each field's JSON value must be (bool is not an int here: exit codes are numbers).
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
    "str | None": (str, type(None)),
    "list[str]": (list,),
    "list[dict[str, object]]": (list,),
    "dict[str, object]": (dict,),
    "dict[str, Any]": (dict,),
}


def encode(msg: Message) -> str:
    doc = {"v": VERSION, "type": msg.TYPE, **dataclasses.asdict(msg)}
    return json.dumps(doc, separators=(",", ":")) + "\n"


def decode(line: str) -> Message:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(doc, dict):
        raise ProtocolError("not a JSON object")
    if doc.get("v") != VERSION:
        raise ProtocolError(f"protocol version {doc.get('v')!r}, expected {VERSION}")
    kind = KINDS.get(doc.get("type"))  # type: ignore[arg-type]
    if kind is None:
        raise ProtocolError(f"unknown message type {doc.get('type')!r}")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(kind):
        if f.name not in doc:
            raise ProtocolError(f"{kind.TYPE} message without {f.name!r}")
        value = doc[f.name]
        allowed = _JSON_TYPES[str(f.type)]
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise ProtocolError(f"{kind.TYPE} message: {f.name} is {type(value).__name__}")
        values[f.name] = value
    return kind(**values)


def report_from_snapshot(
    snapshot: LiveSnapshot | None, command: Sequence[str], exit_code: int, error: str
) -> Report:
    """The partial report of a child that died before sending its own (SIGKILL, the OOM
    killer): the last ``snapshot`` message that arrived, its top lines only."""
    snap = (
        dataclasses.asdict(snapshot)
        if snapshot is not None
        else {
            "elapsed_s": 0.0,
            "devices": [],
            "lines": [],
            "counting": "every_op",
            "totals": Totals().counters_dict(),
        }
    )
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
            "sites": snap["lines"],
            "options": {
                "source": "last live snapshot (top lines only)",
                "counting": snap["counting"],
            },
            **_memory_of(snapshot.memory if snapshot is not None else {}),
        }
    )


def _memory_of(live: Mapping[str, object]) -> dict[str, object]:
    """The partial report's ``memory`` from a snapshot's: each GPU's bytes then and its peak,
    and the failure explained. NB: no lines: a snapshot says what each line held then, not at
    the peak, and the report's lines say both."""
    if not live:
        return {}
    devices = live.get("devices")
    return {
        "memory": {
            "tracked": bool(live.get("tracked")),
            "source": live.get("source", "measured"),
            "devices": [
                {k: d.get(k) for k in ("device", "live_bytes", "peak_bytes", "capacity_bytes")}
                for d in (devices if isinstance(devices, list) else [])
                if isinstance(d, dict)
            ],
            "peak": None,
            "lines": [],
            "failure": live.get("failure"),
        }
    }
