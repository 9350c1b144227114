"""gpuwatch's pytest plugin (entry point ``pytest11``: installing gpuwatch is enough).

    @pytest.mark.gpuwatch_budget(syncs=0)            # the test body must never sync
    def test_train_step(model, batch):
        train_step(model, batch)

    def test_eval(gpuwatch_budget):                  # or a block of it
        with gpuwatch_budget(syncs=1, d2h=1):
            evaluate(model)

    pytest --gpuwatch-fake-cuda                      # on a machine with no GPU

The marker takes what :func:`profilers.budget` takes; a test over budget fails with
:class:`profilers.BudgetExceeded`, naming each line that spent it. The guard counts the test's
own thread (and the threads and backward passes it starts): parallel tests never see each
other's syncs.

``--gpuwatch-fake-cuda`` (or ``gpuwatch_fake_cuda = true`` in the ini file): where torch sees no
GPU, the guarded tests and their fixtures run on a fake one, so the guard runs in CPU-only CI.

NB: imports nothing heavy until a test asks: every pytest run in an environment with gpuwatch
installed loads this module.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import pytest

MARKER = "gpuwatch_budget"
FIXTURE = "gpuwatch_budget"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuwatch", "gpuwatch budgets")
    group.addoption(
        "--gpuwatch-fake-cuda",
        action="store_true",
        default=None,
        help="run tests that use the gpuwatch_budget marker or fixture on a fake GPU when torch "
        "sees none (copies and syncs counted as on a real one)",
    )
    parser.addini("gpuwatch_fake_cuda", type="bool", default=False, help="as --gpuwatch-fake-cuda")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(spec=None, **limits): the test body must stay within this gpuwatch budget "
        "(profilers.budget), e.g. syncs=0, h2d_pageable=0 or 'syncs<=1,d2h=0'",
    )
    if _fake_cuda(config):
        # NB: autograd sizes its device threads at the first backward of the process, so the
        # fake GPU's device guard goes in before any test runs one (profilers/fake_cuda/harness.py).
        from profilers.fake_cuda.harness import FakeCudaUnavailable, install_guard

        try:
            install_guard()
        except FakeCudaUnavailable as exc:
            raise pytest.UsageError(f"--gpuwatch-fake-cuda: {exc}") from None


def _fake_cuda(config: pytest.Config) -> bool:
    """Whether guarded tests run on a fake GPU: asked for, and torch sees no real one."""
    asked = config.getoption("--gpuwatch-fake-cuda")
    if asked is None:
        asked = bool(config.getini("gpuwatch_fake_cuda"))
    if not asked:
        return False
    import torch

    return not torch.cuda.is_available()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """The fake GPU (when on) around the whole test, its fixtures included."""
    marked = item.get_closest_marker(MARKER) is not None
    if not (marked or FIXTURE in getattr(item, "fixturenames", ())) or not _fake_cuda(item.config):
        return (yield)
    from profilers.fake_cuda.harness import FakeCuda

    with FakeCuda():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """The marker's budget around the test body."""
    __tracebackhide__ = True
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return (yield)
    import profilers

    try:
        guard = profilers.budget(*marker.args, **marker.kwargs)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER}: {exc}") from None
    guard.where = item.nodeid
    with guard:
        return (yield)


@pytest.fixture(name=FIXTURE)
def gpuwatch_budget_fixture() -> Callable[..., object]:
    """``profilers.budget``: ``with gpuwatch_budget(syncs=0): ...`` guards a block of a test
    (on a fake GPU under ``--gpuwatch-fake-cuda`` where there is no real one)."""
    import profilers

    factory: Callable[..., object] = profilers.budget
    return factory
