"""The devices a run used, as the report names them (a GPU by its name where torch sees it)."""

from __future__ import annotations

import torch

from profilers.memory.tracker import MemoryTracker


def describe_devices(
    seen: set[str], memory: MemoryTracker | None = None
) -> list[dict[str, object]]:
    """The devices copies were seen on (``seen``), and the GPUs ``memory`` (the run's
    :class:`~profilers.memory.tracker.MemoryTracker`, if any) saw memory made on: a script
    that only computes on a GPU copies nothing there."""
    seen = set(seen)
    if memory is not None:
        seen.update(f"cuda:{index}" for index in list(memory.peak))
    out = []
    for dev in sorted(seen):
        entry: dict[str, object] = {"device": dev, "name": None}
        if dev.startswith("cuda") and torch.cuda.is_available():
            index = int(dev.split(":")[1]) if ":" in dev else 0
            if index < torch.cuda.device_count():
                entry["name"] = torch.cuda.get_device_name(index)
        elif dev == "cpu":
            entry["name"] = "host"
        out.append(entry)
    return out
