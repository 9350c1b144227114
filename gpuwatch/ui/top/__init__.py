"""``gpuwatch top``'s app (app.py): no torch, no profiler, nothing of the profile half."""
