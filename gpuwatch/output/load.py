"""Reading a saved report: any file at all gets either a :class:`Report` or one line saying what
is wrong with it (a :class:`CliError`, exit 2), never a traceback.

The whole document is checked against the published JSON Schema
(``gpuwatch/schemas/profile-1.schema.json``) before a field is read, so renderers only ever see
well-typed data.
"""

from __future__ import annotations

import json
import math
import os
import select
import stat
import time
from functools import cache
from importlib import resources

from gpuwatch.analysis.diff_findings import DIFF_SCHEMA, DiffDoc
from gpuwatch.analysis.findings import Findings
from gpuwatch.errors import CliError
from profilers.finite import mapping, restore_not_finite
from profilers.report import SCHEMA, Report, ReportFormatError

#: A report is bounded by design (capped timeline and samples); anything far larger is not one.
MAX_REPORT_BYTES = 512 * 1024 * 1024

#: How long a FIFO or pipe may take to deliver a whole report.
FIFO_WAIT_S = 10.0

SCHEMA_FILES = {
    SCHEMA: "profile-1.schema.json",
    "gpuwatch.snapshot/1": "snapshot-1.schema.json",
    DIFF_SCHEMA: "diff-1.schema.json",
    "gpuwatch.kineto/1": "kineto-1.schema.json",
}


@cache
def schema(name: str) -> dict[str, object]:
    """The published JSON Schema of ``name`` (``"gpuwatch.profile/1"`` or ``"gpuwatch.snapshot/1"``)."""
    text = resources.files("gpuwatch.schemas").joinpath(SCHEMA_FILES[name]).read_text("utf-8")
    loaded: dict[str, object] = json.loads(text)
    return loaded


#: How the published schemas mark a figure that may be written null for not being finite.
NOT_FINITE_MARK = (
    "null: a figure that was not finite (NaN, infinite) when written, listed in not_finite"
)


def _strict(node: object) -> object:
    """The schema with every figure a number again (once ``not_finite`` has put NaN back)."""
    if isinstance(node, dict):
        if node.get("$comment") == NOT_FINITE_MARK and node.get("type") == ["number", "null"]:
            node = {**node, "type": "number"}
        return {k: _strict(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@cache
def strict_schema(name: str) -> dict[str, object]:
    """``name``'s schema as a reader checks a document after :func:`restore_not_finite`: a null
    figure that ``not_finite`` does not list is an error there, not a number."""
    return dict(mapping(_strict(schema(name))))


def problem(doc: object, name: str = SCHEMA, strict: bool = False) -> str | None:
    """What makes ``doc`` not a valid ``name`` document, in one line; None if it is valid."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(strict_schema(name) if strict else schema(name))
    error = min(validator.iter_errors(doc), key=lambda e: len(e.absolute_path), default=None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the top level"
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return f"at {where}: {message}"


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text}")
    return value


def _int(text: str) -> int:
    value = int(text)
    if abs(value) > 2**1023:  # NB: beyond a float's range, no figure prints or compares
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _checked(text: str, path: str, diff: bool = False) -> dict[str, object]:
    """The report (or, with ``diff``, the report or the diff) in the text of ``path`` (the name is
    only for messages), checked against its schema, its figures that were not finite put back."""
    what = "gpuwatch profile"
    try:
        doc = json.loads(text, parse_float=_finite, parse_int=_int, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"not a {what}: {path} is not valid JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise CliError(f"not a {what}: {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise CliError(f"not a {what}: {path} holds JSON, but not an object")
    if "schema" not in doc:  # a trace that lost its events lands here too (no traceEvents)
        raise CliError(
            f"{path} is neither a gpuwatch profile nor a torch.profiler trace: a JSON object "
            "with no 'schema' and no 'traceEvents'"
        )
    name = doc.get("schema")
    if name == DIFF_SCHEMA:
        if not diff:
            raise CliError(f"{path} is a saved diff: it is shown alone (gpuwatch report {path})")
        what = "gpuwatch diff"
    elif name != SCHEMA:
        raise CliError(f"not a {what}: schema is {str(name)[:80]!r}, expected {SCHEMA!r} ({path})")
    wrong = restore_not_finite(doc, limit=len(text)) or problem(doc, str(name), strict=True)
    if wrong is not None:
        raise CliError(f"damaged {what} {path}: {wrong}")
    return doc


def parse(text: str, path: str, diff: bool = False) -> tuple[Report, Findings | None] | DiffDoc:
    """A report from the text of ``path`` (the name is only for messages), and the findings
    its writer kept (None in a checkpoint, or a report from before they were written); with
    ``diff``, a saved diff's findings where the text is one."""
    doc = _checked(text, path, diff)
    if doc["schema"] == DIFF_SCHEMA:
        try:
            return DiffDoc.from_dict(doc)
        except (KeyError, TypeError, ValueError) as exc:  # what the schema lets through
            raise CliError(f"damaged gpuwatch diff {path}: {type(exc).__name__}: {exc}") from None
    try:
        found = doc.get("findings")
        return Report.from_dict(doc), None if found is None else Findings.from_dict(mapping(found))
    except ReportFormatError as exc:
        raise CliError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:  # what the schema lets through
        raise CliError(f"{path}: damaged findings: {type(exc).__name__}: {exc}") from None


def _read(path: str) -> bytes:
    """At most MAX_REPORT_BYTES + 1 of ``path``, never blocking on what is not a regular file.

    NB: opening a FIFO that no one writes blocks forever, and a device (``/dev/zero``) never
    ends: a FIFO or pipe (``<(cat r.json)``) is opened non-blocking and read while its writer
    writes, for at most FIFO_WAIT_S; anything else that is not a regular file is refused.
    """
    info = os.stat(path)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(path)
    if stat.S_ISREG(info.st_mode):
        with open(path, "rb") as f:  # NB: f.read(n) allocates n bytes first: only when needed
            return f.read(MAX_REPORT_BYTES + 1 if info.st_size > MAX_REPORT_BYTES else -1)
    if not stat.S_ISFIFO(info.st_mode):
        raise CliError(f"{path} is not a regular file (a device or socket), not a report")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + FIFO_WAIT_S
        while size <= MAX_REPORT_BYTES:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:  # a writer, nothing yet: wait for it, within the deadline
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise CliError(
                        f"{path} is a pipe that sent no whole report within {FIFO_WAIT_S:g} s"
                    ) from None
                continue
            if not chunk:  # end of file: the writer closed it, or there never was one
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if not chunks:
        raise CliError(f"{path} is a pipe with nothing written to it (no writer?), not a report")
    return b"".join(chunks)


def load_report(path: str) -> Report:
    """Reads and checks a saved report; one-line :class:`CliError` for anything wrong."""
    loaded = parse(_text(path), path)
    assert not isinstance(loaded, DiffDoc)  # NB: refused in parse, unless asked for
    return loaded[0]


def load_document(path: str) -> tuple[Report, Findings | None] | DiffDoc:
    """A saved report and the findings it keeps, or a saved diff's findings (``gpuwatch diff
    --json``), read once (a pipe can be)."""
    return parse(_text(path), path, diff=True)


def _text(path: str) -> str:
    """The text of ``path``; one-line :class:`CliError` for what cannot be read."""
    try:
        data = _read(path)
    except FileNotFoundError:
        raise CliError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise CliError(f"{path} is a directory, not a report") from None
    except PermissionError:
        raise CliError(f"cannot read {path}: permission denied") from None
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_REPORT_BYTES:
        raise CliError(f"not a gpuwatch profile: {path} is larger than any report (over 512 MiB)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CliError(f"not a gpuwatch profile: {path} is not text (not UTF-8)") from None
