"""Textual apps: ``gpuwatch top`` (and, later, the live profile view)."""
