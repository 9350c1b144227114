"""``gpuwatch profile``: the one run path (run.py), the script runner, torchrun ranks, the
notebook magic, budgets, the pytest plugin and the live view (live/)."""
