"""Regenerates the pictures in the README: ``python .ci/screenshots.py [OUT_DIR]``.

* ``top.svg``: ``gpuwatch top --demo`` at 160x44, taken by the app itself (Textual's SVG
  export) from the FakeBackend with a frozen clock, so the picture only changes with the code.
* ``top-compact.svg``: the same with 8 GPUs at 100x30 (compact cards).
* ``live.svg``: ``gpuwatch profile --live --demo --fake-cuda demos/fake_gpu_walkthrough.py``
  mid-run.
* ``profile-summary.txt`` and ``profile-report.png``: ``gpuwatch profile`` of
  ``demos/fake_gpu_walkthrough.py``, its terminal summary and its HTML report as headless
  Chromium shows it (needs Debian's chromium).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gpuwatch.monitor.nvml import FakeBackend, Sampler
from gpuwatch.ui.top.app import TopApp


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
            app.record_snapshot(inline.snapshot())
        app.draw_snapshot()
        await pilot.pause(0.3)
        app.sub_title = app.sub_title.replace(" · PAUSED", "")
        await pilot.pause(0.1)
        return Path(app.save_screenshot(filename=name, path=str(out)))


async def _live(out: Path) -> Path:
    from gpuwatch.profile.live.session import ChildSession
    from gpuwatch.profile.run import ProfileOptions
    from gpuwatch.profile.runner import Target
    from gpuwatch.ui.live.app import LiveApp

    root = Path(__file__).resolve().parent.parent
    session = ChildSession(
        Target("demos/fake_gpu_walkthrough.py", ["--steps", "400"]),
        ProfileOptions(fake_cuda=1),
        interval_s=0.2,
        cwd=str(root),
    )
    app = LiveApp(session, Sampler(FakeBackend(gpu_count=2), interval_s=0.5), gpu_interval_s=0.5)
    async with app.run_test(size=(160, 44)) as pilot:
        while app.snapshots_seen < 12:
            await pilot.pause(0.1)
        await pilot.pause(0.3)
        path = Path(app.save_screenshot(filename="live.svg", path=str(out)))
        session.stop()
        return path


def _profile(out: Path) -> list[Path]:
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "report.html"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuwatch",
                "profile",
                "--html",
                str(html),
                "--fake-cuda",
                "demos/fake_gpu_walkthrough.py",
                "--steps",
                "50",
            ],
            cwd=root,
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "110"},
            check=True,
        )
        summary = out / "profile-summary.txt"
        lines = [
            line.rstrip()
            for line in done.stderr.splitlines()
            if not line.startswith("gpuwatch: wrote")
        ]
        summary.write_text("\n".join(lines).rstrip() + "\n")
        png = out / "profile-report.png"
        subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={tmp}/chromium",
                "--hide-scrollbars",
                "--window-size=1300,1900",
                "--virtual-time-budget=8000",
                f"--screenshot={png}",
                html.as_uri(),
            ],
            capture_output=True,
            check=True,
            timeout=120,
        )
    return [summary, png]


def main(out_dir: str = str(Path(__file__).parent / "screenshots")) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for path in (
        asyncio.run(_top(out, "top.svg", 2, (160, 44))),
        asyncio.run(_top(out, "top-compact.svg", 8, (100, 30))),
        asyncio.run(_live(out)),
        *_profile(out),
    ):
        print(path)


if __name__ == "__main__":
    main(*sys.argv[1:])
