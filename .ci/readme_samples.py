"""The README's two sample outputs, made again from the commands they show:
``python .ci/readme_samples.py`` rewrites them in README.md (``--check``: exit 1 where the
README's first sample, its times aside, is not what the command prints now).

Sample A is ``gpuwatch profile --fake-cuda demos/fake_gpu_walkthrough.py --steps 50`` up to its
tables; sample B the prediction lines and the first three ranked fixes of the same run with
``--gpu H100 --what-if``. Both at 100 columns, as the README shows them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DEMO = ["demos/fake_gpu_walkthrough.py", "--steps", "50"]
TABLES = (
    "[... then the copies and syncs tables, GPU memory by line, the top lines by bytes, syncs ...]"
)
TIME = re.compile(r"\b\d[\d.,]* (ms|s|µs)\b")


def _run(*options: str) -> list[str]:
    env = {**os.environ, "COLUMNS": "100"}
    cmd = [sys.executable, "-m", "gpuwatch", "profile", "--fake-cuda", *options, *DEMO]
    # NB: the script's own output on stdout, gpuwatch's summary on stderr, as a terminal shows
    done = subprocess.run(
        cmd,
        cwd=ROOT,
        env=env,
        stderr=subprocess.STDOUT,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return [line.rstrip() for line in done.stdout.splitlines()]


def sample_a() -> list[str]:
    lines = _run()
    end = next(i for i, line in enumerate(lines) if line.startswith("Copies"))
    return [*lines[:end], TABLES]


def sample_b() -> list[str]:
    lines = _run("--gpu", "H100", "--what-if")
    first = next(i for i, line in enumerate(lines) if "PREDICTED for" in line)
    model = next(i for i, line in enumerate(lines) if "GPU model:" in line)
    what = next(i for i, line in enumerate(lines) if line.startswith("What if (PREDICTED"))
    return [*lines[first : model + 2], "[...]", *lines[what : what + 5], "  [...]"]


def _plain(lines: list[str]) -> list[str]:
    return [" ".join(TIME.sub("T", line).split()) for line in lines]


def _blocks(text: str) -> list[tuple[int, int]]:
    """The (start, end) line numbers of the README's plain ``` blocks (not ```bash)."""
    lines = text.splitlines()
    fences = [i for i, line in enumerate(lines) if line.startswith("```")]
    pairs = list(zip(fences[::2], fences[1::2], strict=False))
    return [(a, b) for a, b in pairs if lines[a] == "```"]


def main(argv: list[str]) -> int:
    text = README.read_text()
    lines = text.splitlines()
    (a0, a1), (b0, b1) = _blocks(text)[:2]
    fresh_a = sample_a()
    if "--check" in argv:
        # NB: the demo's own first line (its last loss moves in the third decimal) and the
        # times aside, and the padding the times' widths move
        ok = _plain(lines[a0 + 2 : a1]) == _plain(fresh_a[1:])
        print("README sample A is current" if ok else "README sample A differs from the command")
        return 0 if ok else 1
    out = [*lines[: a0 + 1], *fresh_a, *lines[a1 : b0 + 1], *sample_b(), *lines[b1:]]
    README.write_text("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
