"""The report's ``memory`` section rendered: the failure explained (a device mismatch, an
out-of-memory error), and GPU memory by line, for the summary (rich) and the HTML page."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuwatch import _format as fmt
from profilers import Report


def _where(d: dict[str, Any]) -> str:
    return f"{d['file']}:{d['line']}"


def _gpu_size(nbytes: int) -> str:
    """A GPU's size as people name it: 24 GiB, 80 GiB, 512 MiB."""
    for unit, name in ((1024**3, "GiB"), (1024**2, "MiB")):
        if nbytes >= unit:
            return f"{nbytes / unit:.4g} {name}"
    return fmt.size(nbytes)


def _a(size: str) -> str:
    """``a 24 GiB`` but ``an 80 GiB``, ``an 8 GiB``, ``an 11 GiB``, ``an 18 GiB`` (as said)."""
    whole = size.split(".")[0].split(" ")[0]
    return "an" if whole.startswith("8") or whole in ("11", "18") else "a"


def failure_lines(r: Report) -> list[str]:
    """What the failure was and what to do, as plain lines (the summary, the HTML, the live
    view); empty when no op failed with a device mismatch or out of memory."""
    mem: Mapping[str, Any] = r.memory or {}
    f = mem.get("failure")
    if not f:
        return []
    caught = bool(r.error) and r.error != f["error"]
    prefix = "earlier, caught by the script: " if caught else ""
    simulated = mem.get("source") == "simulated"
    source = f" ({f['source']})" if f.get("source") else ""
    if f["kind"] == "out_of_memory":
        cap = f.get("capacity_bytes")
        asked = f.get("requested_bytes")
        wanted = f", asking for {fmt.size(asked)}" if asked else ""
        if simulated and cap:
            head = (
                f"{prefix}OUT OF MEMORY: would run out of memory on {_a(_gpu_size(cap))} "
                f"{_gpu_size(cap)} GPU at {_where(f)}{source}{wanted}"
            )
        else:
            head = f"{prefix}OUT OF MEMORY on {f.get('device', 'the GPU')} at {_where(f)}{source}"
            head += wanted
        out = [head]
        held = f.get("held") or []
        if held:
            out.append(f"  the lines holding its {fmt.size(f.get('held_bytes') or 0)} then:")
            out.extend(
                f"    {_where(h)}  {fmt.size(h['bytes'])}  {h.get('source', '')}" for h in held[:8]
            )
        elif not mem.get("tracked"):
            out.append("  run with --memory to see the lines holding the GPU's memory")
        return out
    out = [f"{prefix}DEVICE MISMATCH at {_where(f)}{source}: {f['op']}"]
    if f.get("chain"):
        out.append("  called from " + " <- ".join(f["chain"][:4]))
    for t in f.get("tensors") or []:
        shape = "(" + ", ".join(str(n) for n in t["shape"]) + ("," if len(t["shape"]) == 1 else "")
        made = t.get("made_by")
        origin = ""
        if made:
            verb = "moved there" if made.get("moved") else f"made by {made['op']}"
            origin = f"  {verb} at {_where(made)}"
        out.append(f"  {t['arg']}: {t['device']} {shape}) {t['dtype']}{origin}")
    out.extend(f"  fix: {fix}" for fix in f.get("fixes") or [])
    return out


def failure_part(r: Report) -> RenderableType | None:
    lines = failure_lines(r)
    if not lines:
        return None
    text = Text(lines[0], style="bold red")
    for line in lines[1:]:
        text.append("\n" + line, style="yellow" if line.startswith("  fix:") else "")
    return text


def memory_title(r: Report) -> str | None:
    mem: Mapping[str, Any] = r.memory or {}
    peak = mem.get("peak")
    if not mem.get("tracked") or not peak:
        return None
    kind = "predicted on the simulated GPU" if mem.get("source") == "simulated" else "measured"
    cap = peak.get("capacity_bytes")
    of = f" of {_gpu_size(cap)}" if cap else ""
    predicted: Mapping[str, Any] = r.predicted or {}
    named = (predicted.get("memory") or {}).get("gpu_bytes")
    if named and predicted.get("gpu"):  # --gpu NAME: that GPU's size, not the fake device's
        of = f" of {_gpu_size(int(named))} (PREDICTED for {predicted['gpu']})"
    return (
        f"GPU memory by line ({kind}): peak {fmt.size(peak['bytes'])}{of} on {peak['device']}"
        f" in step {peak.get('step', 0)}"
    )


def _titled_rows(r: Report) -> tuple[str, list[dict[str, Any]]] | None:
    title = memory_title(r)
    rows = (r.memory.lines if r.memory else None) or []
    return (title, rows) if title is not None and rows else None


def _sizes(row: dict[str, Any]) -> list[str]:
    return [fmt.size(row[key]) for key in ("peak_bytes", "live_bytes", "max_bytes")]


def memory_part(r: Report, top: int) -> RenderableType | None:
    """The lines holding the most at the run's peak: bytes then, at the end, at most."""
    titled = _titled_rows(r)
    if titled is None:
        return None
    t = Table(title=titled[0], title_justify="left", box=box.SIMPLE_HEAD, expand=True)
    t.add_column("line", style="cyan", no_wrap=True)
    for col in ("at peak", "at end", "most"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("source", no_wrap=True, overflow="ellipsis", ratio=1)
    for row in titled[1][:top]:
        source = row.get("source") or row.get("function", "")
        t.add_row(escape(_where(row)), *_sizes(row), escape(source))
    return Group(t)


def memory_html(r: Report) -> str:
    """The HTML page's memory section: the failure, then a table of the lines at the peak."""
    parts: list[str] = []
    lines = failure_lines(r)
    if lines:
        parts.append(f'<pre class="failure">{html.escape(chr(10).join(lines))}</pre>')
    titled = _titled_rows(r)
    if titled is not None:
        body = "".join(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>".format(
                html.escape(_where(row)), *_sizes(row), html.escape(row.get("source") or "")
            )
            for row in titled[1][:30]
        )
        parts.append(
            f"<h2>{html.escape(titled[0])}</h2><table><tr><th>line</th><th>at peak</th>"
            f"<th>at end</th><th>most</th><th>source</th></tr>{body}</table>"
        )
    return "".join(parts)


def memory_charts(r: Report) -> dict[str, tuple[Any, str]]:
    """``"memory"``: GPU bytes per line at the run's peak and at most (plotly, lazily), or the
    sentence that stands in for it."""
    titled = _titled_rows(r)
    if titled is None:
        return {"memory": (None, "GPU memory per line was not tracked (--memory).")}
    import plotly.graph_objects as go

    title, rows = titled
    shown = list(reversed(rows[:20]))
    labels = [f"{_where(row)}  {(row.get('source') or '')[:60]}" for row in shown]
    fig = go.Figure()
    for name, key, color in (
        ("at the peak", "peak_bytes", "#d62728"),
        ("most at once", "max_bytes", "#9ecae1"),
    ):
        fig.add_bar(
            name=name,
            orientation="h",
            marker_color=color,
            y=labels,
            x=[row[key] for row in shown],
            customdata=[fmt.size(row[key]) for row in shown],
            hovertemplate="%{y}<br>%{customdata}<extra>" + name + "</extra>",
        )
    fig.update_layout(
        barmode="group",
        title=title,
        xaxis={"title": {"text": "bytes"}},
        height=max(260, 40 + 36 * len(shown)),
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
        yaxis={"automargin": True},
    )
    return {"memory": (fig, "")}
