"""The script's progress bar as it redraws itself: the text after its last carriage return
(tqdm), on one line under the log, hidden while there is none."""

from __future__ import annotations

from textual.widgets import Static


class ProgressLine(Static):
    DEFAULT_CSS = "ProgressLine { height: 1; padding: 0 1; color: $text-muted; display: none; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, markup=False)
        self.text = ""
        """What it shows now ("" when hidden)."""

    def show(self, text: str) -> None:
        if text != self.text:  # repaint only on change
            self.text = text
            self.update(text)
            self.display = bool(text)
