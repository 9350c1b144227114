"""Compares gpuwatch reports of the same script run on a real GPU and under --fake-cuda:
``python .ci/compare_fake_cuda.py REAL.json FAKE.json [REAL2.json FAKE2.json ...]``.

Prints both totals side by side (copies by direction with bytes, pageable and non_blocking; syncs
by cause) and the lines where they differ; exit code 1 when any total differs."""

from __future__ import annotations

import json
import sys


def totals(path: str) -> dict[str, object]:
    doc = json.load(open(path))
    t = doc["totals"]
    out: dict[str, object] = {}
    for way in ("h2d", "d2h", "d2d", "p2p"):
        for k in ("count", "bytes", "pageable", "non_blocking"):
            out[f"{way}.{k}"] = t[way][k]
    out["syncs"] = t["syncs"]["count"]
    for cause, n in sorted(t["syncs"]["by_cause"].items()):
        out[f"syncs.{cause}"] = n
    return out


def main(argv: list[str]) -> int:
    if len(argv) % 2 or not argv:
        print(__doc__, file=sys.stderr)
        return 2
    differ = False
    for real_path, fake_path in zip(argv[::2], argv[1::2], strict=True):
        real, fake = totals(real_path), totals(fake_path)
        print(f"{real_path} (real GPU) vs {fake_path} (--fake-cuda)")
        for key in sorted(set(real) | set(fake)):
            a, b = real.get(key, 0), fake.get(key, 0)
            mark = "" if a == b else "   <-- differs"
            differ |= a != b
            print(f"  {key:28} {a!s:>12} {b!s:>12}{mark}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
