"""What the command line's option values may be: argparse types that refuse a bad value with one
line, shared by every subcommand (and the notebook magic)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

#: The longest sampling interval accepted: an hour (inf or nan is a typo, not a wish).
MAX_INTERVAL_S = 3600.0


def interval(text: str) -> float:
    """Seconds between samples: 0.1 to an hour."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.1 <= value <= MAX_INTERVAL_S:  # NB: also false for nan
        raise argparse.ArgumentTypeError(
            f"must be between 0.1 and {MAX_INTERVAL_S:.0f} seconds, not {text}"
        )
    return value


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low:,} to {high:,}, not {value:,}")
        return value

    return parse


def step_window(text: str) -> tuple[int, int | None]:
    """``A:B`` (steps A to B-1) or ``A:`` (A to the end)."""
    a, sep, b = text.partition(":")
    try:
        start, stop = int(a), (int(b) if b else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not A:B or A: (step numbers): {text!r}") from None
    if not sep or start < 0 or (stop is not None and stop <= start):
        raise argparse.ArgumentTypeError(f"give A:B with 0 <= A < B, or A: ({text!r})")
    return start, stop


def checkpoint_seconds(text: str) -> float:
    """0 (off) or 1 to 86400 seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value == 0 or 1 <= value <= 86_400):
        raise argparse.ArgumentTypeError(f"must be 0 (off) or 1 to 86400 seconds, not {text}")
    return value


def note(text: str) -> None:
    """One line on stderr that is neither an error nor the run's output."""
    print(f"gpuwatch: note: {text}", file=sys.stderr)


class OldSpelling(argparse.Action):
    """An option's former spelling: hidden from ``--help``, still working, and (``said``)
    saying on each use (on stderr, one line) what to write instead. ``store``: as
    :class:`gpuwatch.flags.Flag`'s."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        new: str = "",
        store: str = "value",
        said: bool = True,
        **kwargs: Any,
    ) -> None:
        if store in ("true", "false"):
            kwargs["nargs"] = 0
        super().__init__(option_strings, dest, **kwargs)
        self.new = new
        self.store = store
        self.said = said

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        if self.said:
            note(f"{option_string} is now {self.new} (the old spelling still works)")
        if self.store in ("true", "false"):
            setattr(namespace, self.dest, self.store == "true")
        elif self.store == "append":
            # NB: a new list, never the default's: the default is shared by every parse.
            setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), values])
        else:
            setattr(namespace, self.dest, values)


def add_old_spelling(
    parser: argparse.ArgumentParser,
    old: str,
    new: str,
    dest: str,
    store: str = "value",
    type: Callable[[str], object] | None = None,  # noqa: A002 (argparse's own keyword)
    metavar: str | None = None,
    said: bool = True,
) -> None:
    """Registers ``old`` as a hidden, still-working spelling of the option now called ``new``;
    ``said``: with the one-line note (where scripts may use it; not for a demo's options)."""
    kwargs: dict[str, Any] = dict(
        dest=dest, help=argparse.SUPPRESS, new=new, store=store, said=said
    )
    if store not in ("true", "false"):
        kwargs.update(type=type, metavar=metavar)
    parser.add_argument(old, action=OldSpelling, **kwargs)
