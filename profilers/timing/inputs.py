"""Input waits: the host's time inside an input iterator's ``__next__``, charged to the line
that pulls the batch (the ``for x, y in loader:`` line).

Three ways an iterator becomes input:

* every DataLoader, by itself: ``__next__`` of ``torch.utils.data.dataloader._BaseDataLoaderIter``,
  the base of both of PyTorch's loader iterators (single-process and multi-process), whatever
  the ``num_workers`` (and of loaders built on it: webdataset's ``WebLoader`` is a DataLoader);
* in the script or a notebook: ``profilers.input(it)`` wraps any iterable, iterator or
  generator function (:func:`mark_input`); it costs nothing when no profile runs;
* named before the run (``Options.inputs``, dotted names): a class's ``__next__`` (or, for an
  iterable class, the iterators its ``__iter__`` returns), or a function's (a generator
  function's) results (:func:`resolve_inputs`, :func:`patch_input`).

NB: nothing else is recognised by itself. An iterator of a library is input only when a step
consumes it, and the same classes are iterated for other reasons (a HF ``datasets.Dataset``
mapped over while preprocessing, an eval loop, a tokenizer's batches): charged as input, their
time would turn such code into "input-bound" steps. PyTorch's DataLoader is the exception: it
exists to feed steps. Patching a library on speculation would also import it at every profile's
start (DALI, HF datasets: seconds, and a CUDA context for DALI).

Nesting is free: an iterator timed inside another's ``__next__`` finds the clock off and runs
untimed (one wait, at the outer line). Ops an input iterator runs are counted as ever; their
time is the wait's.
"""

from __future__ import annotations

import functools
import importlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from types import FrameType
from typing import Any

from profilers import registry
from profilers.errors import InputNotFound
from profilers.registry import switch
from profilers.timing import fake_time
from profilers.timing.timeline import INPUT

#: The registry's name for a change made for a named input (``input: mod.Cls.__next__``).
NAMED = "input: "

_ABSENT = object()


def timed_next(
    recorder: Any,
    pull: Callable[[Any], Any],
    it: Any,
    frame: FrameType | None,
    what: str,
    after: Callable[[Any, int], None] | None = None,
) -> Any:
    """``pull(it)`` (the next batch), its host time an input wait charged to ``frame``'s line
    when ``recorder``'s profile is timing this thread; untimed otherwise. ``after(batch, ns)``
    is the profiler's own work on the batch, timed as such; ``ns``: the wait, the profiler's
    and the fake GPU's own time out where the clock runs (else all of it: no step clock)."""
    enter = time.perf_counter_ns()
    st: Any = getattr(recorder.local, "s", None) if recorder is not None else None
    clock = None if st is None or not recorder.active else st.clock
    if clock is None:
        batch = pull(it)
        if after is not None:
            after(batch, time.perf_counter_ns() - enter)
        return batch
    # NB: the clock is off while the iterator works: ops it runs here (collate's stack and
    # the dataset's indexing, on the profile's thread when num_workers=0) are part of the wait,
    # not host work at some library line. The mode steps aside for them where it can
    # (``recorder.input_scope``); where it cannot, its cost on them (st.inside) leaves the wait.
    st.clock, inside, outer = None, Inside(), st.inside
    st.inside = inside
    batch, done = None, False
    fake = getattr(fake_time.ACTIVE, "_fake", None)  # --fake-cuda --gpu: the simulation's time
    sim0 = getattr(fake, "sim", 0)
    scope = ExitStack()  # NB: entered and left outside the wait's span: the profiler's own
    if recorder.input_scope is not None:
        try:
            scope.enter_context(recorder.input_scope())
        except Exception as exc:  # never into user code: the ops then go through the mode
            recorder.internal_error(what, exc)
    start = time.perf_counter_ns()
    try:
        batch = pull(it)  # NB: StopIteration too: finding the end is input time as well
        done = True
        return batch
    finally:
        end = time.perf_counter_ns()
        st.clock, st.inside = clock, outer
        try:
            scope.close()
            if after is not None and done:
                after(batch, end - start - inside.own_ns(clock) - getattr(fake, "sim", 0) + sim0)
            line = recorder.line_for(frame)
            own = inside.own_ns(clock)
            if fake is not None:  # NB: the fake GPU's on the collate's ops: out of the wait
                own += getattr(fake, "sim", 0) - sim0  # (and so not out of the host work after)
                fake.sim = sim0
            clock.wait(line, INPUT, None, enter, start, end, time.perf_counter_ns(), own)
        except Exception as exc:  # never into user code: the batch is returned untimed
            recorder.internal_error(what, exc)


@dataclass(slots=True, eq=False)
class Inside:
    """The profiler's time on the ops an input iterator ran through the mode in one wait (where
    the mode could not step aside): what its hot path measured of itself, and the calibrated
    cost around each op (the dispatcher boxing it into Python)."""

    hot_ns: int = 0
    ops: int = 0

    def add(self, hot_ns: int) -> None:
        self.hot_ns += hot_ns
        self.ops += 1

    def own_ns(self, clock: Any) -> int:
        return self.hot_ns + self.ops * int(clock.outside_ns)


class TimedIterator:
    """An iterator whose every ``next()`` is an input wait at the line that asks for it (the
    rest of the iterator, ``send``, ``close`` and its attributes, as they were)."""

    __slots__ = ("_it",)

    def __init__(self, it: Iterator[Any]) -> None:
        self._it = it

    def __iter__(self) -> TimedIterator:
        return self

    def __next__(self) -> Any:
        return timed_next(registry.ACTIVE, next, self._it, sys._getframe(1), "input iterator")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._it, name)

    def __repr__(self) -> str:
        return f"profilers.input({self._it!r})"


class TimedIterable:
    """An iterable whose iterators are :class:`TimedIterator` s; ``len()`` and attributes (a
    loader's ``dataset``, ``batch_size``) are the wrapped one's."""

    __slots__ = ("_iterable",)

    def __init__(self, iterable: Any) -> None:
        self._iterable = iterable

    def __iter__(self) -> TimedIterator:
        return TimedIterator(iter(self._iterable))

    def __len__(self) -> int:
        return len(self._iterable)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._iterable, name)

    def __repr__(self) -> str:
        return f"profilers.input({self._iterable!r})"


def mark_input(source: Any) -> Any:
    """``profilers.input(source)``: the time spent getting each item of ``source`` is an input
    wait, charged to the line that asks for it, exactly as a DataLoader's batches are.

    ``source``: an iterator (a generator, a DALI or webdataset iterator: the same iterator,
    timed), an iterable (its every iterator timed), or a function, such as a generator
    function (a function whose results are timed: usable as a decorator). Outside a profile the
    wrapper only passes items through."""
    kind = type(source)
    if hasattr(kind, "__next__"):
        return TimedIterator(source)
    if hasattr(kind, "__iter__") or hasattr(kind, "__getitem__"):
        return TimedIterable(source)
    if callable(source):

        @functools.wraps(source)
        def timed_results(*args: Any, **kwargs: Any) -> Any:
            return mark_input(source(*args, **kwargs))

        return timed_results
    raise TypeError(f"profilers.input() takes an iterable, an iterator or a function, not {kind}")


def _resolve(name: str) -> tuple[Any, str, Any]:
    """``(owner, attribute, object)`` of a dotted name (``pkg.mod.Class``, ``pkg.mod:fn``,
    ``pkg.mod.Class.method``): the longest importable module, then attributes."""
    parts = name.replace(":", ".").split(".")
    if not all(p.isidentifier() for p in parts) or len(parts) < 2:
        raise InputNotFound(name, "is not a dotted name (module.Class or module.function)")
    if parts[0] == "__main__":
        raise InputNotFound(
            name,
            "is in the script itself, which has not run yet: mark it there with profilers.input()",
        )
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            owner: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        except Exception as exc:  # importing it ran its code, which failed
            raise InputNotFound(name, f"could not be imported: {exc!r}") from None
        break
    else:
        raise InputNotFound(name, f"names no module that can be imported ({parts[0]!r})")
    for attr in parts[cut:-1]:
        owner = getattr(owner, attr, None)
        if owner is None:
            raise InputNotFound(name, f"has no {attr!r} in {module_name}")
    found = getattr(owner, parts[-1], None)
    if found is None:
        raise InputNotFound(name, f"has no {parts[-1]!r}")
    return owner, parts[-1], found


def resolve_inputs(names: tuple[str, ...]) -> list[tuple[str, Any, str, Any]]:
    """Each dotted name's ``(name, owner, attribute, object)``; raises :class:`InputNotFound`
    (before anything is patched) for one that names nothing a profile can time."""
    out = []
    for name in names:
        owner, attr, found = _resolve(name)
        if not isinstance(found, type) and not callable(found):
            raise InputNotFound(name, f"is a {type(found).__name__}, not a class or a function")
        if isinstance(found, type) and not (
            hasattr(found, "__next__") or hasattr(found, "__iter__")
        ):
            raise InputNotFound(name, "is a class with neither __next__ nor __iter__")
        out.append((name, owner, attr, found))
    return out


def _replace(stack: ExitStack, owner: Any, attr: str, value: Any, label: str) -> None:
    """``owner.attr = value`` until ``stack`` closes, in the registry as ``input: label``."""
    had = vars(owner).get(attr, _ABSENT) if hasattr(owner, "__dict__") else _ABSENT
    try:
        setattr(owner, attr, value)
    except (TypeError, AttributeError) as exc:  # a built-in type: its slots cannot be set
        why = f"cannot be patched ({exc}); wrap it with profilers.input()"
        raise InputNotFound(label, why) from None

    def undo() -> None:
        if vars(owner).get(attr) is not value:
            return  # someone else's patch over ours: theirs stays
        if had is _ABSENT:
            delattr(owner, attr)
        else:
            setattr(owner, attr, had)

    switch("profiler", stack, NAMED + label, undo)


def _patch_named(
    stack: ExitStack, recorder: Any, name: str, owner: Any, attr: str, obj: Any
) -> None:
    if not isinstance(obj, type):
        _replace(stack, owner, attr, mark_input(obj), name)
    elif hasattr(obj, "__next__"):
        pull = obj.__next__

        def __next__(self: Any) -> Any:
            return timed_next(recorder, pull, self, sys._getframe(1), name)

        _replace(stack, obj, "__next__", functools.wraps(pull)(__next__), f"{name}.__next__")
    else:
        make: Callable[[Any], Iterator[Any]] = getattr(obj, "__iter__")  # noqa: B009 (mypy)

        def __iter__(self: Any) -> TimedIterator:
            return TimedIterator(make(self))

        _replace(stack, obj, "__iter__", functools.wraps(make)(__iter__), f"{name}.__iter__")


def patch_input(
    stack: ExitStack,
    recorder: Any,
    set_attr: Callable[..., None],
    named: Sequence[tuple[str, Any, str, Any]] = (),
) -> None:
    """Times ``__next__`` of every DataLoader iterator on the profile's own thread (when its
    clock runs), notes each batch's tensors and the loader's settings at the line that pulls
    them (profilers/counting/origins.py), and times the inputs ``named`` (:func:`resolve_inputs`)."""
    for name, owner, attr, obj in named:
        _patch_named(stack, recorder, name, owner, attr, obj)
    try:
        from torch.utils.data.dataloader import _BaseDataLoaderIter
    except ImportError:  # a torch without it: no input waits (the report says 0)
        return
    original = _BaseDataLoaderIter.__next__

    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        frame = sys._getframe(1)

        def note(batch: Any, wait_ns: int) -> None:  # its copies' origin, the loader's settings
            recorder.loader_batch(self, batch, frame, wait_ns)

        return timed_next(recorder, original, self, frame, "DataLoader.__next__", note)

    set_attr(stack, _BaseDataLoaderIter, "__next__", __next__)
