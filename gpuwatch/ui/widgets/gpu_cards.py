"""The grid of GPU cards both apps show: laid out for the terminal it has (full cards, or one
line each when they would not leave the rest of the screen its rows), some of them hidden."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

from textual.app import ComposeResult
from textual.containers import Grid

from gpuwatch.ui.sampling import CardLayout, card_layout
from gpuwatch.ui.widgets.gpu_card import GpuCard


class GpuCards(Grid):
    """``count`` cards (``#gpu-0`` ...); ``rows_for_the_rest`` is what the app needs below them."""

    DEFAULT_CSS = """
    GpuCards { height: auto; grid-gutter: 0 1; grid-size: 2; }
    GpuCards.-compact { grid-gutter: 0 2; }
    """

    def __init__(
        self, gpus: int | Sequence[int], rows_for_the_rest: int, *, id: str | None = None
    ) -> None:
        """``gpus``: how many (indices 0..n-1), or which indices (``top --only``)."""
        super().__init__(id=id)
        self.indices = list(range(gpus)) if isinstance(gpus, int) else list(gpus)
        self.count = len(self.indices)
        self.rows_for_the_rest = rows_for_the_rest
        self.compact = False
        """Whether the cards are one line each now."""

    def compose(self) -> ComposeResult:
        for i in self.indices:
            yield GpuCard(i, id=f"gpu-{i}")

    def cards(self) -> Iterator[GpuCard]:
        return iter(self.query(GpuCard))

    def relayout(self, width: int, height: int) -> CardLayout:
        """Fits the shown cards to a ``width`` x ``height`` screen."""
        shown = sum(1 for c in self.cards() if c.display)
        layout = card_layout(width, height, shown, self.rows_for_the_rest)
        self.compact = layout.compact
        self.styles.grid_size_columns = layout.columns
        self.set_class(self.compact, "-compact")
        # NB: more one-line cards than the rows left (64 GPUs at 80x24) scroll inside the grid:
        # taller than the screen, the grid made the screen scroll to the focused process table,
        # which opened the app at GPUs 47-63 with no process row in view.
        self.styles.max_height = max(1, height - self.rows_for_the_rest)
        self.styles.overflow_y = "auto"
        for card in self.cards():
            card.compact = layout.compact
            card.graphs = layout.graphs
        return layout

    def show_only(self, indices: Collection[int] | None) -> bool:
        """Shows the cards of ``indices`` (all with None); True if that changed anything."""
        changed = False
        for card in self.cards():
            show = indices is None or card.index in indices
            if card.display != show:
                card.display = show
                changed = True
        return changed
