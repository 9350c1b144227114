"""``gpuwatch top --only 0,2``, ``--only-visible`` and the process filters (``--user``, ``--pid``,
``--compute``): a :class:`Backend` that shows some GPUs, and some processes, of another.

GPUs keep their own indices (GPU 2 stays "GPU 2"); ``indices`` says which are shown.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from gpuwatch.monitor.nvml.backend import Backend
from gpuwatch.monitor.nvml.samples import GpuSample, ProcessSample


class ChoiceError(ValueError):
    """A GPU choice that names no GPU (one line for the user)."""


def parse_only(text: str, count: int) -> list[int]:
    """``"0,2"`` -> [0, 2], each a GPU of the ``count`` there are."""
    try:
        chosen = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ChoiceError(f"--only {text}: give GPU indices, e.g. --only 0,2") from None
    bad = [i for i in chosen if not 0 <= i < count]
    if bad or not chosen:
        raise ChoiceError(f"--only {text}: this machine has GPUs 0 to {count - 1}")
    return sorted(set(chosen))


def resolve_visible(
    text: str,
    uuids: Mapping[int, str],
    mig_gpu: Callable[[str], int | None] | None = None,
    count: int | None = None,
) -> list[int | None]:
    """The NVML index of each CUDA device ``CUDA_VISIBLE_DEVICES=text`` makes (CUDA device
    ``i`` is entry ``i``), None where no GPU of ``uuids`` (NVML index -> UUID) can be named.
    Entries are indices, GPU UUIDs (a unique prefix, with or without ``GPU-``) and MIG
    instances: ``MIG-GPU-<gpu uuid>/<gi>/<ci>`` names its GPU; the newer ``MIG-<uuid>`` is
    the instance's own UUID, whose GPU only NVML knows (``mig_gpu``). Like CUDA, the list ends
    at the first entry that names no device; an index is checked against ``count`` GPUs when
    given."""
    out: list[int | None] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part.lstrip("-").isdigit():
            if int(part) < 0 or count is not None and int(part) >= count:
                break  # CUDA stops at the first invalid entry
            out.append(int(part))
            continue
        if part.startswith("MIG-") and not part.startswith("MIG-GPU-"):
            out.append(mig_gpu(part) if mig_gpu is not None else None)
            continue
        parent = part.removeprefix("MIG-").split("/")[0]
        prefix = parent if parent.startswith("GPU-") else f"GPU-{parent}"
        found = [i for i, u in uuids.items() if u.startswith(prefix)]
        out.append(found[0] if len(found) == 1 else None)
    return out


def visible_indices(backend: Backend, visible: str | None = None) -> list[int]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` (or ``visible``) lets CUDA programs see, as NVML
    indices (see :func:`resolve_visible`); a MIG instance shows the GPU it is part of."""
    text = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    count = backend.device_count()
    if text is None:
        return list(range(count))
    uuids = {i: backend.sample(i).uuid or "" for i in range(count)}
    mig_gpu = getattr(backend, "gpu_of_mig", None)
    resolved = resolve_visible(text, uuids, mig_gpu, count)
    parts = [p.strip() for p in text.split(",") if p.strip()]
    for part, index in zip(parts, resolved, strict=False):
        if index is None:
            if part.startswith("MIG-") and mig_gpu is None:
                raise ChoiceError(
                    f"--only-visible: {part} is a MIG instance and these GPUs' source cannot "
                    "say which GPU it is part of; choose its GPU with --only N"
                )
            raise ChoiceError(f"--only-visible: {part} names no single GPU here")
    return sorted({i for i in resolved if i is not None})


@dataclass(frozen=True)
class ProcessFilter:
    users: tuple[str, ...] = ()
    pids: tuple[int, ...] = ()
    compute_only: bool = False

    def keeps(self, p: ProcessSample) -> bool:
        if self.users and p.user not in self.users:
            return False
        if self.pids and p.pid not in self.pids:
            return False
        return not (self.compute_only and p.type != "compute")

    @property
    def active(self) -> bool:
        return bool(self.users or self.pids or self.compute_only)


class ChosenBackend:
    """``backend`` with only the GPUs ``indices`` and the processes ``processes`` keeps."""

    def __init__(
        self, backend: Backend, indices: Sequence[int], processes: ProcessFilter | None = None
    ) -> None:
        self.backend = backend
        self.indices = list(indices)
        self.filter = processes or ProcessFilter()
        self.label = backend.label
        self.simulated = backend.simulated

    def driver_version(self) -> str | None:
        return self.backend.driver_version()

    def device_count(self) -> int:
        return len(self.indices)

    def sample(self, index: int) -> GpuSample:
        g = self.backend.sample(self.indices[index])
        if self.filter.active:
            g = replace(g, processes=tuple(p for p in g.processes if self.filter.keeps(p)))
        return g

    def pcie_throughput(self, index: int) -> tuple[int | None, int | None]:
        return self.backend.pcie_throughput(self.indices[index])

    def send_signal(self, pid: int, signum: int, start_time: float | None = None) -> None:
        self.backend.send_signal(pid, signum, start_time)

    @property
    def driver_problem(self) -> str | None:
        return self.backend.driver_problem

    def close(self) -> None:
        self.backend.close()
