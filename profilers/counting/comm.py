"""Collectives: which ``c10d.*`` (torch.distributed, DDP) or ``_c10d_functional.*`` (FSDP2,
DTensor) op is which collective, and the bytes this rank contributes: the tensor for all_reduce,
broadcast, reduce, send and recv; the input for all_gather and all_to_all; the full input for
reduce_scatter. ``work.wait()`` and ``wait_tensor`` add their wait to the line that called them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch._ops import OpOverload

COMM_NAMESPACES = ("c10d", "_c10d_functional")


@dataclass(frozen=True, slots=True)
class CommRule:
    """As collective ``op`` with the bytes of argument ``arg`` (-1: none, a barrier's tensor is
    not the user's), or, with ``op`` None, as a wait only."""

    op: str | None
    arg: int = 0

    def nbytes(self, args: tuple[object, ...]) -> int:
        if self.op is None or not 0 <= self.arg < len(args):
            return 0
        return _nbytes(args[self.arg])


def _nbytes(x: object) -> int:
    if isinstance(x, torch.Tensor):
        return int(x.nbytes)
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


_C10D = {
    "allreduce_": CommRule("all_reduce", 0),
    "allreduce_coalesced_": CommRule("all_reduce", 0),
    "allgather_": CommRule("all_gather", 1),
    "_allgather_base_": CommRule("all_gather", 1),
    "allgather_coalesced_": CommRule("all_gather", 1),
    "allgather_into_tensor_coalesced_": CommRule("all_gather", 1),
    "reduce_scatter_": CommRule("reduce_scatter", 1),
    "_reduce_scatter_base_": CommRule("reduce_scatter", 1),
    "reduce_scatter_tensor_coalesced_": CommRule("reduce_scatter", 1),
    "broadcast_": CommRule("broadcast", 0),
    "reduce_": CommRule("reduce", 0),
    "alltoall_": CommRule("all_to_all", 1),
    "alltoall_base_": CommRule("all_to_all", 1),
    "gather_": CommRule("gather", 1),
    "scatter_": CommRule("scatter", 1),
    "send": CommRule("send", 0),
    "recv_": CommRule("recv", 0),
    "recv_any_source_": CommRule("recv", 0),
    "barrier": CommRule("barrier", -1),
    "monitored_barrier_": CommRule("barrier", -1),
}
_FUNCTIONAL = {
    "all_reduce": CommRule("all_reduce", 0),
    "all_reduce_": CommRule("all_reduce", 0),
    "all_reduce_coalesced": CommRule("all_reduce", 0),
    "all_reduce_coalesced_": CommRule("all_reduce", 0),
    "all_gather_into_tensor": CommRule("all_gather", 0),
    "all_gather_into_tensor_out": CommRule("all_gather", 0),
    "all_gather_into_tensor_coalesced": CommRule("all_gather", 0),
    "reduce_scatter_tensor": CommRule("reduce_scatter", 0),
    "reduce_scatter_tensor_out": CommRule("reduce_scatter", 0),
    "reduce_scatter_tensor_coalesced": CommRule("reduce_scatter", 0),
    "all_to_all_single": CommRule("all_to_all", 0),
    "broadcast": CommRule("broadcast", 0),
    "broadcast_": CommRule("broadcast", 0),
    "wait_tensor": CommRule(None),
}


def comm_rule(func: OpOverload) -> CommRule | None:
    """The rule of ``func`` (an OpOverload), or None when it is no collective."""
    namespace = getattr(func, "namespace", None)
    if namespace not in COMM_NAMESPACES:
        return None
    table = _C10D if namespace == "c10d" else _FUNCTIONAL
    return table.get(getattr(func, "_opname", ""))
