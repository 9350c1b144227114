"""Each output of a trace's analysis: the ``gpuwatch.kineto/1`` JSON, the HTML page, the
Perfetto/Chrome trace of the idle time by cause."""

from __future__ import annotations

from profilers.kineto.result import TraceAnalysis


def render(analysis: TraceAnalysis, kind: str) -> str:
    if kind == "json":
        return analysis.to_json()
    if kind == "html":
        from gpuwatch.output.kineto_html import render_html

        return render_html(analysis)
    if kind == "trace":
        from gpuwatch.output.kineto_trace import render_trace

        return render_trace(analysis)
    raise ValueError(f"unknown report kind {kind!r}")
