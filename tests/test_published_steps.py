"""The GPU model against published step times (benchmarks/published_steps.py): the error
table the predictions' ranges use (profilers/timing/gpu_model/validation.py) and the one
benchmarks/README.md prints are what the model computes today, so neither can go stale when
the model changes. Meta tensors: about 20 s of CPU for the 15 published figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import published_steps as bench
from profilers.timing.gpu_model import gpu_spec
from profilers.timing.gpu_model.specs import GIB
from profilers.timing.gpu_model.validation import CHECKED, WITHIN, error_of

README = Path(__file__).resolve().parent.parent / "benchmarks" / "README.md"

# NB: 15-20 s of CPU in one fixture: the full suite's, not the fast tier's
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rows() -> list[dict[str, object]]:
    return bench.compare()


def test_the_validation_table_is_what_the_model_predicts_today(rows):
    assert bench.as_table(rows) == CHECKED


def test_the_readme_prints_the_table_the_model_gives(rows):
    assert bench.render_markdown(rows) in README.read_text()


def test_the_seeds_shi_et_al_figures_are_there_and_a_k80_is_one_die(rows):
    shi = {(r["gpu"], tuple(r["published_s"])) for r in rows if "Shi" in str(r["source"])}
    assert shi == {("GTX-1080", (0.136, 0.227)), ("GTX-980", (0.207, 0.327)),
                   ("K80", (0.449, 0.702))}  # fmt: skip
    k80 = gpu_spec("K80")  # a single-process job runs on one of the board's two GK210
    assert (k80.memory_bytes, k80.memory_bytes_per_s, k80.sms) == (12 * GIB, 240e9, 13)


def test_within_means_the_published_ranges_0_8_to_1_2_and_the_factors_are_published_over_predicted(
    rows,
):
    assert WITHIN == (0.8, 1.2)
    for r in rows:
        lo, hi = r["published_s"]
        p = r["predicted_s"]
        assert r["within"] == (0.8 * lo <= p <= 1.2 * hi)
        assert r["factor"] == [round(lo / p, 2), round(hi / p, 2)]


def test_a_gpu_is_validated_only_if_every_figure_was_within(rows):
    for gpu, checked in CHECKED.items():
        mine = [r for r in rows if r["gpu"] == gpu]
        assert checked.validated == all(r["within"] for r in mine)
        assert error_of(gpu).validated == checked.validated


def test_check_fails_when_the_table_is_stale(monkeypatch, capsys):
    from profilers.timing.gpu_model import validation

    monkeypatch.setattr(bench, "PUBLISHED", bench.PUBLISHED[:1])
    monkeypatch.setattr(validation, "CHECKED", {})
    assert bench.main(["--check"]) == 1
    assert "validation.py's CHECKED differs" in capsys.readouterr().err
