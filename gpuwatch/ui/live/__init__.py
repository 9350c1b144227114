"""``gpuwatch profile --live``'s app (app.py) and its GPU-memory-by-line table: they draw the
run that gpuwatch/profile/live/model.py keeps."""
