"""When the run breaks, and where the GPU's memory goes: tensor provenance (which line made or
last moved each storage), GPU bytes per line now and at the run's peak, the lines holding the
memory at an out-of-memory error, and the explanation of a device mismatch.

- ``tracker.py``: :class:`MemoryTracker`, fed by the hot path with each op's outputs
  (``profilers/counting/dispatch.py``): storages counted once (views share theirs), freed with
  the last tensor on them (a finalizer on the storage, which torch keeps as long as it lives).
- ``explain.py``: the failing op's tensors, where each came from, and the fix when known.
- ``gpu_errors.py``: a device mismatch's and an out-of-memory error's text as PyTorch writes
  them on a GPU (the fake GPU raises those).
"""
