"""``torch.nn.parallel.comm`` (and ``torch.cuda.comm``) on fake GPUs: ``nn.DataParallel``'s
scatter, broadcast, gather and reduce-add are C++ functions of a CUDA build (``torch._C._scatter``
and friends, absent from a CPU-only torch, and on a CUDA build they would ask the real driver).
Here each is the copies it makes on a GPU, written as the ops that make them: what moves where,
with its shapes and dtypes, as ``torch/csrc/cuda/comm.cpp`` lays it out. The profiler's own comm
wrapper (``_patches.wrap_comm``) sits above these and counts each call's copies once."""

from __future__ import annotations

from collections.abc import Sequence

import torch

_Device = torch.device | str | int
"""A device as comm's functions take one (an int: that GPU; -1: the host)."""


def _device(d: _Device) -> torch.device:
    if isinstance(d, torch.device):
        return d
    if isinstance(d, int):
        return torch.device("cpu") if d == -1 else torch.device("cuda", d)
    return torch.device(d)


def _to(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    # NB: comm.cpp returns the source tensor itself on its own device (no copy there).
    return t if t.device == device else t.to(device)


def broadcast(
    tensor: torch.Tensor,
    devices: Sequence[_Device] | None = None,
    *,
    out: Sequence[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, ...]:
    if out is not None:
        for o in out:
            o.copy_(tensor)
        return tuple(out)
    assert devices is not None, "broadcast needs devices or out"
    return tuple(_to(tensor, _device(d)) for d in devices)


def broadcast_coalesced(
    tensors: Sequence[torch.Tensor], devices: Sequence[_Device], buffer_size: int = 10485760
) -> list[tuple[torch.Tensor, ...]]:
    return [tuple(_to(t, _device(d)) for t in tensors) for d in devices]


def reduce_add(inputs: Sequence[torch.Tensor], destination: _Device | None = None) -> torch.Tensor:
    dest = _device(destination if destination is not None else torch.cuda.current_device())
    root = next((t for t in inputs if t.device == dest), None)
    total = root.clone() if root is not None else inputs[0].to(dest)
    for t in inputs:
        if t is not root and not (root is None and t is inputs[0]):
            total = total + _to(t, dest)
    return total


def reduce_add_coalesced(
    inputs: Sequence[Sequence[torch.Tensor]],
    destination: _Device | None = None,
    buffer_size: int = 10485760,
) -> tuple[torch.Tensor, ...]:
    return tuple(
        reduce_add([group[i] for group in inputs], destination) for i in range(len(inputs[0]))
    )


def scatter(
    tensor: torch.Tensor,
    devices: Sequence[_Device] | None = None,
    chunk_sizes: Sequence[int] | None = None,
    dim: int = 0,
    streams: object = None,
    *,
    out: Sequence[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, ...]:
    if out is not None:
        sizes = [o.size(dim) for o in out]
        for o, chunk in zip(out, torch.split(tensor, sizes, dim), strict=True):
            o.copy_(chunk)
        return tuple(out)
    assert devices is not None, "scatter needs devices or out"
    targets = [_device(d) for d in devices]
    if chunk_sizes is not None:
        chunks = torch.split(tensor, list(chunk_sizes), dim)
    else:
        chunks = tensor.chunk(len(targets), dim)
    return tuple(_to(c.contiguous(), d) for c, d in zip(chunks, targets, strict=False))


def gather(
    tensors: Sequence[torch.Tensor],
    dim: int = 0,
    destination: _Device | None = None,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    if out is not None:
        return torch.cat([_to(t, out.device) for t in tensors], dim, out=out)
    dest = _device(destination if destination is not None else torch.cuda.current_device())
    return torch.cat([_to(t, dest) for t in tensors], dim)


FUNCTIONS = {
    fn.__name__: fn
    for fn in (broadcast, broadcast_coalesced, reduce_add, reduce_add_coalesced, scatter, gather)
}
"""What the harness puts in place of ``torch.nn.parallel.comm``'s and ``torch.cuda.comm``'s."""
