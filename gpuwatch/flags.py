"""How one option of a frozen options type is spelled and read on a command line (a
:class:`Flag` in each field's metadata), and the output options every report-writing command
shares, declared once (:class:`Outputs`)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from gpuwatch.argvalues import add_old_spelling, bounded_int

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Store = Literal["value", "true", "false", "append"]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Flag:
    """How one option is spelled and read on a command line."""

    names: tuple[str, ...]
    """Its spellings; the last is the one :meth:`ProfileOptions.to_argv` writes."""
    help: str
    store: Store = "value"
    """``value`` takes a value, ``true``/``false`` is a flag setting the field so, ``append``
    is repeatable (the field a tuple)."""
    parse: Callable[[str], object] | None = None
    metavar: str | None = None
    old: tuple[str, ...] = ()
    """Former spellings: hidden, still working, with a one-line note (argvalues.py)."""
    magic: bool = False
    """Also an option of the notebook magic (``%%gpuwatch``)."""
    show: Callable[[Any], str] = str
    """The value as the command line writes it."""


@dataclass(frozen=True)
class Outputs:
    """The output options of one command: where its reports go (``-o`` by the file's ending,
    or ``--json``/``--html``/``--trace``), ``-q`` and ``-n``, worded for what it writes."""

    json_doc: str
    """What its JSON is (``the gpuwatch.profile/1 JSON``)."""
    html_doc: str
    trace_doc: str | None
    """What its Chrome trace holds; None: the command writes none."""
    what: str = "a report"
    """What ``-o`` writes."""
    quiet_help: str = "quiet: no summary, no 'wrote' lines (errors only)"
    top_default: int | None = 5  # None: the command picks it (``report``: by document)
    top_help: str = "lines per top list"
    magic: bool = False
    """Also options of the notebook magic (``%%gpuwatch``)."""

    @property
    def endings(self) -> str:
        kinds = [".json", ".html", *([".trace.json"] if self.trace_doc else [])]
        return ", ".join(kinds[:-1]) + " or " + kinds[-1]

    def flags(self) -> dict[str, tuple[object, Flag]]:
        """Each option's field name, default and :class:`Flag`."""
        out: dict[str, tuple[object, Flag]] = {
            "output_paths": (
                (),
                Flag(
                    ("-o", "--output"),
                    f"write {self.what} here, its kind from the ending: {self.endings} (repeatable)",
                    store="append",
                    metavar="PATH",
                    magic=self.magic,
                ),
            ),
            "json_path": (
                None,
                Flag(("--json",), f"write {self.json_doc} here", metavar="PATH", magic=self.magic),
            ),
            "html_path": (
                None,
                Flag(("--html",), f"write {self.html_doc} here", metavar="PATH", magic=self.magic),
            ),
        }
        if self.trace_doc is not None:
            out["trace_path"] = (
                None,
                Flag(("--trace",), f"write {self.trace_doc}", metavar="PATH", magic=self.magic),
            )
        out["quiet"] = (False, Flag(("-q", "--quiet"), self.quiet_help, "true"))
        out["top"] = (
            self.top_default,
            Flag(
                ("-n", "--top"),
                self.top_help
                + ("" if self.top_default is None else f" (default {self.top_default})"),
                parse=bounded_int(1, 1_000_000),
                metavar="N",
                magic=self.magic,
            ),
        )
        return out

    def field(self, name: str) -> Any:
        """The dataclass field of option ``name`` (an options type declaring it as its own)."""
        default, flag = self.flags()[name]
        return flag_field(default, flag)

    def declare(self, parser: argparse.ArgumentParser) -> None:
        """Declares the options on ``parser`` (a command without an options type)."""
        for name, (default, flag) in self.flags().items():
            add_flag(parser, name, default, flag)


PROFILE_OUTPUTS = Outputs(
    json_doc="the gpuwatch.profile/1 JSON",
    html_doc="a self-contained HTML report",
    trace_doc="the copies, syncs and GPU samples as a Chrome trace (Perfetto opens it) here",
    magic=True,
)
"""``gpuwatch profile``'s outputs (and the notebook magic's)."""


def flag_field(default: T, flag: Flag) -> T:
    """A dataclass field declared on the command line as ``flag``."""
    return field(default=default, metadata={"flag": flag})


def declare(
    parser: argparse.ArgumentParser, cls: type[DataclassInstance], magic: bool = False
) -> None:
    """Declares every field of the dataclass ``cls`` on ``parser`` (``magic``: only those the
    notebook magic takes), each under its field's name."""
    for f in dataclasses.fields(cls):
        flag: Flag = f.metadata["flag"]
        if magic and not flag.magic:
            continue
        add_flag(parser, f.name, f.default, flag)


def add_flag(parser: argparse.ArgumentParser, name: str, default: object, flag: Flag) -> None:
    """Declares ``flag`` on ``parser``, its value in ``name``, ``default`` when not given."""
    kwargs: dict[str, Any] = {"dest": name, "help": flag.help}
    if flag.store == "true":
        kwargs.update(action="store_true")
    elif flag.store == "false":
        kwargs.update(action="store_false")
    else:
        kwargs.update(type=flag.parse, metavar=flag.metavar)
        if flag.store == "append":
            kwargs.update(action="append", default=[])
        else:
            kwargs.update(default=default)
    parser.add_argument(*flag.names, **kwargs)
    for old in flag.old:
        add_old_spelling(parser, old, flag.names[-1], name, flag.store, flag.parse, flag.metavar)


def jsonable(value: object) -> object:
    """``value`` as JSON holds it (tuples become lists); :func:`frozen` undoes it."""
    if isinstance(value, tuple):
        return [jsonable(v) for v in value]
    return value


def frozen(value: object) -> Any:
    """``value`` with its lists made tuples again, so that options hash and compare."""
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    return value
