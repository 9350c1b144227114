"""What torch.compile did under the profile, in words (the report's ``compiled``): first lines
of the summary and of the HTML, since a profile of code that ran eager is not a profile of the
compiled program."""

from __future__ import annotations

from profilers import Report

SHOWN_REASONS = 3
"""Graph-break reasons named in the summary line; the JSON keeps up to 20."""


def compiled_lines(r: Report) -> list[str]:
    """The compiled code ran eager under a dispatch mode (and why); or what dynamo compiled, where
    its graphs broke, the graphs run without the CUDA graphs asked for, and the recompiles."""
    c = r.compiled
    if not c:
        return []
    under = c.get("ran_eager")
    if under:
        fix = "no simulated GPU" if "fake-cuda" in str(under) else "--no-kernel-timing"
        return [
            f"torch.compile ran eager: dynamo compiled no graph under {under} (it skips every "
            f"frame while a dispatch mode is on), so these counts are of the eager code; {fix} "
            "runs it compiled"
        ]
    graphs = int(c.get("graphs", 0))
    line = f"torch.compile: dynamo compiled {_n(graphs, 'graph')}"
    if graphs == 0:
        line += f" of the {_n(int(c.get('frames', 0)), 'frame')} it was handed"
    breaks = c.get("graph_breaks") or []
    if breaks:
        total = sum(int(b["count"]) for b in breaks)
        named = "; ".join(f"{b['reason']} (x{int(b['count'])})" for b in breaks[:SHOWN_REASONS])
        more = _more(len(breaks))
        at = ", ".join(f"{b['file']}:{b['line']}" for b in c.get("graph_break_lines") or [])
        line += f", {_n(total, 'graph break')}{f' (at {at})' if at else ''}: {named}{more}"
    out = [line]
    skips = int(c.get("cudagraph_skips") or 0)
    if skips:
        out.append(
            f"torch.compile: inductor ran {_n(skips, 'graph')} without CUDA graphs "
            '(mode="reduce-overhead" asked for them; a graph on a CPU device, one that '
            "mutates its input or has dynamic shapes is skipped: TORCH_LOGS=cudagraphs says "
            "which)"
        )
    recompiled = c.get("recompiled") or []
    if recompiled:
        out.append(
            "torch.compile recompiled: "
            + ", ".join(
                f"{r['file']}:{r['line']} {r['function']} ({int(r['compiles'])} versions)"
                for r in recompiled[:SHOWN_REASONS]
            )
            + _more(len(recompiled))
        )
    return out


def _more(count: int) -> str:
    return f"; {count - SHOWN_REASONS} more in the JSON" if count > SHOWN_REASONS else ""


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
