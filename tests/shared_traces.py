"""The torch.profiler traces others recorded on real GPUs, which the tests read from the
workplace's shared folder beside the project (``../shared/traces`` from the project root), never
from a copy in the project: their ``SOURCES.md`` gives each file's repository, commit, path and
licence. A test that reads them is skipped, saying why, in a clone made outside the workplace.

- ``resnet50_num_workers_0.pt.trace.json.gz``: Kineto's ResNet-50 sample (CIFAR-10 resized to
  224, batch 32, ``DataLoader(num_workers=0)``, ``schedule(wait=2, warmup=3, active=6)``,
  ``record_shapes``, ``profile_memory``, ``with_stack=True``) on a Tesla V100-DGXS-32GB, steps
  5-10, torch 1.9's spelling (``Operator``/``Kernel``/``Runtime`` categories, ``Call stack``
  strings).
- ``resnet50_num_workers_4.pt.trace.json.gz``: the same script with ``num_workers=4``.
- ``two_ranks/``: two ranks (of 128) of a recommendation model on A100s, 2 steps each, NCCL
  SendRecv kernels, torch 2.x's spelling, no stacks.
- ``event_sync_trace.json.gz``: one step of small ops with ``.item()``, stream, event and device
  synchronisation on an A100 (CUPTI ``cuda_sync`` records).
- ``Falconsai_nsfw_image_detection__1016002.json.gz``: one inference step (``ProfilerStep#6``) of
  a Hugging Face image classifier on an H100 80GB HBM3, ``with_stack=True`` (Python stacks,
  ns-resolution float times, flash attention).
- ``amd_mi250.json.gz`` (ROCm 6.2 on an MI250) and ``cpu_only.json.gz`` (no GPU activity): two
  traces gpuwatch must refuse.
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: ``../shared/traces`` from the project root (this file's folder's parent).
SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"

#: On a test, or a parameter, that reads a file of :data:`SHARED_TRACES`.
needs_shared_traces = pytest.mark.skipif(
    not SHARED_TRACES.is_dir(),
    reason="../shared/traces is absent: a clone made outside the workplace",
)
