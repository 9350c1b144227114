"""Every private torch hook the profiler depends on resolves on the supported torch: an upgrade
that drops or renames one fails here, loudly, instead of the profiler silently counting less."""

from __future__ import annotations

import torch

from profilers import torch_private as private

#: Hooks that only a CUDA build of torch has.
CUDA_BUILD_ONLY = {"torch._C._cuda_getCurrentStream"}


def test_every_private_hook_resolves():
    expected_missing = set() if torch.backends.cuda.is_built() else CUDA_BUILD_ONLY
    assert set(private.MISSING) == expected_missing
    assert set(private.MISSING) <= set(private.WHAT_EACH_GIVES)  # each loss is documented


def test_the_hooks_behave_as_the_profiler_assumes():
    assert private.BACKWARD_NODES
    x = torch.randn(3, requires_grad=True)
    before = private.sequence_nr()  # type: ignore[misc]
    y = x.exp()  # makes one autograd node, numbered from this thread's counter
    assert y.grad_fn is not None and y.grad_fn._sequence_nr() == before
    assert private.current_node() is None  # no backward under way
    assert private.OP_OVERLOAD_HAS_OP and callable(torch.ops.aten.add.Tensor._op)
    assert private.set_eval_frame(None) is None  # no torch.compile frame callback set here
    assert callable(private.tensor_str._str)
