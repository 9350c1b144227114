"""What the fake GPU is told on the command line: ``--fake-memory 24GiB`` (memory sizes as
people write them) and ``--fake-values``."""

from __future__ import annotations

import argparse
import re

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kib": 1024,
    "kb": 1000,
    "m": 1024**2,
    "mib": 1024**2,
    "mb": 1000**2,
    "g": 1024**3,
    "gib": 1024**3,
    "gb": 1000**3,
    "t": 1024**4,
    "tib": 1024**4,
    "tb": 1000**4,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


def memory_size(text: str) -> int:
    """Bytes in ``text``: ``24GiB``, ``24G`` and ``24gib`` are binary, ``24GB`` decimal (as
    drives are sold), a bare number is bytes. At least 1 MiB, at most 1 PiB."""
    m = _SIZE.fullmatch(text)
    unit = _UNITS.get(m.group(2).lower()) if m else None
    if m is None or unit is None:
        raise argparse.ArgumentTypeError(
            f"not a memory size: {text!r} (write e.g. 24GiB, 512MiB or 80GB)"
        )
    nbytes = int(float(m.group(1)) * unit)
    if not 1024**2 <= nbytes <= 1024**5:
        raise argparse.ArgumentTypeError(f"{text!r}: a GPU's memory is 1MiB to 1PiB")
    return nbytes


def fake_values(text: str) -> str:
    """``real`` or ``placeholder``: what the fake GPU's tensors hold."""
    if text not in ("real", "placeholder"):
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose real or placeholder)")
    return text
