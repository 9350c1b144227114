"""Which frames are the user's own code, and the source line an op is charged to."""

from __future__ import annotations

import functools
import importlib.util
import linecache
import os
import site
import sys
import sysconfig
from collections.abc import Sequence
from types import FrameType

from profilers.libraries import LibraryFrame
from profilers.text import printable
from profilers.timing.gaps import _TYPED

#: Where ops with no user frame on their thread go when no .backward() call is under way.
UNKNOWN = ("<unknown>", 0)


#: Installed packages wherever they lie (another environment on PYTHONPATH, Debian's
#: dist-packages, a copied venv): outside :func:`_library_roots`, still nobody's own code.
_SITE_DIR_NAMES = ("site-packages", "dist-packages")


def site_dir(path: str) -> str | None:
    """The innermost ``.../site-packages/`` (or ``dist-packages/``) holding ``path``, or None."""
    best = -1
    for name in _SITE_DIR_NAMES:
        marker = os.sep + name + os.sep
        best = max(best, path.rfind(marker) + len(marker) if marker in path else -1)
    return path[:best] if best > 0 else None


def _package_dir(name: str) -> str | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(list(spec.submodule_search_locations)[0])


def _site_dirs() -> set[str | None]:
    paths = sysconfig.get_paths()
    sites = {paths.get("purelib"), paths.get("platlib")}
    try:
        sites.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover
        pass  # virtualenv's old site module has no getsitepackages; sysconfig's paths suffice
    if site.ENABLE_USER_SITE and site.USER_SITE:
        sites.add(site.USER_SITE)
    return sites


@functools.cache
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    # NB: "scripts" (the environment's bin/) holds console-script launchers such as
    # bin/gpuwatch, which would otherwise end every caller chain.
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "scripts")} | _site_dirs()
    for pkg in ("torch", "profilers", "gpuwatch"):
        roots.add(_package_dir(pkg))
    return tuple(sorted({os.path.realpath(r) + os.sep for r in roots if r}))


@functools.cache
def _library_places() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], str]:
    """(gpuwatch's and profilers' directories; the site-packages directories, longest first;
    the standard library's; torch's), for naming the library frame of a copy or sync.
    NB: a venv's sysconfig "stdlib" is the venv's lib/ (site-packages inside it), and a
    system Python's site-packages lie inside its standard library: each is told apart."""

    def dirs(found: set[str | None]) -> tuple[str, ...]:
        return tuple(sorted({os.path.realpath(d) + os.sep for d in found if d}, key=len)[::-1])

    ours = dirs({_package_dir("profilers"), _package_dir("gpuwatch")})
    stdlib = dirs({os.path.dirname(os.__file__)})
    spec = importlib.util.find_spec("torch")  # without importing torch
    torch_init = spec.origin if spec is not None and spec.origin else os.devnull
    return (
        ours,
        dirs(_site_dirs()),
        stdlib,
        os.path.realpath(os.path.dirname(torch_init)) + os.sep,
    )


#: torch's files that only pass an op on (dispatch, modes, decorators): never the library's line.
_TORCH_PLUMBING = (
    "_ops.py",
    "_compile.py",
    "overrides.py",
    os.path.join("utils", "_python_dispatch.py"),
    os.path.join("utils", "_contextlib.py"),
    os.path.join("utils", "_device.py"),
    os.path.join("_dynamo", ""),
    os.path.join("_subclasses", ""),
)

#: Libraries' files that only pass a tensor on (apply_func, wrapped ``.to()``): their caller is
#: named, where the knob is (Lightning's progress bar, accelerate's DataLoader), unless the
#: user's line called them. Suffixes of the path inside site-packages.
LIBRARY_PLUMBING = (
    "lightning_utilities/core/apply_func.py",
    "lightning/fabric/utilities/apply_func.py",
    "lightning_fabric/utilities/apply_func.py",
    "lightning/fabric/utilities/device_dtype_mixin.py",
    "lightning_fabric/utilities/device_dtype_mixin.py",
    "accelerate/utils/operations.py",
)

_OTHER, _TORCH, _LIBRARY, _PLUMBING = 0, 1, 2, 3


def _inductor_output(path: str) -> bool:
    """Whether ``path`` is inductor's generated code: its ops belong to the user line that ran
    the graph. NB: inductor is asked only when already loaded (it is, if it wrote the file)."""
    utils = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    default = getattr(utils, "default_cache_dir", None)
    if default is None:
        return False
    try:  # NB: as its cache_dir() reads it, without that function's makedirs and setenv
        folder = os.path.realpath(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default())
    except (OSError, KeyError, RuntimeError):
        return False
    return path.startswith(folder + os.sep)


class UserCode:
    """Decides, once per file name, whether frames in it are the user's code: any file outside
    the standard library, site-packages, torch, gpuwatch and profilers; with ``roots``, only
    those under them."""

    def __init__(self, roots: Sequence[str] | None = None) -> None:
        self._excluded = _library_roots()
        self._roots = tuple(os.path.realpath(r) + os.sep for r in roots) if roots else None
        self._cache: dict[str, bool] = {}
        self._cwd = os.getcwd() + os.sep
        self._kinds: dict[str, tuple[int, str]] = {}

    def __call__(self, filename: str) -> bool:
        known = self._cache.get(filename)
        if known is None:
            known = self._cache[filename] = self._decide(filename)
        return known

    def _decide(self, filename: str) -> bool:
        if filename.startswith("<"):
            # <string> and <stdin> are code the user typed (no root holds them); <frozen ...>
            # is the interpreter's; <eval_with_key> is torch.fx's graph code, whose ops belong
            # to the user line that called the compiled code.
            return self._roots is None and not filename.startswith(("<frozen", "<eval_with_key>"))
        path = os.path.realpath(filename)
        if path.startswith(self._excluded) or _inductor_output(path):
            return False
        if site_dir(path) is not None:
            return False  # installed packages from another environment on sys.path
        if self._roots is not None:
            return path.startswith(self._roots)
        return True

    def decided(self, filename: str) -> bool:
        """Whether ``filename`` is already known as the user's, looking nothing up on disk."""
        return self._cache.get(filename) is True

    def first(self, frame: FrameType | None) -> FrameType | None:
        """The innermost user frame at or above ``frame`` that has a source file of its own,
        else the innermost user frame of code made at run time (see :func:`~profilers.timing.gaps.generated`)."""
        cache = self._cache
        made: FrameType | None = None
        while frame is not None:
            filename = frame.f_code.co_filename
            known = cache.get(filename)
            if known is None:
                known = self(filename)
            if known:
                # NB: generated()'s test inline: a call here costs every op's line lookup
                if not filename.startswith("<") or filename.startswith(_TYPED):
                    return frame
                if made is None:
                    made = frame
            frame = frame.f_back
        return made

    def caller_key(self, frame: FrameType) -> tuple[str, int] | None:
        """Where the next user frame above ``frame`` is (which caller reached this line)."""
        up = self.first(frame.f_back)
        return None if up is None else (up.f_code.co_filename, up.f_lineno)

    def chain(self, frame: FrameType | None, limit: int = 8) -> list[str]:
        """``file:line function`` of the user frames above ``frame`` (callers), innermost first."""
        out: list[str] = []
        frame = frame.f_back if frame is not None else None
        while frame is not None and len(out) < limit:
            frame = self.first(frame)
            if frame is None:
                break
            out.append(
                f"{self.display(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}"
            )
            frame = frame.f_back
        return out

    def display(self, filename: str) -> str:
        """Relative to the working directory when inside it; bytes of a non-UTF-8 name as
        ``\\xff`` escapes (the report is UTF-8)."""
        if filename.startswith(self._cwd):
            filename = filename[len(self._cwd) :]
        return printable(filename)

    def library_code(self, frame: FrameType | None) -> FrameType | None:
        """The library frame below the user's line that made an op called from ``frame``: a
        library's outside torch past :data:`LIBRARY_PLUMBING`, else such a helper, else torch's
        own past its dispatch plumbing; None when the user's line called the op itself.
        NB: walked per copy or sync only, never per op."""
        user = self.first(frame)
        found: FrameType | None = None
        helper: FrameType | None = None
        while frame is not None and frame is not user:
            kind = self._kind(frame.f_code.co_filename)[0]
            if kind == _LIBRARY:
                return frame
            if kind == _PLUMBING and helper is None:
                helper = frame
            elif kind == _TORCH and found is None:
                found = frame
            frame = frame.f_back
        return helper or found

    def library_name(self, filename: str) -> str:
        """A library's file relative to its site-packages, torch's as ``torch/...``."""
        return self._kind(filename)[1]

    def library_entry(self, entries: Sequence[tuple[str, int, str]]) -> tuple[str, int, str] | None:
        """:meth:`library_code` of ``(file, line, function)`` entries, outermost first (a
        compiled graph's node keeps its stack so)."""
        found: tuple[str, int, str] | None = None
        for file, line, function in reversed(entries):
            kind, name = self._kind(file)
            if kind == _LIBRARY:
                return name, line, function
            if kind == _TORCH and found is None:
                found = name, line, function
        return found

    def note_library(
        self,
        libraries: dict[tuple[str, int], LibraryFrame],
        frame: FrameType | None,
        copied: bool,
        nbytes: int,
        sync: str | None,
        pageable: bool = False,
        made_at: tuple[str, int, str] | None = None,
    ) -> None:
        """Counts a copy and/or a sync at the library frame that made the op ``frame`` called
        (or at ``made_at``, a compiled graph's record), in a line's ``libraries``."""
        if made_at is not None:
            key, function, text = made_at[:2], made_at[2], ""
        else:
            found = self.library_code(frame)
            if found is None:
                return
            code = found.f_code
            key = (self._kind(code.co_filename)[1], found.f_lineno)
            function, text = code.co_name, statement(code.co_filename, found.f_lineno)
        lib = libraries.get(key)
        if lib is None:
            lib = libraries[key] = LibraryFrame(*key, function, text)
        lib.add(copied, nbytes, sync, pageable)

    def _kind(self, filename: str) -> tuple[int, str]:
        known = self._kinds.get(filename)
        if known is None:
            known = self._kinds[filename] = self._decide_kind(filename)
        return known

    def _decide_kind(self, filename: str) -> tuple[int, str]:
        if filename.startswith("<") or self(filename):
            return _OTHER, filename
        path = os.path.realpath(filename)
        ours, sites, stdlib, torch_dir = _library_places()
        if path.startswith(ours):
            return _OTHER, filename
        if path.startswith(torch_dir):
            inside = path[len(torch_dir) :]
            if inside.startswith(_TORCH_PLUMBING):
                return _OTHER, filename
            return _TORCH, os.path.join("torch", inside)
        root = next((r for r in sites if path.startswith(r)), None)
        if root is None:
            if path.startswith(stdlib):
                return _OTHER, filename
            root = site_dir(path)  # another environment's
        if root is not None:
            inside = printable(path[len(root) :])
            return (_PLUMBING if inside.endswith(LIBRARY_PLUMBING) else _LIBRARY), inside
        return _LIBRARY, self.display(filename)  # outside user_code's roots: a library too


#: Lines of one statement read for a library frame's source, and the characters kept of it.
STATEMENT_LINES = 8
STATEMENT_CHARS = 400


def statement(filename: str, line: int) -> str:
    """The statement at ``line`` of ``filename``, its lines joined until its brackets close: a
    frame of ``if (`` names the whole condition, e.g. HF's ``if (self.args.logging_nan_inf...``."""
    parts: list[str] = []
    depth = 0
    for n in range(line, line + STATEMENT_LINES):
        text = linecache.getline(filename, n).strip()
        if not text:
            break
        parts.append(text)
        depth += sum(text.count(c) for c in "([{") - sum(text.count(c) for c in ")]}")
        if depth <= 0:
            break
    return " ".join(parts)[:STATEMENT_CHARS]


def inside_tensor_printing(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a caller is torch's tensor printing (torch/_tensor_str.py)."""
    while frame is not None:
        if frame.f_code.co_filename.endswith(("_tensor_str.py",)):
            return True
        frame = frame.f_back
    return False
