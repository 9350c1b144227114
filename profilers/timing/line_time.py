"""One line's host time in a step, by cause (the records :mod:`profilers.timing.timeline`'s step
clock keeps per line)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class LineTime:
    """Host nanoseconds of one line, by cause, and what would stop a CUDA graph capture there."""

    launch_ns: int = 0
    input_ns: int = 0
    sync_ns: int = 0
    copy_ns: int = 0
    comm_ns: int = 0
    sync_causes: dict[str, int] = field(default_factory=dict)
    """Sync cause -> nanoseconds blocked."""
    syncs: int = 0
    host_reads: int = 0
    """Syncs that read a value back to the host (``.item()``, a copy to the host)."""
    pageable: int = 0
    """Copies to or from pageable host memory."""
    named_out: dict[str, int] = field(default_factory=dict)
    """``file:line`` -> nanoseconds of this line's host work (``launch``) that the stack
    sampler named as that line's (profilers/timing/gaps.py): already moved there; the
    GPU's launch idle charged here follows it (:func:`profilers.timing.idle.follow_named`)."""

    def ns(self, cause: str) -> int:
        value: int = getattr(self, f"{cause}_ns")
        return value

    @property
    def total_ns(self) -> int:
        return self.launch_ns + self.input_ns + self.sync_ns + self.copy_ns + self.comm_ns

    def merge(self, other: LineTime) -> None:
        self.launch_ns += other.launch_ns
        self.input_ns += other.input_ns
        self.sync_ns += other.sync_ns
        self.copy_ns += other.copy_ns
        self.comm_ns += other.comm_ns
        for cause, ns in other.sync_causes.items():
            self.sync_causes[cause] = self.sync_causes.get(cause, 0) + ns
        self.syncs += other.syncs
        self.host_reads += other.host_reads
        self.pageable += other.pageable
        for key, ns in other.named_out.items():
            self.named_out[key] = self.named_out.get(key, 0) + ns

    def copy(self) -> LineTime:
        out = LineTime()
        out.merge(self)
        return out
