"""The library frames beside a user's line: for each copy and sync a library made (HF's
Trainer, Lightning, torch's own GradScaler), the frame in that library that made it, so that
``train.py:31: 69 syncs`` can say ``transformers/trainer.py:2410`` too. No torch here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from profilers.finite import mapping, number

MAX_LIBRARY_FRAMES = 16
"""Library frames kept per line in a report (those with the most syncs, then copies): a
framework's ``trainer.fit()`` line reaches a dozen (Lightning 2.6: 9 in four steps)."""


class LibraryFrame:
    """The copies and syncs one library frame made for one user line."""

    __slots__ = (
        "by_cause",
        "copies",
        "copy_bytes",
        "file",
        "function",
        "line",
        "pageable",
        "source",
    )

    def __init__(self, file: str, line: int, function: str, source: str = "") -> None:
        self.file = file
        self.line = line
        self.function = function
        self.source = source
        """The frame's line of code, stripped ("" where unknown): the hints match on it, so
        that a knob is found wherever a release moved its line or function."""
        self.copies = 0
        self.copy_bytes = 0
        self.pageable = 0
        """Copies between pageable host memory and a GPU (the rest: pinned, or no host)."""
        self.by_cause: dict[str, int] = {}
        """Syncs by cause (``item``, ``copy_to_host``, ...)."""

    @property
    def key(self) -> tuple[str, int]:
        return (self.file, self.line)

    @property
    def syncs(self) -> int:
        return sum(self.by_cause.values())

    def add(self, copied: bool, nbytes: int, sync: str | None, pageable: bool = False) -> None:
        if copied:
            self.copies += 1
            self.copy_bytes += nbytes
            self.pageable += pageable
        if sync is not None:
            self.by_cause[sync] = self.by_cause.get(sync, 0) + 1

    def merge(self, other: LibraryFrame) -> None:
        self.copies += other.copies
        self.copy_bytes += other.copy_bytes
        self.pageable += other.pageable
        self.source = self.source or other.source
        for cause, n in other.by_cause.items():
            self.by_cause[cause] = self.by_cause.get(cause, 0) + n

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"file": self.file, "line": self.line, "function": self.function}
        if self.source:
            out["source"] = self.source
        copies = {"count": self.copies, "bytes": self.copy_bytes}
        if self.pageable:
            copies["pageable"] = self.pageable
        out["copies"] = copies
        out["syncs"] = {"count": self.syncs, "by_cause": dict(self.by_cause)}
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> LibraryFrame:
        out = cls(
            str(d["file"]),
            int(number(d["line"])),
            str(d.get("function", "")),
            str(d.get("source", "")),
        )
        copies, syncs = mapping(d["copies"]), mapping(d["syncs"])
        out.copies = int(number(copies["count"]))
        out.copy_bytes = int(number(copies["bytes"]))
        out.pageable = int(number(copies.get("pageable", 0)))
        out.by_cause = {str(k): int(number(v)) for k, v in mapping(syncs["by_cause"]).items()}
        return out


def merge_frames(into: dict[tuple[str, int], LibraryFrame], frames: Iterable[LibraryFrame]) -> None:
    """Adds ``frames`` (LibraryFrame objects) to ``into``, by file and line, copied."""
    for f in frames:
        mine = into.get(f.key)
        if mine is None:
            mine = into[f.key] = LibraryFrame(f.file, f.line, f.function, f.source)
        mine.merge(f)


def top_frames(frames: Iterable[LibraryFrame], n: int = MAX_LIBRARY_FRAMES) -> list[LibraryFrame]:
    """The ``n`` frames with the most syncs, then copies (then by place, for a stable order)."""
    return sorted(frames, key=lambda f: (-f.syncs, -f.copies, f.file, f.line))[:n]
