"""Strings from the user's world made safe for UTF-8 reports, and reports written whole."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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


def write_text_atomic(path: str | Path, text: str) -> None:
    """Writes ``text`` (UTF-8) to ``path`` whole or not at all: a temporary file in the same
    folder, flushed to disk, then renamed over ``path``. A failure leaves ``path`` as it was.
    The file keeps the mode a plain ``open()`` would leave it with: an existing file's own,
    else 0666 less the umask."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    data = text.encode("utf-8", "backslashreplace")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            mode = os.stat(target).st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass  # already renamed or never made: nothing left behind
        raise


def _umask() -> int:
    # NB: os.umask() can only be read by setting it, which races with other threads creating
    # files; Linux shows it in /proc.
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass  # not Linux: fall back to the racy read
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
