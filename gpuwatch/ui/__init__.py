"""The Textual apps and what they share: ``top/`` (``gpuwatch top``: GPU cards and processes),
``live/`` (``gpuwatch profile --live``: the run's counters beside the GPU stats), ``widgets/``
and ``screens/`` (one per file, imported on first use), ``sampling.py`` (NVML on a daemon
thread) and ``signals.py`` (SIGTERM/SIGHUP close an app as q does). ``top/`` loads nothing of
the profile half (its ruff.toml; tests/test_layers.py checks what it loads round about)."""
