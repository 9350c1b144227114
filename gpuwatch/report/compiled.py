"""What torch.compile did under the profile, in words (the report's ``compiled``): first lines
of the summary and of the HTML, since a profile of code that ran eager is not a profile of the
compiled program."""

from __future__ import annotations

from profilers import Report

SHOWN_REASONS = 3
"""Graph-break reasons named in the summary line; the JSON keeps up to 20."""


def compiled_lines(r: Report) -> list[str]:
    """One line: the compiled code ran eager under a dispatch mode (and why), or what dynamo
    compiled and where its graphs broke, in dynamo's own words; none where nothing was
    compiled."""
    c = r.compiled
    if not c:
        return []
    under = c.get("ran_eager")
    if under:
        fix = (
            "no simulated GPU runs it compiled"
            if "fake-cuda" in str(under)
            else "--no-kernel-timing runs it compiled"
        )
        return [
            f"torch.compile ran eager: dynamo compiled no graph under {under} (it skips every "
            "frame while a dispatch mode is on), so these counts are of the eager code; "
            f"{fix}"
        ]
    graphs = int(c.get("graphs", 0))
    line = f"torch.compile: dynamo compiled {_n(graphs, 'graph')}"
    if graphs == 0:
        line += f" of the {_n(int(c.get('frames', 0)), 'frame')} it was handed"
    breaks = c.get("graph_breaks") or []
    if breaks:
        total = sum(int(b["count"]) for b in breaks)
        named = "; ".join(f"{b['reason']} (x{int(b['count'])})" for b in breaks[:SHOWN_REASONS])
        more = (
            f"; {len(breaks) - SHOWN_REASONS} more in the JSON"
            if len(breaks) > SHOWN_REASONS
            else ""
        )
        line += f", {_n(total, 'graph break')}: {named}{more}"
    return [line]


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
