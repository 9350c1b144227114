"""Regenerates the pictures in the README: ``python .ci/screenshots.py [OUT_DIR]``.

* ``top.svg``: ``gpuwatch top --demo`` at 160x44, taken by the app itself (Textual's SVG
  export) from the FakeBackend with a frozen clock, so the picture only changes with the code.
* ``top-compact.svg``: the same with 8 GPUs at 100x30 (compact cards).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from gpuwatch.app.top import TopApp
from gpuwatch.nvml import FakeBackend, Sampler


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def _top(out: Path, name: str, gpus: int, size: tuple[int, int]) -> Path:
    clock = _Clock()
    app = TopApp(FakeBackend(gpu_count=gpus, clock=clock), interval_s=1.0)
    inline = Sampler(app.backend, background_pcie=False)
    async with app.run_test(size=size) as pilot:
        app.paused = True
        # Two minutes of history, one simulated second per sample.
        for _ in range(120):
            clock.t += 1.0
            app.show_snapshot(inline.snapshot())
        await pilot.pause(0.3)
        app.sub_title = app.sub_title.replace(" · PAUSED", "")
        await pilot.pause(0.1)
        return Path(app.save_screenshot(filename=name, path=str(out)))


def main(out_dir: str = str(Path(__file__).parent / "screenshots")) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for path in (
        asyncio.run(_top(out, "top.svg", 2, (160, 44))),
        asyncio.run(_top(out, "top-compact.svg", 8, (100, 30))),
    ):
        print(path)


if __name__ == "__main__":
    main(*sys.argv[1:])
