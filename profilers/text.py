"""Strings from the user's world (file names, arguments) made safe for UTF-8 reports."""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` safe to encode as UTF-8: bytes of a non-UTF-8 file name or argument (which
    Python keeps as lone surrogates) become ``\\xff`` escapes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")  # the bytes the OS gave Python
        except UnicodeEncodeError:
            raw = text.encode("utf-8", "backslashreplace")  # a surrogate of other origin
        return raw.decode("utf-8", "backslashreplace")
    return text
