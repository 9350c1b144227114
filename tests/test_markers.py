"""The markers say what a test does: a test that uses the fake GPU without ``fake_cuda`` fails,
as does one that starts a process without ``slow`` (tests/conftest.py notes both while a test
runs). Checked on a pytest session run in this process with the suite's own two hooks."""

from __future__ import annotations

import pytest

from tests.conftest import FAKE_CUDA_MISSING

#: The inner session's conftest: the suite's hooks, nothing else of it.
_CONFTEST = "from tests.conftest import pytest_runtest_call, pytest_runtest_setup  # noqa: F401\n"
#: The inner session without the plugins that keep state of their own for the session.
_INNER = ("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:textual-snapshot", "-rf")
_INI = "[pytest]\nmarkers =\n    fake_cuda: uses the fake GPU\n    slow: starts processes\n"


@pytest.fixture(scope="module")
def fake_gpus_modules_loaded() -> None:
    """pytester puts sys.modules back as it was when it was set up: torch's modules that the fake
    GPU imports go in before that (a module fixture comes first), or the next test in this
    process would register their op libraries twice."""
    import torch._inductor.test_operators  # noqa: F401


@pytest.mark.fake_cuda
@pytest.mark.usefixtures("fake_gpus_modules_loaded")
@pytest.mark.skipif(FAKE_CUDA_MISSING is not None, reason=str(FAKE_CUDA_MISSING))
def test_a_test_that_enters_the_fake_gpu_without_its_marker_fails(pytester):
    pytester.makeconftest(_CONFTEST)
    pytester.makeini(_INI)
    pytester.makepyfile(
        """
        import pytest
        from profilers.fake_cuda.harness import fake_cuda

        def use_it():  # through a helper: no word of it in the test's own source
            with fake_cuda():
                pass

        def test_unmarked():
            use_it()

        @pytest.mark.fake_cuda
        def test_marked():
            use_it()

        def test_none():
            pass
        """
    )
    result = pytester.runpytest_inprocess(*_INNER)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * AssertionError: it uses the fake GPU (profilers.fake_cuda entered) but is not "
            "marked fake_cuda*",
            "FAILED *::test_unmarked*",
        ]
    )


@pytest.mark.slow
def test_a_test_that_starts_a_process_without_slow_fails(pytester):
    pytester.makeconftest(_CONFTEST)
    pytester.makeini(_INI)
    pytester.makepyfile(
        """
        import subprocess, sys
        import pytest

        def test_unmarked():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        @pytest.mark.slow
        def test_marked():
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        """
    )
    result = pytester.runpytest_inprocess(*_INNER)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * AssertionError: it starts a process (*-c pass) but is not marked slow*",
            "FAILED *::test_unmarked*",
        ]
    )
