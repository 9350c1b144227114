"""Every private torch hook the profiler depends on resolves on the supported torch: an upgrade
that drops or renames one fails here, loudly, instead of the profiler silently counting less."""

from __future__ import annotations

import pytest
import torch

from profilers import torch_private as private

#: Hooks that only a CUDA build of torch has.
CUDA_BUILD_ONLY = {"torch._C._cuda_getCurrentStream"}


def _expected_missing() -> set[str]:
    """What no torch of the tested range may lack: everything but the CUDA build's own hooks
    on a CPU build. NB: a name an older release spells otherwise (STANDS_IN) may be missing: its
    stand-in is tested where it is used (the fake GPU's device mismatch on every release)."""
    return set() if torch.backends.cuda.is_built() else set(CUDA_BUILD_ONLY)


def test_every_private_hook_resolves():
    assert set(private.MISSING) - set(private.STANDS_IN) == _expected_missing()
    assert set(private.STANDS_IN) <= set(private.WHAT_EACH_GIVES)
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


def _private_uses() -> dict[str, set[str]]:
    """Every private torch name profilers/ spells out (``torch._C.X``, ``from torch._ops import
    Y``, ``torch.utils._pytree.Z``): dotted name -> the files that use it."""
    import ast
    from pathlib import Path

    def dotted(node: ast.AST) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        return ".".join([node.id, *reversed(parts)])

    def private(name: str) -> bool:
        return any(p.startswith("_") and not p.startswith("__") for p in name.split(".")[1:])

    root = Path(private_module_file()).parent
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Attribute) and id(node) not in inner:
                name = dotted(node)
                if name is not None and name.startswith("torch."):
                    names.append(name)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
                names += [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                if private(name):
                    found.setdefault(name, set()).add(str(path.relative_to(root.parent)))
    return found


def private_module_file() -> str:
    return private.__file__


@pytest.mark.fake_cuda
def test_every_private_torch_name_profilers_uses_is_listed():
    listed = set(private.WHAT_EACH_GIVES)
    # A module that is only a way to a listed name (torch._C of torch._C._foo) is not a hook.
    prefixes = {name.rsplit(".", i)[0] for name in listed for i in range(1, name.count("."))}
    unlisted = {
        name: sorted(files)
        for name, files in _private_uses().items()
        if name not in listed and name not in prefixes
    }
    assert unlisted == {}
    # the scan sees them: the fake GPU's device index and the printing's internals, say
    uses = _private_uses()
    assert "profilers/fake_cuda/harness.py" in uses["torch._C._accelerator_setDeviceIndex"]
    assert "profilers/counting/printing.py" in uses["torch._tensor_str._str_intern"]


def test_every_listed_name_resolves():
    assert private.unresolved() - set(private.STANDS_IN) == _expected_missing()
