"""Reading a saved report: any file at all gets either a :class:`Report` or one line saying what
is wrong with it (a :class:`CliError`, exit 2), never a traceback.

The whole document is checked against the published JSON Schema
(``gpuwatch/schemas/profile-1.schema.json``) before a field is read, so renderers only ever see
well-typed data.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from typing import Any

from gpuwatch.cli_errors import CliError
from profilers.report import SCHEMA, Report, ReportFormatError

#: A report is bounded by design (capped timeline and samples); anything far larger is not one.
MAX_REPORT_BYTES = 512 * 1024 * 1024

SCHEMA_FILES = {SCHEMA: "profile-1.schema.json", "gpuwatch.snapshot/1": "snapshot-1.schema.json"}


@cache
def schema(name: str) -> dict[str, Any]:
    """The published JSON Schema of ``name`` (``"gpuwatch.profile/1"`` or ``"gpuwatch.snapshot/1"``)."""
    text = resources.files("gpuwatch.schemas").joinpath(SCHEMA_FILES[name]).read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def problem(doc: Any, name: str = SCHEMA) -> str | None:
    """What makes ``doc`` not a valid ``name`` document, in one line; None if it is valid."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(schema(name))
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


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse(text: str, path: str) -> Report:
    """A report from the text of ``path`` (the name is only for messages)."""
    try:
        doc = json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"not a gpuwatch profile: {path} is not valid JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise CliError(f"not a gpuwatch profile: {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise CliError(f"not a gpuwatch profile: {path} holds JSON, but not an object")
    if doc.get("schema") != SCHEMA:
        raise CliError(
            f"not a gpuwatch profile: schema is {str(doc.get('schema'))[:80]!r}, expected "
            f"{SCHEMA!r} ({path})"
        )
    wrong = problem(doc)
    if wrong is not None:
        raise CliError(f"damaged gpuwatch profile {path}: {wrong}")
    try:
        return Report.from_dict(doc)
    except ReportFormatError as exc:
        raise CliError(f"{path}: {exc}") from None


def load_report(path: str) -> Report:
    """Reads and checks a saved report; one-line :class:`CliError` for anything wrong."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_REPORT_BYTES + 1)
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
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CliError(f"not a gpuwatch profile: {path} is not text (not UTF-8)") from None
    return parse(text, path)
