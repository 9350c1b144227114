"""The report's vocabulary: copy directions and sync causes (no torch here: the report data and
its renderers import this without paying for torch)."""

from __future__ import annotations

# Sync causes (the keys of ``syncs.by_cause`` in the report).
ITEM = "item"
COPY_TO_HOST = "copy_to_host"
COPY_TO_DEVICE = "copy_to_device"
DATA_DEPENDENT = "data_dependent_shape"
SYNCHRONIZE = "synchronize"
OTHER = "other"
CAUSES = (ITEM, COPY_TO_HOST, COPY_TO_DEVICE, DATA_DEPENDENT, SYNCHRONIZE, OTHER)
DIRECTIONS = ("h2d", "d2h", "d2d", "p2p")
