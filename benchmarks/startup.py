"""What ``gpuwatch profile`` adds to a script's start and end, side by side with ``python``.

    python benchmarks/startup.py [--runs 8]

A script that only imports torch is run as ``python s.py``, as ``gpuwatch profile -q`` (no
summary) and as ``gpuwatch profile`` (with the summary on stderr), in turns, each ``--runs``
times; the medians and their differences are printed. No GPU stats (``--no-gpu-stats``): NVML's
own start is the driver's, not gpuwatch's.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def median_s(cmd: list[str], runs: int, cwd: str) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=cwd)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    args = parser.parse_args()
    gpuwatch = shutil.which("gpuwatch") or str(Path(sys.executable).with_name("gpuwatch"))
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "s.py").write_text("import torch\n")
        plain = median_s([sys.executable, "s.py"], args.runs, tmp)
        quiet = median_s([gpuwatch, "profile", "-q", "--no-gpu-stats", "s.py"], args.runs, tmp)
        full = median_s([gpuwatch, "profile", "--no-gpu-stats", "s.py"], args.runs, tmp)
    print(f"python s.py                      {plain:.3f} s")
    print(f"gpuwatch profile -q s.py         {quiet:.3f} s  (+{quiet - plain:.3f} s)")
    print(f"gpuwatch profile s.py (summary)  {full:.3f} s  (+{full - plain:.3f} s)")


if __name__ == "__main__":
    main()
