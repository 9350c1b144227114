"""One report from the reports of a distributed run's ranks (``gpuwatch report r.rank*.json``).

Totals are summed over ranks; each line's counts are summed too, and its ``by_rank`` keeps every
rank's own figures (keyed by the rank as a string), so the spread across ranks (stragglers) can be
shown per line. Ranks of the world with no report are named in ``missing_ranks``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace

from profilers.finite import mapping, number
from profilers.libraries import merge_frames
from profilers.origins import merge_origins
from profilers.records import Line, Totals
from profilers.report import InternalError, Report
from profilers.sections import Timeline
from profilers.stats import Counters, LineStats, add_entries

#: The largest world merged (the published schema's ``world_size`` maximum): ranks are listed
#: one by one in ``missing_ranks``, so the world bounds the merged report's size.
MAX_WORLD_SIZE = 65536


class MergeError(ValueError):
    """The reports cannot be merged (one line saying why)."""


def _ranges(ranks: list[int]) -> str:
    """``[2, 3, 4, 7]`` -> ``'2-4, 7'`` (a missing half of a large world in a few characters)."""
    parts: list[str] = []
    start = prev = ranks[0]
    for k in [*ranks[1:], None]:
        if k is not None and k == prev + 1:
            prev = k
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if k is not None:
            start = prev = k
    return ", ".join(parts)


class DifferentRuns(MergeError):
    """The reports are not ranks of one run (two runs to compare: ``gpuwatch diff``)."""


def check_one_run(reports: list[Report], names: list[str] | None = None) -> None:
    """Raises :class:`DifferentRuns` unless ``reports`` are ranks of one distributed run: each
    with a rank, the same world size and the same command. NB: merging two runs sums unrelated
    totals into one report that looks whole, so anything else is refused."""
    if len(reports) < 2:
        return
    named = names or [f"report {i + 1}" for i in range(len(reports))]
    for name, r in zip(named, reports, strict=True):
        if r.ranks is not None:
            raise DifferentRuns(f"{name} is already a merged report, not one rank's")
        if r.rank is None:
            raise DifferentRuns(f"{name} is a single-process run, not a rank of a distributed run")
    first, name0 = reports[0], named[0]
    for name, r in zip(named[1:], reports[1:], strict=True):
        if r.command != first.command:
            raise DifferentRuns(
                f"{name0} and {name} are different runs ({_cmd(first)} vs {_cmd(r)})"
            )
        if r.world_size != first.world_size:
            raise DifferentRuns(
                f"{name0} and {name} are ranks of different runs (world sizes "
                f"{first.world_size} and {r.world_size})"
            )


def _cmd(report: Report) -> str:
    text = " ".join(report.command) or "no command"
    return text if len(text) <= 80 else text[:77] + "..."


def _merged_lines(by_rank: dict[int, Report], ranks: list[int]) -> list[Line]:
    """Each line summed over ``ranks``, each rank's own counts in ``by_rank``; costliest first."""
    acc: dict[tuple[str, int], LineStats] = {}
    per_rank: dict[tuple[str, int], dict[str, dict[str, object]]] = {}
    for rank in ranks:
        for line in by_rank[rank].lines:
            into = acc.get(line.key)
            if into is None:
                into = acc[line.key] = LineStats(line.file, line.line, line.function)
                into.source = line.source
            for chain in line.stacks:
                into.add_stack(list(chain))
            into.merge_counts(line)
            into.steps_active = max(into.steps_active, line.steps_active)  # ranks step together
            add_entries(into.op_breakdown, line.op_breakdown)
            add_entries(into.backward, line.backward)
            for dtype, n in line.copy_dtypes.items():
                into.copy_dtypes[dtype] = into.copy_dtypes.get(dtype, 0) + n
            merge_frames(into.libraries, line.library)
            merge_origins(into.origins, line.origins)
            into.loader = into.loader or (dict(line.loader) if line.loader else None)  # rank's own
            per_rank.setdefault(line.key, {})[str(rank)] = line.counters_dict()
    lines = [replace(Line.of(s), by_rank=per_rank[key]) for key, s in acc.items()]
    lines.sort(key=lambda s: (s.syncs.count, s.bytes_moved, s.kernel_time_ms, s.ops), reverse=True)
    return lines


def merge_ranks(reports: list[Report], names: list[str] | None = None) -> Report:
    """The merged report of ``reports`` (one per rank, any order; ``names`` for messages)."""
    if not reports:
        raise MergeError("no reports to merge")
    check_one_run(reports, names)
    by_rank: dict[int, Report] = {}
    for i, r in enumerate(reports):
        rank = r.rank if r.rank is not None else i
        if rank in by_rank:
            raise MergeError(f"two reports of rank {rank}: give each rank's report once")
        by_rank[rank] = r
    ranks = sorted(by_rank)
    world = max([r.world_size or 0 for r in reports] + [ranks[-1] + 1])
    if world > MAX_WORLD_SIZE or ranks[0] < 0:
        raise MergeError(
            f"a world of {world:,} ranks: gpuwatch merges at most {MAX_WORLD_SIZE:,} ranks"
        )
    missing = [k for k in range(world) if k not in by_rank]
    first = by_rank[ranks[0]]

    lines = _merged_lines(by_rank, ranks)
    totals = Counters()
    for rank in ranks:
        totals.merge_counts(by_rank[rank].totals)

    errors = [f"rank {k}: {by_rank[k].error}" for k in ranks if by_rank[k].error]
    if missing:
        errors.append(f"no report from rank{'s' if len(missing) > 1 else ''} " + _ranges(missing))
    events = [{**e, "rank": k} for k in ranks for e in by_rank[k].timeline.get("events", [])]
    events.sort(key=lambda e: float(e.get("t", 0.0)))
    capacity = sum(int(by_rank[k].timeline.get("capacity", 0)) for k in ranks)
    internal: dict[str, InternalError] = {}
    for k in ranks:
        for op, e in by_rank[k].internal_errors.items():
            into_e = internal.setdefault(op, {"count": 0, "error": e.get("error", "")})
            into_e["count"] += int(e["count"])
    devices: list[dict[str, object]] = []
    for k in ranks:
        for d in by_rank[k].devices:
            if d not in devices:
                devices.append(d)
    codes = [by_rank[k].exit_code for k in ranks]
    return Report(
        command=list(first.command),
        exit_code=next((c for c in codes if c), 0),
        duration_s=max(by_rank[k].duration_s for k in ranks),
        devices=devices,
        totals=Totals.of(totals),
        lines=lines,
        timeline=Timeline(
            capacity=capacity,
            recorded=sum(int(by_rank[k].timeline.recorded) for k in ranks),
            dropped=sum(int(by_rank[k].timeline.dropped) for k in ranks),
            events=events,
        ),
        partial=bool(missing) or any(by_rank[k].partial for k in ranks),
        options=first.options.replace(merged_ranks=len(ranks)),
        gpu_samples=[{**g, "rank": k} for k in ranks for g in by_rank[k].gpu_samples],
        started_at=min((by_rank[k].started_at or "" for k in ranks), default=None) or None,
        error="; ".join(errors) or None,
        internal_errors=internal,
        world_size=world,
        steps=first.steps,
        ranks=ranks,
        missing_ranks=missing or None,
    )


@dataclass(frozen=True)
class Spread:
    """One line's time across ranks: the slowest rank against the median."""

    line: Line
    slowest_rank: str
    slowest_ms: float
    median_ms: float

    @property
    def behind_pct(self) -> float:
        return 0.0 if self.median_ms <= 0 else (self.slowest_ms / self.median_ms - 1.0) * 100.0


def line_time_ms(counters: Mapping[str, object]) -> float:
    """A line's time on one rank: its ops' time and the host's wait on its collectives."""
    wait = mapping(counters.get("comm") or {}).get("wait_ms", 0.0)
    return float(number(counters.get("kernel_time_ms", 0.0))) + float(number(wait))


def spreads(report: Report, top: int = 10) -> list[Spread]:
    """The lines of a merged report whose time differs most across ranks, slowest first."""
    out = []
    for s in report.lines:
        if len(s.by_rank) < 2:
            continue
        times = {rank: line_time_ms(c) for rank, c in s.by_rank.items()}
        slowest = max(times, key=lambda r: times[r])
        if times[slowest] <= 0:
            continue
        out.append(Spread(s, slowest, times[slowest], statistics.median(times.values())))
    out.sort(key=lambda sp: sp.slowest_ms - sp.median_ms, reverse=True)
    return out[:top]
