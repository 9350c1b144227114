"""What a GPU's figures mean over time: energy and mean power (NVML's energy counter), "busy"
by utilisation but not by SM activity, and held idle. The Sampler runs every sample through
:class:`Activity`, so ``top``, ``--json``, the exporter and ``--remote`` agree."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Iterable
from dataclasses import dataclass

from gpuwatch.monitor.nvml.samples import GpuSample

#: Utilisation from which a GPU counts as busy by NVML's measure ...
BUSY_UTIL_PCT = 80.0
#: ... and SM activity under which that busy is not real work: one tiny kernel at a time (a
#: launch-bound loop), or a collective spinning while it waits for a peer.
LOW_SM_ACTIVE_PCT = 20.0


@dataclass(frozen=True)
class IdlePolicy:
    """When a GPU whose memory is held counts as idle, and for how long before it is HELD IDLE."""

    below_pct: float = 5.0
    """Idle: SM activity (where the GPU has GPM) or else utilisation under this."""
    after_s: float = 300.0
    """Held idle this long (five minutes by default: a notebook between cells is not flagged,
    a job that hung or a forgotten kernel is)."""


def is_low_sm_activity(g: GpuSample) -> bool:
    """Utilisation says busy, SM activity says the SMs are mostly empty."""
    return (
        g.gpu_util_pct is not None
        and g.sm_active_pct is not None
        and g.gpu_util_pct >= BUSY_UTIL_PCT
        and g.sm_active_pct < LOW_SM_ACTIVE_PCT
    )


def is_idle(g: GpuSample, below_pct: float) -> bool | None:
    """Whether the GPU does nothing now (None: it does not say)."""
    busy = g.sm_active_pct if g.sm_active_pct is not None else g.gpu_util_pct
    return None if busy is None else busy < below_pct


def held_idle_since(g: GpuSample, now: _dt.datetime) -> _dt.datetime | None:
    """When the GPU's held-idle spell began (``now`` is its sample's time)."""
    return None if g.held_idle_s is None else now - _dt.timedelta(seconds=g.held_idle_s)


def is_held(g: GpuSample) -> bool:
    """Some process holds memory on it (a listed process whose memory NVML does not report
    holds at least its context)."""
    return any(p.gpu_memory_bytes is None or p.gpu_memory_bytes > 0 for p in g.processes)


class Activity:
    """Adds the figures that need the previous samples (see the module's docstring)."""

    def __init__(self, policy: IdlePolicy | None = None) -> None:
        self.policy = policy or IdlePolicy()
        self._idle_since: dict[int, _dt.datetime] = {}
        self._energy_first: dict[int, int] = {}
        self._energy_prev: dict[int, tuple[_dt.datetime, int]] = {}

    def apply(self, g: GpuSample, now: _dt.datetime, **changes: object) -> GpuSample:
        """``g`` with the figures over time, and ``changes`` to other fields (PCIe rates) made
        in the same copy: a tick copies each sample once. ``changes`` must not touch the
        fields these figures are made from."""
        since_j, avg_w = self._energy(g, now)
        held_s: float | None
        if g.held_idle_s is not None:
            # NB: the source judged it (another host's exporter, with its own processes and
            # options): its verdict stands.
            held_s, held = g.held_idle_s, g.held_idle
        else:
            held_s = self._held_idle_s(g, now)
            held = held_s is not None and held_s >= self.policy.after_s
        return dataclasses.replace(
            g,
            **changes,  # type: ignore[arg-type]
            energy_since_start_j=since_j,
            power_avg_w=avg_w,
            low_sm_activity=is_low_sm_activity(g),
            held_idle_s=held_s,
            held_idle=held,
        )

    def _energy(self, g: GpuSample, now: _dt.datetime) -> tuple[float | None, float | None]:
        mj, i = g.energy_total_mj, g.index
        if mj is None or g.lost:
            self._energy_first.pop(i, None)
            self._energy_prev.pop(i, None)
            return None, None
        first = self._energy_first.get(i)
        prev = self._energy_prev.get(i)
        if first is None or mj < first:
            # NB: the counter starts again from 0 when the driver is reloaded: so do we.
            first = self._energy_first[i] = mj
            prev = None
        self._energy_prev[i] = (now, mj)
        avg_w = None
        if prev is not None:
            dt = (now - prev[0]).total_seconds()
            if dt > 0:
                avg_w = round((mj - prev[1]) / 1000.0 / dt, 1)
        return (mj - first) / 1000.0, avg_w

    def _held_idle_s(self, g: GpuSample, now: _dt.datetime) -> float | None:
        idle = is_idle(g, self.policy.below_pct)
        if g.lost or not idle or not is_held(g):
            self._idle_since.pop(g.index, None)
            return None
        since = self._idle_since.setdefault(g.index, now)
        return (now - since).total_seconds()


@dataclass(frozen=True)
class Fleet:
    """``top --remote``'s opening line: how the GPUs of every host stand."""

    busy: int = 0
    idle: int = 0
    held_idle: int = 0
    unreachable: int = 0

    @property
    def total(self) -> int:
        return self.busy + self.idle + self.held_idle + self.unreachable

    def __str__(self) -> str:
        return (
            f"fleet: {self.total} GPUs · {self.busy} busy · {self.idle} idle · "
            f"{self.held_idle} held idle · {self.unreachable} unreachable"
        )


def fleet(gpus: Iterable[GpuSample], below_pct: float) -> Fleet:
    """Each GPU counted once: unreachable (lost, or no figures at all: a host that does not
    answer), held idle, idle (under ``below_pct`` and not held idle), or busy."""
    busy = idle = held = gone = 0
    for g in gpus:
        if g.lost or (g.gpu_util_pct is None and g.memory_used_bytes is None):
            gone += 1
        elif g.held_idle:
            held += 1
        elif is_idle(g, below_pct):
            idle += 1
        else:
            busy += 1
    return Fleet(busy, idle, held, gone)
