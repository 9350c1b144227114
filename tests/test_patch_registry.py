"""One registry of what the profiler, the fake GPU and the budget guards change outside themselves
(profilers/registry.py): every change documented (profilers/patch_list.py), one undo that puts
each attribute back whatever order its patchers leave in, our own threads marked by class."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import profilers
from profilers import patch_list, registry

from .conftest import FAKE_CUDA_MISSING


def _changes() -> set[tuple[str, str]]:
    return {(r.by, r.target) for r in registry.records()}


@pytest.mark.fake_cuda
def test_every_change_of_ours_is_documented():
    seen: dict[str, set[tuple[str, str]]] = {}
    with profilers.profile(count_ops=True):
        seen["profile"] = _changes()
        assert "global: profilers.registry.ACTIVE" in registry.installed()
    with profilers.profile(kernel_timing=False):
        seen["fast path"] = _changes()
    with profilers.no_syncs():
        seen["guard"] = _changes()
    if FAKE_CUDA_MISSING is None:
        from profilers.fake_cuda.harness import fake_cuda

        with fake_cuda(2), profilers.profile():
            seen["fake cuda"] = _changes()
            assert "global: profilers.fake_cuda.harness.HARNESS" in registry.installed()
    undocumented = {
        (where, by, target)
        for where, changes in seen.items()
        for by, target in changes
        if patch_list.find(by, target) is None
    }
    assert undocumented == set()
    # what each run changes, by who (the fast path's kernels are its own)
    assert ("profiler", "torch.cuda.synchronize") in seen["profile"]
    assert ("profiler", "torch.library kernels at PreDispatch") in seen["fast path"]
    assert ("profiler", "torch.library kernels at PreDispatch") not in seen["profile"]
    assert {by for by, _ in seen["guard"]} == {"guard"}
    if "fake cuda" in seen:
        assert ("fake_cuda", "torch.cuda.is_available") in seen["fake cuda"]
        assert len(seen["fake cuda"]) > 80  # the fake GPU's ~85 and the profile's ~30
    assert registry.installed() == []


@pytest.mark.fake_cuda
def test_each_entry_says_what_why_and_what_is_lost():
    for entry in patch_list.ENTRIES:
        assert entry.by in ("profiler", "fake_cuda", "guard"), entry
        assert entry.names and entry.changes and entry.why and entry.lost, entry


def _orig() -> str:
    return "original"


@pytest.mark.parametrize("lower_leaves_first", [True, False])
def test_two_patches_of_one_attribute_undo_in_either_order(lower_leaves_first):
    owner = SimpleNamespace(f=_orig)
    with ExitStack() as lower, ExitStack() as upper:
        registry.patch("guard", lower, owner, "f", "guard's")
        registry.patch("profiler", upper, owner, "f", "profile's")
        assert owner.f == "profile's"
        assert registry.installed() == [
            "guard: types.SimpleNamespace().f",
            "profiler: types.SimpleNamespace().f",
        ]
        first, second = (lower, upper) if lower_leaves_first else (upper, lower)
        first.close()
        # NB: the guard leaving under the profile must not put its original back over the
        # profile's patch, nor leave its own wrapper behind once the profile leaves
        assert owner.f == ("profile's" if lower_leaves_first else "guard's")
        second.close()
    assert owner.f is _orig and registry.installed() == []


@pytest.mark.fake_cuda
def test_an_inherited_attribute_shows_through_again():
    class Base:
        def f(self) -> str:
            return "base"

    class Child(Base):
        pass

    with ExitStack() as stack:
        registry.patch("fake_cuda", stack, Child, "f", lambda self: "patched")
        assert Child().f() == "patched" and Base().f() == "base"
    assert "f" not in vars(Child) and Child().f() == "base"


def test_someone_elses_patch_over_ours_is_left_alone():
    owner = SimpleNamespace(f=_orig)
    with ExitStack() as stack:
        registry.patch("profiler", stack, owner, "f", "ours")
        owner.f = "theirs"  # the script patched over us and keeps its patch
    assert owner.f == "theirs" and registry.installed() == []


@pytest.mark.fake_cuda
def test_hide_and_switch_undo_with_the_stack():
    owner = SimpleNamespace(g=1)
    undone: list[str] = []
    with ExitStack() as stack:
        registry.hide("fake_cuda", stack, owner, "g")
        registry.switch("profiler", stack, "a hook", lambda: undone.append("hook"))
        assert not hasattr(owner, "g")
        assert registry.installed() == ["fake_cuda: types.SimpleNamespace().g", "profiler: a hook"]
    assert owner.g == 1 and undone == ["hook"] and registry.installed() == []


def test_our_threads_are_not_profiled_and_the_scripts_are():
    modes: dict[str, int] = {}

    def look(name: str) -> None:
        modes[name] = len(_get_current_dispatch_mode_stack())

    with profilers.profile(count_ops=True):
        for thread in (
            registry.OwnThread(target=look, args=("ours",)),
            threading.Thread(target=look, args=("script's",), name="gpuwatch-named-like-ours"),
        ):
            thread.start()
            thread.join()
    # NB: the name no longer decides: a script's thread named "gpuwatch..." is profiled
    assert modes == {"ours": 0, "script's": 1}


def test_a_run_does_not_wait_for_our_threads():
    from gpuwatch.profile.runner import wait_for_threads

    release = threading.Event()
    ours = registry.OwnThread(target=release.wait, daemon=False)
    ours.start()
    try:
        wait_for_threads()  # returns with our non-daemon thread still waiting
        assert ours.is_alive() and registry.is_own(ours)
    finally:
        release.set()
        ours.join()
    assert ours not in registry.own_threads_alive()


def test_the_autouse_check_sees_what_a_test_leaves_on():
    from .conftest import _ours_on

    stack = ExitStack()
    mode = profilers.profile(count_ops=True)
    before = _ours_on()
    mode.__enter__()
    try:
        left = _ours_on() - before
        assert "global: profilers.registry.ACTIVE" in left
        assert "profiler: torch.cuda.synchronize" in left
        assert "dispatch mode: ProfilerMode" in left
    finally:
        mode.__exit__(None, None, None)
        stack.close()
    fast = profilers.profile(kernel_timing=False)
    with fast:
        assert "dispatch key: PreDispatch included on this thread" in _ours_on()
    assert _ours_on() == before
    assert torch.ones(1).add(1).item() == 2.0  # torch works as before
