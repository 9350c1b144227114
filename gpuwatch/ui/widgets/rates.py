"""Live rates of the profiled script: copies and bytes per second by direction, syncs per second
by cause, and the share of wall time spent in timed ops."""

from __future__ import annotations

from collections import deque
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from gpuwatch import _format as fmt
from profilers import DIRECTIONS

#: Rates are averaged over this many seconds of snapshots.
WINDOW_S = 1.0


class RateWindow:
    """Keeps the last snapshots' totals and gives rates over about :data:`WINDOW_S` seconds."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._points: deque[tuple[float, dict[str, Any]]] = deque()

    def add(self, elapsed_s: float, totals: dict[str, Any]) -> None:
        self._points.append((elapsed_s, totals))
        while len(self._points) > 2 and self._points[-1][0] - self._points[1][0] >= self.window_s:
            self._points.popleft()

    def rates(self) -> dict[str, Any] | None:
        """``{"h2d": (copies/s, bytes/s), ..., "syncs": {cause: per s}, "kernel_pct": float}``."""
        if len(self._points) < 2:
            return None
        (t0, a), (t1, b) = self._points[0], self._points[-1]
        dt = t1 - t0
        if dt <= 0:
            return None
        out: dict[str, Any] = {
            way: (
                (b[way]["count"] - a[way]["count"]) / dt,
                (b[way]["bytes"] - a[way]["bytes"]) / dt,
            )
            for way in DIRECTIONS
        }
        causes = set(a["syncs"]["by_cause"]) | set(b["syncs"]["by_cause"])
        out["syncs"] = {
            c: (b["syncs"]["by_cause"].get(c, 0) - a["syncs"]["by_cause"].get(c, 0)) / dt
            for c in sorted(causes)
        }
        out["syncs_total"] = (b["syncs"]["count"] - a["syncs"]["count"]) / dt
        out["kernel_pct"] = 100.0 * (b["kernel_time_ms"] - a["kernel_time_ms"]) / (dt * 1000.0)
        out["ops"] = (b["ops"] - a["ops"]) / dt
        return out


class RatesPanel(Static):
    """Shows :meth:`RateWindow.rates` and the run's totals."""

    DEFAULT_CSS = """
    RatesPanel { width: 46; height: auto; border: round $primary-darken-2; padding: 0 1; }
    RatesPanel.-narrow { width: 36; }
    """

    counting = "every_op"
    """How the run counts (``"copies"``: no op counts, the fast path of --no-kernel-timing)."""

    def show(
        self, rates: dict[str, Any] | None, totals: dict[str, Any] | None, ended: bool = False
    ) -> None:
        """``ended``: the script has stopped, so every rate is 0 and the panel says so (the last
        second's rates would read as a script still working)."""
        if ended:
            rates = None
        narrow = self.has_class("-narrow")  # no room for copies per second
        t = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, expand=True)
        t.add_column("dir" if narrow else "copies")
        if not narrow:
            t.add_column("/s", justify="right")
        t.add_column("bytes/s", justify="right", no_wrap=True)
        t.add_column("total", justify="right", no_wrap=True)
        for way in DIRECTIONS:
            n, b = rates[way] if rates else (0.0, 0.0)
            total = totals[way]["bytes"] if totals else 0
            row = [way, fmt.rate(b) if b else "-", fmt.size(total)]
            t.add_row(*(row if narrow else [way, f"{n:.0f}", *row[1:]]))
        line = Text()
        if rates:
            line.append(
                f"syncs {rates['syncs_total']:.0f}/s",
                style="bold yellow" if rates["syncs_total"] else "green",
            )
            busy = [f"{c} {v:.0f}" for c, v in rates["syncs"].items() if v]
            if busy:
                line.append(f" ({', '.join(busy)})")
            if self.counting == "every_op":
                ops = f"ops {rates['ops']:.0f}/s, timed ops {rates['kernel_pct']:.0f}% of wall time"
            else:  # the fast path of --no-kernel-timing
                ops = "ops not counted, not timed (--no-kernel-timing)"
            line.append(f"\n{ops}")
        elif ended:
            line.append("the script has ended: nothing moves now", style="dim")
        else:
            line.append("waiting for the script's first counters…", style="dim")
        if totals:
            what = "syncs in all" if ended else "syncs so far"
            line.append(f"\n{what} {totals['syncs']['count']:,}", style="dim")
        self.border_title = "Rates (script ended)" if ended else "Live rates (last second)"
        self.update(Group(t, line))
