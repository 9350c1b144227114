"""How one option of a frozen options type is spelled and read on a command line: a
:class:`Flag` in each field's metadata (:func:`flag_field`), and the argparse arguments built
from them (:func:`declare`). gpuwatch/profile/options.py declares the profile's options so."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuwatch.argvalues import add_old_spelling

Store = Literal["value", "true", "false", "append"]


@dataclass(frozen=True, slots=True)
class Flag:
    """How one option is spelled and read on a command line."""

    names: tuple[str, ...]
    """Its spellings; the last is the one :meth:`ProfileOptions.to_argv` writes."""
    help: str
    store: Store = "value"
    """``value`` takes a value, ``true``/``false`` is a flag setting the field so, ``append``
    is repeatable (the field a tuple)."""
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    old: tuple[str, ...] = ()
    """Former spellings: hidden, still working, with a one-line note (argvalues.py)."""
    magic: bool = False
    """Also an option of the notebook magic (``%%gpuwatch``)."""
    show: Callable[[Any], str] = str
    """The value as the command line writes it."""


def flag_field(default: Any, flag: Flag) -> Any:
    """A dataclass field declared on the command line as ``flag``."""
    return field(default=default, metadata={"flag": flag})


def declare(parser: argparse.ArgumentParser, cls: Any, magic: bool = False) -> None:
    """Declares every field of the dataclass ``cls`` on ``parser`` (``magic``: only those the
    notebook magic takes), each under its field's name."""
    for f in dataclasses.fields(cls):
        flag: Flag = f.metadata["flag"]
        if magic and not flag.magic:
            continue
        kwargs: dict[str, Any] = {"dest": f.name, "help": flag.help}
        if flag.store == "true":
            kwargs.update(action="store_true")
        elif flag.store == "false":
            kwargs.update(action="store_false")
        else:
            kwargs.update(type=flag.parse, metavar=flag.metavar)
            if flag.store == "append":
                kwargs.update(action="append", default=[])
            else:
                kwargs.update(default=f.default)
        parser.add_argument(*flag.names, **kwargs)
        for old in flag.old:
            add_old_spelling(
                parser, old, flag.names[-1], f.name, flag.store, flag.parse, flag.metavar
            )


def jsonable(value: Any) -> Any:
    """``value`` as JSON holds it (tuples become lists); :func:`frozen` undoes it."""
    if isinstance(value, tuple):
        return [jsonable(v) for v in value]
    return value


def frozen(value: Any) -> Any:
    """``value`` with its lists made tuples again, so that options hash and compare."""
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    return value
