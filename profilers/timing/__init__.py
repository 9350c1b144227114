"""Where each step's time goes: the host timeline, the GPU's idle time charged to its cause and
line, and the verdict (the "Time" vocabulary of the design).

The host's side is :mod:`~profilers.timing.timeline` (the step clock the hot path writes into),
the GPU's :mod:`~profilers.timing.idle` and :mod:`~profilers.timing.gpu_time`, the verdict
:mod:`~profilers.timing.verdict` (no torch: renderers use it on a saved report); a step is
replayed by :mod:`~profilers.timing.replay`, each fix's saving ranked by
:mod:`~profilers.timing.whatif`, and :mod:`~profilers.timing.gpu_model` predicts a named GPU's
op times (``--fake-cuda --gpu NAME``; its ``roofline`` imports torch).

Nothing here imports gpuwatch, the counting core (which rides on it) or the fake GPU, or
prints (ruff.toml).
"""

from __future__ import annotations
