"""How far the GPU model is off, per GPU: its predictions of published step times
(benchmarks/published_steps.py, the sources and figures in benchmarks/README.md), as the range
of ``published / predicted`` over each GPU's rows. No torch: a saved report's ranges use it.

A GPU is *validated* when every one of its predictions lies within :data:`WITHIN` of the
published range; any other GPU's predictions are labelled "unvalidated", with the error
measured (:func:`error_of`), or, for a GPU nobody's figures were compared with, the widest
error seen on the GPUs compared of its kind (with tensor cores or without: :func:`widest`):
the model is the same physics on every GPU of a kind, and a GPU it was never checked on is no
better known than the worst one it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from profilers.timing.gpu_model.specs import UnknownGpuError, gpu_spec

WITHIN = (0.8, 1.2)
"""A prediction is good when it lies within 0.8 x the published range's low end and 1.2 x its
high end."""


@dataclass(frozen=True, slots=True)
class Checked:
    """One GPU against published figures: the true step is ``low``-``high`` times the
    predicted one (over ``rows`` figures), ``validated`` when each was within
    :data:`WITHIN`."""

    low: float
    high: float
    rows: int
    validated: bool


CHECKED: dict[str, Checked] = {
    "GTX-1080": Checked(1.2, 2.74, 5, False),
    "GTX-980": Checked(1.56, 2.46, 1, False),
    "K80": Checked(3.24, 5.06, 1, False),
    "A100-80GB": Checked(1.32, 1.41, 2, False),
    "V100": Checked(1.02, 1.42, 4, False),
    "T4": Checked(1.34, 1.45, 2, False),
}
"""GPU (the spec's name) -> its check, as benchmarks/published_steps.py computes it
(``--check`` fails when this differs)."""


@dataclass(frozen=True, slots=True)
class ModelError:
    """The GPU model's error for one GPU: the true GPU time is ``low``-``high`` times the
    predicted one; ``validated`` (see the module), ``rows`` published figures behind it (0:
    none for this GPU: the widest error over all of them)."""

    gpu: str
    low: float
    high: float
    rows: int
    validated: bool
    like: tuple[str, ...] = ()
    """For a GPU not compared (``rows`` 0): the GPUs of its kind whose widest error it takes."""

    def words(self) -> str:
        """``validated against 2 published step times (x0.93-1.12)`` or ``unvalidated: ...``."""
        span = f"x{self.low:.2f}-{self.high:.2f}"
        if self.rows == 0:
            kind = f" ({', '.join(self.like)})" if self.like else ""
            return (
                f"unvalidated: no published step time of the {self.gpu} compared yet; "
                f"true/predicted {span}, the widest on the GPUs of its kind compared{kind}"
            )
        figures = f"{self.rows} published step time{'s' if self.rows != 1 else ''}"
        if self.validated:
            return f"validated against {figures} (true/predicted {span})"
        return f"unvalidated: off by {span} (true/predicted) against {figures}"


def _tensor_cores(gpu: str) -> bool:
    try:
        return bool(gpu_spec(gpu).tensor_flops)
    except UnknownGpuError:
        return True


def widest(tensor_cores: bool) -> tuple[float, float, tuple[str, ...]]:
    """The widest error over the GPUs checked with (or without) tensor cores, and which they
    are; over every GPU checked when none is of that kind (x1.0 when none was checked)."""
    like = {g: c for g, c in CHECKED.items() if _tensor_cores(g) == tensor_cores} or CHECKED
    if not like:
        return (1.0, 1.0, ())
    lows = min(c.low for c in like.values())
    highs = max(c.high for c in like.values())
    return (lows, highs, tuple(like))


def error_of(gpu: str) -> ModelError:
    """The model's error for the spec named ``gpu``."""
    found = CHECKED.get(gpu)
    if found is None:
        low, high, like = widest(_tensor_cores(gpu))
        return ModelError(gpu, low, high, 0, False, like)
    return ModelError(gpu, found.low, found.high, found.rows, found.validated)
