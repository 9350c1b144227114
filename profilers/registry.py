"""Everything the profiler, ``--fake-cuda`` and the budget guards change outside themselves, on
one stack: what is on now (:func:`installed`), each entry documented (profilers/patch_list.py).
:func:`patch`, :func:`hide` and :func:`switch` each push one record, popped by its own undo when
the caller's ``ExitStack`` closes.

NB: undoing out of order stays exact: when two of ours patch the same attribute and the lower one
leaves first (a budget guard inside a profile, say), the upper one now puts back what the lower
one replaced, so the attribute ends as it began. Nothing here imports torch: ``gpuwatch top``
starts its threads as :class:`OwnThread` too.
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from profilers.counting.recorder import Recorder

ACTIVE: Recorder | None = None
"""The recorder of the profile running in this process (at most one): set by the session,
read by the patches and by timing's input iterator (which may not import the counting core)."""

ABSENT: object = object()
"""What an attribute that an owner did not have of its own "was" before a patch."""

GLOBALS: tuple[tuple[str, str, object], ...] = (
    ("profilers.registry", "ACTIVE", None),
    ("profilers.fake_cuda.harness", "HARNESS", None),
    ("profilers.fake_cuda.graphs", "GRAPHS", None),
    ("profilers.fake_cuda.build", "_HOOKS_DEPTH", 0),
    ("profilers.timing.fake_time", "ACTIVE", None),
)
"""(module, name, value when off) of the globals that say something of ours is on: the running
profile's recorder, the fake GPU's harness and CUDA graphs, ATen's CUDA hooks lent to it, the
log the fake GPU hands its time to (``--gpu``)."""


@dataclass(frozen=True)
class Entry:
    """Changes that ``by`` (``profiler``, ``fake_cuda``, ``guard``) makes, for one reason."""

    by: str
    owner: str
    """The module or class changed (dotted), ``""`` for a :func:`registry.switch`."""
    names: tuple[str, ...]
    changes: str
    why: str
    lost: str
    """What a run would miss without it."""

    def targets(self) -> list[str]:
        return [f"{self.owner}.{n}" if self.owner else n for n in self.names]


@dataclass(slots=True, eq=False)
class Record:
    """One change of ours that is on: ``by`` (profiler, fake_cuda, guard) changed ``target``."""

    by: str
    owner: object
    name: str
    value: object
    original: object
    undo: Callable[[], None] | None = None
    """Set for a :func:`switch` (its own undo); None for an attribute."""

    @property
    def target(self) -> str:
        """``"torch.cuda.synchronize"``, ``"torch._tensor_str._str"``: what was changed."""
        if self.undo is not None:
            return self.name
        return f"{label(self.owner)}.{self.name}"

    def __repr__(self) -> str:
        return f"{self.by}: {self.target}"


_ON: list[Record] = []
_LOCK = threading.RLock()


def label(owner: object) -> str:
    """A module's or a class's dotted name (``torch.cuda.streams.Stream``)."""
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    name = getattr(owner, "__name__", None)
    return name if isinstance(name, str) else f"{label(type(owner))}()"


def _own(owner: object, name: str) -> object:
    """``owner``'s own value of ``name`` (not one it inherits), or ABSENT."""
    try:
        return vars(owner).get(name, ABSENT)
    except TypeError:  # no __dict__ (a C object): what it answers
        return getattr(owner, name, ABSENT)


def _put(owner: object, name: str, value: object) -> None:
    if value is ABSENT:
        if _own(owner, name) is not ABSENT:
            delattr(owner, name)
    else:
        setattr(owner, name, value)


def patch(by: str, stack: ExitStack, owner: object, name: str, value: object) -> None:
    """``owner.name = value`` until ``stack`` closes; then what it was (deleted again when
    ``owner`` had no value of its own, so an inherited one shows through as before)."""
    _disguise(value, getattr(owner, name, None))
    with _LOCK:
        record = Record(by, owner, name, value, _own(owner, name))
        setattr(owner, name, value)
        _ON.append(record)
    stack.callback(_undo, record)


def _disguise(value: object, original: object) -> None:
    """A function of ours put in place of torch's takes its names, doc and ``__wrapped__``, so
    that pickling by name, ``inspect.signature`` and ``functools.wraps`` users see torch's.
    NB: identity cannot be kept, so no patch replaces a public function that TorchScript maps
    by identity (``torch.tensor``, ``torch.autograd.grad``: profilers/patch_list.py)."""
    if (
        isinstance(value, types.FunctionType)
        and value.__module__.partition(".")[0] in ("profilers", "gpuwatch")
        and callable(original)
        and not isinstance(original, type)
    ):
        functools.update_wrapper(value, original, updated=())


def hide(by: str, stack: ExitStack, owner: object, name: str) -> None:
    """``del owner.name`` until ``stack`` closes."""
    with _LOCK:
        record = Record(by, owner, name, ABSENT, _own(owner, name))
        _put(owner, name, ABSENT)
        _ON.append(record)
    stack.callback(_undo, record)


def switch(by: str, stack: ExitStack, what: str, undo: Callable[[], None]) -> None:
    """Something already switched on that is not an attribute (a torch flag, a hook handle),
    named ``what`` in :func:`installed`: ``undo`` runs when ``stack`` closes."""
    with _LOCK:
        record = Record(by, None, what, None, None, undo)
        _ON.append(record)
    stack.callback(_undo, record)


def _undo(record: Record) -> None:
    with _LOCK:
        i = next(i for i, r in enumerate(_ON) if r is record)
        del _ON[i]
        if record.undo is not None:
            record.undo()
            return
        above = [r for r in _ON[i:] if r.owner is record.owner and r.name == record.name]
        if above:
            # NB: one of ours patched over this one and is still on: it is the one to put back
            # what this one replaced, when it leaves.
            above[0].original = record.original
        elif _own(record.owner, record.name) is record.value:
            _put(record.owner, record.name, record.original)
        # else: someone else's patch over ours: theirs stays (the original returns with it)


class Setter(Protocol):
    def __call__(self, stack: ExitStack, owner: object, name: str, value: object) -> None: ...


def patcher(by: str) -> Setter:
    """:func:`patch` for one installer: ``set_attr = patcher("fake_cuda")``."""

    def set_attr(stack: ExitStack, owner: object, name: str, value: object) -> None:
        patch(by, stack, owner, name, value)

    return set_attr


def installed() -> list[str]:
    """What of ours is on now, oldest first: ``"profiler: torch.cuda.synchronize"``, one line
    per change, then each declared global that is set (``"global: profilers.registry.ACTIVE"``)."""
    with _LOCK:
        out = [repr(r) for r in _ON]
    for module_name, name, off in GLOBALS:
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, name, off) != off:
            out.append(f"global: {module_name}.{name}")
    return out


def records() -> list[Record]:
    """The records of what is on now, oldest first (a copy)."""
    with _LOCK:
        return list(_ON)


# -- our own threads -------------------------------------------------------------------------------

OWN_THREAD_FLAG = "gpuwatch_own_thread"
"""The class attribute that makes a thread one of ours. A flag, not this module's class alone:
``gpuwatch top`` and ``gpuwatch export`` declare their threads with it (gpuwatch/monitor/threads.py)
without importing the profiler, and the profiler still knows them as ours."""


class OwnThread(threading.Thread):
    """A thread of gpuwatch's own (sampling, the live view's pipes, checkpoints): a profile does
    not count its ops, and a run does not wait for it as it waits for the script's threads."""

    gpuwatch_own_thread = True


def is_own(thread: threading.Thread) -> bool:
    """Whether ``thread`` is one of ours (its class declares :data:`OWN_THREAD_FLAG`)."""
    return getattr(type(thread), OWN_THREAD_FLAG, False) is True


def own_threads_alive() -> list[threading.Thread]:
    """Our threads still running."""
    return [t for t in threading.enumerate() if is_own(t)]
