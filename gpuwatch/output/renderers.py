"""One registry of renderers for the three documents gpuwatch writes (``profile``: a
:class:`Run`; ``trace``: a torch.profiler trace's ``TraceAnalysis``; ``diff``: a ``DiffDoc``),
each registered by document and kind (``json``, ``html``, ``trace``) with the file endings that
ask for it (``-o PATH``). A renderer formats what it is given and works nothing out; every
output is written the same way (:func:`gpuwatch.output.write.write_document`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

from profilers.finite import dumps_finite

if TYPE_CHECKING:  # NB: a trace's report reads none of a run's modules
    from gpuwatch.analysis.findings import Findings
    from profilers import Report


@dataclass(frozen=True)
class Renderer:
    document: str
    kind: str
    endings: tuple[str, ...]  # asking for this kind with ``-o``, lower case
    render: Callable[[Any], str]


@dataclass(frozen=True)
class Run:
    """A report and its findings (None: not worked out, as in a checkpoint, whose JSON has
    none; an exception: the analysis failed, and each file that shows it says so)."""

    report: Report
    findings: Findings | Exception | None = None


_REGISTRY: dict[tuple[str, str], Renderer] = {}


def register(
    document: str, kind: str, endings: tuple[str, ...] = ()
) -> Callable[[Callable[[Any], str]], Callable[[Any], str]]:
    """Registers the decorated function as ``document``'s ``kind`` renderer; twice fails."""

    def add(render: Callable[[Any], str]) -> Callable[[Any], str]:
        if (document, kind) in _REGISTRY:
            raise ValueError(f"a {kind} renderer of the {document} document is registered twice")
        _REGISTRY[document, kind] = Renderer(document, kind, endings, render)
        return render

    return add


def renderer(document: str, kind: str) -> Renderer:
    """The renderer of ``kind`` for ``document``; ValueError for a kind none writes."""
    if (document, kind) not in _REGISTRY:
        raise ValueError(f"unknown report kind {kind!r}")
    return _REGISTRY[document, kind]


def endings(document: str = "profile") -> tuple[tuple[str, str], ...]:
    """``(ending, kind)`` of ``document``'s renderers, longest first (``.trace.json`` first)."""
    pairs = [(e, r.kind) for r in _REGISTRY.values() if r.document == document for e in r.endings]
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))


def _lazily(module: str, function: str) -> Callable[..., str]:
    """``module.function``, imported when first called (plotly costs ``gpuwatch top`` nothing)."""
    return lambda *args: str(getattr(import_module(f"gpuwatch.output.{module}"), function)(*args))


def _findings(run: Run) -> Findings:
    if isinstance(run.findings, Exception):
        raise run.findings  # the analysis failed: a file that shows it is not written
    if run.findings is None:
        raise ValueError("the run was not analysed")
    return run.findings


@register("profile", "json", (".json",))
def _profile_json(run: Run) -> str:
    """The ``gpuwatch.profile/1`` document, with its findings where they were worked out."""
    if run.findings is None or isinstance(run.findings, Exception):
        return run.report.to_json()
    doc = {**run.report.to_dict(), "findings": run.findings.to_dict()}
    return dumps_finite(doc, indent=1) + "\n"


register("profile", "html", (".html", ".htm"))(
    lambda run: _lazily("html", "render_html")(run.report, _findings(run))
)
register("profile", "trace", (".trace.json",))(
    lambda run: _lazily("trace", "render_trace")(run.report)
)
register("trace", "json")(lambda analysis: analysis.to_json())
register("trace", "html")(_lazily("kineto_html", "render_html"))
register("trace", "trace")(_lazily("kineto_trace", "render_trace"))
register("diff", "json")(lambda diff: dumps_finite(diff.doc, indent=1) + "\n")
register("diff", "html")(_lazily("diff_html", "render_html"))
