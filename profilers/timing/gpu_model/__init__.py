"""A model of a named GPU, for machines without one (``--fake-cuda --gpu NAME``).

* :mod:`~profilers.timing.gpu_model.specs`: published figures per GPU (:class:`GpuSpec`),
  looked up forgivingly by name (:func:`gpu_spec`); no torch;
* :mod:`~profilers.timing.gpu_model.roofline`: an op's predicted time (FLOPs from torch's own
  formulas, bytes from its tensors, a roofline over the spec), a copy's over the bus, and
  whether a peak of memory fits (imports torch);
* :mod:`~profilers.timing.gpu_model.validation`: how far the model is off per GPU, against
  published step times (benchmarks/published_steps.py); no torch.
"""

from __future__ import annotations

from profilers.timing.gpu_model.specs import SPECS, GpuSpec, UnknownGpuError, gpu_spec, known_gpus

__all__ = ["SPECS", "GpuSpec", "UnknownGpuError", "gpu_spec", "known_gpus"]
