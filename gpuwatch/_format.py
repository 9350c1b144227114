"""Small formatters shared by the text, TUI and HTML renderers. ``None`` always shows as N/A; a
figure that is not finite as "not finite". Amounts of data are in binary IEC units everywhere,
as nvidia-smi's MiB and PyTorch's memory figures are (``2.3 GiB/s``, never decimal ``GB/s``).
"""

from __future__ import annotations

import math

NA = "N/A"
NOT_FINITE = "not finite"


def _odd(value: float | None) -> str | None:
    """What a figure shows as when it is no number to format (None, NaN, infinite), else None."""
    if value is None:
        return NA
    return None if math.isfinite(value) else NOT_FINITE


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _scaled(value: float) -> tuple[float, str]:
    """``value`` bytes in the largest binary unit under 1024 of it."""
    for unit in _UNITS[:-1]:
        if abs(value) < 1024:
            return value, unit
        value /= 1024
    return value, _UNITS[-1]


def size(n_bytes: float | None, precision: int = 1) -> str:
    """``1536`` -> ``'1.5 KiB'``; binary units, like nvidia-smi's MiB."""
    if (odd := _odd(n_bytes)) is not None:
        return odd
    assert n_bytes is not None
    value, unit = _scaled(float(n_bytes))
    return f"{int(value)} B" if unit == "B" else f"{value:.{precision}f} {unit}"


def rate(bytes_per_s: float | None) -> str:
    odd = _odd(bytes_per_s)
    return odd if odd is not None else f"{size(bytes_per_s)}/s"


def rate_short(bytes_per_s: float | None) -> str:
    """``'660MiB/s'``, ``'1.5GiB/s'``: :func:`rate` without the space, for narrow places."""
    if (odd := _odd(bytes_per_s)) is not None:
        return odd
    assert bytes_per_s is not None
    value, unit = _scaled(float(bytes_per_s))
    text = f"{value:.1f}" if value < 10 and unit != "B" else f"{value:.0f}"
    return f"{text}{unit}/s"


def pct(value: float | None) -> str:
    odd = _odd(value)
    return odd if odd is not None else f"{value:.0f}%"


def num(value: float | None, unit: str = "", precision: int = 0) -> str:
    if (odd := _odd(value)) is not None:
        return odd
    return f"{value:.{precision}f}{unit}"


def throughput(n_bytes: int, seconds: float | None) -> str:
    """Effective throughput of ``n_bytes`` moved in ``seconds``: ``'11.2 GiB/s'``."""
    if (odd := _odd(seconds)) is not None:
        return odd
    if not seconds or seconds <= 0:
        return NA
    return rate(n_bytes / seconds)


def duration_ms(ms: float | None) -> str:
    if (odd := _odd(ms)) is not None:
        return odd
    assert ms is not None
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    if ms >= 1:
        return f"{ms:.1f} ms"
    return f"{ms * 1000:.0f} µs"


def local_time(iso: str | None) -> str:
    """``2026-11-23T19:20:09.223341+00:00`` as the reader's local time, to the second, with its
    zone: ``2026-11-23 19:20:09 UTC``; the text as it is when it is not a time."""
    if not iso:
        return "?"
    import datetime as _dt

    try:
        when = _dt.datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if when.tzinfo is None:
        return when.strftime("%Y-%m-%d %H:%M:%S")
    local = when.astimezone()
    zone = local.tzname() or local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M:%S} {zone}"


def energy(joules: float | None) -> str:
    """``850 J``, ``12.3 kJ``, ``4.56 MJ``; N/A for None."""
    if (odd := _odd(joules)) is not None:
        return odd
    assert joules is not None
    for unit, scale in (("MJ", 1e6), ("kJ", 1e3)):
        if joules >= scale:
            return f"{joules / scale:.3g} {unit}"
    return f"{joules:.0f} J"


def span(seconds: float | None) -> str:
    """``45s``, ``12m``, ``3h05m``, ``2d04h``: how long, in the two largest units."""
    if (odd := _odd(seconds)) is not None:
        return odd
    assert seconds is not None
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
