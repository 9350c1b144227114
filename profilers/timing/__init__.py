"""Where each step's time goes: the host timeline, the GPU's idle time charged to its cause and
line, and the verdict (the "Time" vocabulary of the design).

* :mod:`profilers.timing.timeline`: the records (named, ``__slots__``) and :class:`StepClock`, the
  per-step accumulator the hot path writes into: host time per (step, line, cause), the waits as
  intervals, the profiler's own time apart;
* :mod:`profilers.timing.charge`: the hot path's helpers (an op's time moved to the wait it made);
* :mod:`profilers.timing.idle`: GPU busy/idle from op intervals on a device's streams, and each idle
  interval charged to one cause and one line (pure; exact on synthetic timelines);
* :mod:`profilers.timing.gpu_time`: on a GPU, each timed op's CUDA events placed on the host's
  clock (anchors) and each closed step given its measured busy and idle time as events resolve;
* :mod:`profilers.timing.verdict`: shares and the verdict of a step or the run, and the JSON of
  the report's ``time`` section (no torch: renderers use it on a saved report);
* :mod:`profilers.timing.replay` (records in :mod:`profilers.timing.replay_ops`): a replay of
  one step, host and streams, from its recorded ops (as recorded, or without the profiler);
* :mod:`profilers.timing.whatif`: the saving of each fix (one per hint), ranked;
* :mod:`profilers.timing.gpu_model`: published specs of named GPUs and a roofline of an op's
  time on one (for ``--fake-cuda --gpu NAME``; its ``roofline`` imports torch).

Nothing here imports gpuwatch, the counting core (which rides on it) or the fake GPU, or
prints (ruff.toml).
"""

from __future__ import annotations
