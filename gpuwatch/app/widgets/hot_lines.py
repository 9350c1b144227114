"""The hottest user lines of the profiled script, updated in place."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from gpuwatch import _format as fmt

COLUMNS = ("line", "syncs", "bytes", "copies", "kernel", "its bwd", "ops", "source")
"""``its bwd``: the time of the backward of the line's forward ops (also in the .backward() line's
kernel time)."""


class HotLinesTable(DataTable[Text]):
    """Sites from a live snapshot, busiest first; the selected line stays selected."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.sites: list[dict[str, Any]] = []

    def on_mount(self) -> None:
        for name in COLUMNS:
            self.add_column(name, key=name)
        self.border_title = "Hottest lines"

    def show(self, sites: list[dict[str, Any]], site_count: int) -> None:
        selected = self.selected_key
        self.sites = sites
        self.clear()
        for s in sites:
            copies = sum(s[w]["count"] for w in ("h2d", "d2h", "d2d", "p2p"))
            nbytes = sum(s[w]["bytes"] for w in ("h2d", "d2h", "d2d", "p2p"))
            causes = ", ".join(f"{k} {v}" for k, v in s["syncs"]["by_cause"].items())
            self.add_row(
                Text(f"{s['file']}:{s['line']}", style="cyan"),
                Text(
                    str(s["syncs"]["count"]),
                    justify="right",
                    style="yellow" if s["syncs"]["count"] else "",
                ),
                Text(fmt.size(nbytes), justify="right"),
                Text(str(copies), justify="right"),
                Text(fmt.duration_ms(s["kernel_time_ms"]), justify="right"),
                Text(
                    fmt.duration_ms(s["backward"]["kernel_time_ms"]) if s.get("backward") else "-",
                    justify="right",
                ),
                Text(str(s["ops"]), justify="right"),
                Text(s["source"] + (f"   [{causes}]" if causes else "")),
                key=f"{s['file']}:{s['line']}",
            )
        keys = [f"{s['file']}:{s['line']}" for s in sites]
        if selected in keys:
            self.move_cursor(row=keys.index(selected), animate=False)
        self.border_title = f"Hottest lines ({len(sites)} of {site_count})"

    @property
    def selected_key(self) -> str | None:
        if not self.sites or not 0 <= self.cursor_row < len(self.sites):
            return None
        s = self.sites[self.cursor_row]
        return f"{s['file']}:{s['line']}"
