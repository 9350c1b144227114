"""What reading a run's ranks side by side saves: ``gpuwatch report`` on several rank files with
``--jobs 1`` (in one process), ``--jobs 2`` (a pool of two processes) and ``--scheduler`` (a Dask
``LocalCluster`` of two worker processes, started once beforehand, as a cluster that exists).

    python benchmarks/kineto_ranks.py [--rounds 3]

The traces: the rank folders of ../shared/traces/hta-figures (tests/shared_traces.py) given
together, and 8 copies of one of their rank files (``resnet50_w0``, 1.0 MB gzipped) in a temp
folder, never kept. Each command runs in a fresh ``python -m gpuwatch report -q --json``
process (its start-up included); every mode's JSON is checked equal to ``--jobs 1``'s. Needs
``distributed`` (``pip install 'gpuwatch[dask]'``) for the third column.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.shared_traces import SHARED_TRACES as DATA  # noqa: E402

HTA = DATA / "hta-figures"


def _run(paths: list[str], extra: list[str], out: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "gpuwatch", "report", "-q", "--json", str(out)]
    start = time.perf_counter()
    subprocess.run([*command, *extra, *paths], check=True, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    from distributed import LocalCluster

    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
    ):
        copies = Path(tmp, "eight")
        copies.mkdir()
        for i in range(8):
            shutil.copy(HTA / "resnet50_w0/rank-0.pt.trace.json.gz", copies / f"rank-{i}.json.gz")
        cases = {
            f"hta-figures: {len(list(HTA.iterdir()))} rank folders": sorted(
                str(p) for p in HTA.iterdir()
            ),
            "8 copies of resnet50_w0's rank": [str(copies)],
        }
        modes = {
            "--jobs 1": ["--jobs", "1"],
            "--jobs 2": ["--jobs", "2"],
            "LocalCluster(2)": ["--scheduler", cluster.scheduler_address],
        }
        print(f"load average before: {os.getloadavg()[0]:.1f}, cores: {os.cpu_count()}")
        for name, paths in cases.items():
            times: dict[str, list[float]] = {m: [] for m in modes}
            for _ in range(rounds):
                for i, (mode, extra) in enumerate(modes.items()):
                    times[mode].append(_run(paths, extra, Path(tmp, f"{i}.json")))
            first = Path(tmp, "0.json").read_bytes()
            assert all(Path(tmp, f"{i}.json").read_bytes() == first for i in range(len(modes)))
            cells = [f"{statistics.median(t):.2f} s (min {min(t):.2f})" for t in times.values()]
            print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
