"""JSON has no NaN or Infinity: every figure gpuwatch writes that is not finite is written
``null``, and the document says where (``not_finite``: JSON Pointers, RFC 6901), so that a
reader tells a figure that was not finite from a field that is null because nothing was
reported, and gpuwatch reads back every document it writes.

Python's ``json.dumps`` writes ``Infinity`` and ``NaN`` by default, which no strict JSON parser
(``jq``, browsers' ``JSON.parse``, Go, gpuwatch's own reader) accepts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

#: The document's list of the figures written null because they were not finite.
NOT_FINITE = "not_finite"


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def number(v: object) -> int | float | str:
    """A JSON value as ``int()`` and ``float()`` take it (TypeError for any other)."""
    if isinstance(v, int | float | str):
        return v
    raise TypeError(f"a number expected, not {type(v).__name__}")


def mapping(v: object) -> Mapping[str, object]:
    """A JSON object (TypeError for any other value)."""
    if isinstance(v, Mapping):
        return v
    raise TypeError(f"an object expected, not {type(v).__name__}")


def iterable(v: object) -> Iterable[object]:
    """A JSON array (or any value ``for`` takes; TypeError for any other)."""
    if isinstance(v, Iterable):
        return v
    raise TypeError(f"{type(v).__name__!r} object is not iterable")


def finite_or_null(value: object, where: list[str], path: str = "") -> object:
    """``value`` with each float that is not finite as None, its JSON Pointer added to ``where``."""
    if isinstance(value, float) and not math.isfinite(value):
        where.append(path)
        return None
    if isinstance(value, dict):
        return {k: finite_or_null(v, where, f"{path}/{_escape(str(k))}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(v, where, f"{path}/{i}") for i, v in enumerate(value)]
    return value


def dumps_finite(doc: Mapping[str, object], indent: int | None = None) -> str:
    """``json.dumps(doc)`` that writes a figure that is not finite as null and lists it in
    ``doc["not_finite"]`` (absent when every figure is finite)."""
    where: list[str] = []
    clean = {
        k: finite_or_null(v, where, f"/{_escape(k)}") for k, v in doc.items() if k != NOT_FINITE
    }
    if where:
        clean[NOT_FINITE] = where
    return json.dumps(clean, allow_nan=False, indent=indent)


def restore_not_finite(doc: object, limit: int) -> str | None:
    """Puts NaN back (in place) at each null that ``doc["not_finite"]`` lists; what is wrong with
    the list in one line, or None. It may list ``limit`` entries at most (one per value)."""
    if not isinstance(doc, dict) or NOT_FINITE not in doc:
        return None
    listed = doc.pop(NOT_FINITE)
    if not isinstance(listed, list) or len(listed) > limit:
        return f"{NOT_FINITE} is not a list of at most {limit:,} JSON Pointers"
    for pointer in listed:
        if not isinstance(pointer, str) or not pointer.startswith("/"):
            return f"{NOT_FINITE} holds {str(pointer)[:80]!r}, not a JSON Pointer"
        *parents, last = [_unescape(t) for t in pointer[1:].split("/")]
        node: Any = doc
        try:
            for token in parents:
                node = node[int(token)] if isinstance(node, list) else node[token]
            key: Any = int(last) if isinstance(node, list) else last
            if node[key] is not None:
                return f"{NOT_FINITE} lists {pointer[:80]}, which is not null"
            node[key] = math.nan
        except (KeyError, IndexError, ValueError, TypeError):
            return f"{NOT_FINITE} lists {pointer[:80]}, which the document does not hold"
    return None
