"""What a run gives the user: one analysis of its report (``analysis.py``: ``Findings``), the
renderers that format it to text (rich), JSON, HTML (plotly, imported lazily) and traces, and
the writing and reading of those files. The report itself, the data, is ``profilers.Report``."""
