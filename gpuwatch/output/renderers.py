"""One renderer per kind of report file, each with the file endings that ask for it (``-o
PATH``): they format a report and its :class:`~gpuwatch.output.analysis.Findings`, and work
nothing out of their own."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from gpuwatch.output.analysis import Findings
from profilers import Report


@dataclass(frozen=True)
class Renderer(ABC):
    """How one kind of file is written from a report."""

    kind: ClassVar[str]
    """``json``, ``html`` or ``trace``: what ``--json``/``--html``/``--trace`` ask for."""
    endings: ClassVar[tuple[str, ...]]
    """The file endings that ask for this kind with ``-o``, lower case."""
    needs_findings: ClassVar[bool] = False
    """Whether it shows the analysis (a file of the report's data alone is written even where
    the analysis fails)."""

    @abstractmethod
    def render(self, report: Report, findings: Findings | None) -> str:
        """The file's text (``findings``: the report's analysis, None where it failed: only a
        renderer that does not need it is asked then)."""


@dataclass(frozen=True)
class JsonRenderer(Renderer):
    """The ``gpuwatch.profile/1`` document: the report itself (its findings are worked out again
    from it by whoever reads it, the same way)."""

    kind = "json"
    endings = (".json",)

    def render(self, report: Report, findings: Findings | None) -> str:
        return report.to_json()


@dataclass(frozen=True)
class HtmlRenderer(Renderer):
    """A self-contained page: the summary's sections and plotly charts, opening offline."""

    kind = "html"
    endings = (".html", ".htm")
    needs_findings = True

    def render(self, report: Report, findings: Findings | None) -> str:
        from gpuwatch.output.html import render_html

        return render_html(report, findings)


@dataclass(frozen=True)
class TraceRenderer(Renderer):
    """A Chrome trace (Perfetto opens it): copies, syncs, steps and GPU samples over time."""

    kind = "trace"
    endings = (".trace.json",)

    def render(self, report: Report, findings: Findings | None) -> str:
        from gpuwatch.output.trace import render_trace

        return render_trace(report)


RENDERERS: tuple[Renderer, ...] = (JsonRenderer(), HtmlRenderer(), TraceRenderer())


def renderer(kind: str) -> Renderer:
    """The renderer of ``kind``; ValueError for a kind none writes."""
    for r in RENDERERS:
        if r.kind == kind:
            return r
    raise ValueError(f"unknown report kind {kind!r}")


def endings() -> tuple[tuple[str, str], ...]:
    """``(ending, kind)`` of every renderer, the longest ending first (``.trace.json`` is
    checked before ``.json``)."""
    pairs = [(ending, r.kind) for r in RENDERERS for ending in r.endings]
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))
