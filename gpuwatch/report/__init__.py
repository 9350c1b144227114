"""Renderers from data to text (rich), JSON and HTML (plotly, imported lazily)."""
