"""The Textual apps (``top/``, ``live/``) and what they share. ``top/`` loads nothing of the
profile half (its ruff.toml; tests/test_layers.py checks what it loads round about)."""
