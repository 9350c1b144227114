"""What ``gpuwatch report TRACE`` costs on a large torch.profiler trace.

    python benchmarks/kineto_read.py [--mb 100] [--gzip]
    python benchmarks/kineto_read.py --sample ddp --copies 4 10 --hta /tmp/hta-t

With ``--copies``, each trace (the sample laid end to end N times, in a temporary folder) is
read in a child process by ``gpuwatch report`` (streaming), by ``gpuwatch report`` with the
whole-file reading it replaced, and, given ``--hta`` (a folder HolisticTraceAnalysis 0.5 is
installed in: ``pip install --no-deps --target DIR holistictraceanalysis==0.5.0 pandas ...``),
by HTA (``TraceAnalysis`` then its temporal breakdown), one after the other in one run; each
child's wall time and peak RSS (``os.wait4``), and their ratios to HTA's, are printed.

The trace: a sample of ../shared/traces (tests/shared_traces.py; ``--sample resnet``: the
ResNet-50 run on a V100, 6 steps, 35 MB of JSON, torch 1.9's spelling with a Python stack string
on every op; ``modern``: one rank of the two-rank A100 run, torch 2.x's spelling, 1.3 MB)
repeated end to end, each copy's times shifted past the last and its steps, correlation and
external ids renumbered, until the JSON reaches ``--mb`` megabytes. Reported: its size, events,
steps and kernels, and the seconds to read it (gunzip and JSON included) and to analyse it, with
the peak memory of the process (ru_maxrss).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from profilers.kineto.analyse import analyse  # noqa: E402
from profilers.kineto.read import read_traces  # noqa: E402
from tests.shared_traces import SHARED_TRACES as DATA  # noqa: E402

SAMPLES = {
    "resnet": DATA / "resnet50_num_workers_0.pt.trace.json.gz",  # torch 1.9, Call stack strings
    "modern": DATA / "two_ranks/sampled_rank-0.json.gz",  # torch 2.x spelling, no stacks
    "ddp": DATA / "hta-figures/hta_df_index_resolver/rank-1.pt.trace.json.gz",  # V100 DDP, 54 MB
}
ROOT = Path(__file__).resolve().parent.parent
CHILD = {
    "gpuwatch": "from gpuwatch.cli.main import main; main(['report', '-q', {path!r}])",
    "gpuwatch --whole": "from profilers.kineto.analyse import analyse; "
    "from profilers.kineto.read import read_traces; analyse(read_traces([{path!r}], whole=True))",
    "HTA 0.5": "import logging; logging.disable(logging.WARNING); "
    "from hta.trace_analysis import TraceAnalysis; "
    "TraceAnalysis(trace_dir={folder!r}).get_temporal_breakdown(visualize=False)",
}


def _child(code: str, hta: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of ``python -c code``. NB: run under /usr/bin/time, a small
    process: a child forked from this one would start its peak at this process's size."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), hta) if p))
    start = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M", sys.executable, "-c", code],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"kineto_read.py: the child failed: {code}\n{done.stderr[-2000:]}")
    return took, int(done.stderr.split()[-1]) / 1024


def side_by_side(sample: str, copies: list[int], hta: str) -> None:
    for n in copies:
        with tempfile.TemporaryDirectory() as folder:
            doc = build_copies(n, sample)
            path = Path(folder) / "rank-0.pt.trace.json"
            path.write_bytes(json.dumps(doc).encode())
            size_mb, events = path.stat().st_size / 1e6, len(doc["traceEvents"])
            del doc
            got = {
                name: _child(code.format(path=str(path), folder=folder), hta)
                for name, code in CHILD.items()
                if hta or not name.startswith("HTA")
            }
        print(f"{sample} x{n}: {size_mb:.0f} MB of JSON, {events:,} events")
        base = got.get("HTA 0.5")
        for name, (secs, peak) in got.items():
            vs = f" ({secs / base[0]:.2f}x HTA's time)" if base else ""
            print(
                f"  {name:<17} {secs:6.2f} s{vs}, peak {peak:,.0f} MB "
                f"({peak / size_mb:.2f}x the JSON)"
            )


def _shifted(events: list[dict[str, Any]], i: int, span_us: float) -> list[dict[str, Any]]:
    out = []
    for e in events:
        if e.get("ph") not in ("X", "s", "f") or e.get("cat") == "Trace":
            continue
        e = dict(e, ts=e["ts"] + i * span_us)
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(e['name'][13:]) + 1000 * i}"
        args = e.get("args")
        if isinstance(args, dict):
            args = dict(args)
            for key in ("correlation", "External id", "external id"):
                if isinstance(args.get(key), int) and args[key] > 0:
                    args[key] += i * 10_000_000
            e["args"] = args
        if "id" in e and isinstance(e["id"], int):
            e["id"] += i * 10_000_000
        out.append(e)
    return out


def build(mb: float, sample: str = "resnet") -> dict[str, Any]:
    events = json.loads(gzip.decompress(SAMPLES[sample].read_bytes()))["traceEvents"]
    return build_copies(max(1, round(mb * 1e6 / len(json.dumps(events)))), sample)


def build_copies(copies: int, sample: str) -> dict[str, Any]:
    doc = json.loads(gzip.decompress(SAMPLES[sample].read_bytes()))
    events = doc["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X" and e.get("cat") != "Trace"]
    span = max(e["ts"] + e.get("dur", 0) for e in xs) - min(e["ts"] for e in xs) + 1000
    merged = [e for e in events if e.get("ph") == "M"]
    for i in range(copies):
        merged += _shifted(events, i, span)
    return {k: v for k, v in doc.items() if k != "traceEvents"} | {"traceEvents": merged}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--gzip", action="store_true", help="write the trace gzipped")
    parser.add_argument("--sample", choices=sorted(SAMPLES), default="resnet")
    parser.add_argument("--copies", type=int, nargs="+", help="side by side, in child processes")
    parser.add_argument("--hta", default="", help="a folder HTA 0.5 is installed in")
    args = parser.parse_args()
    if not SAMPLES[args.sample].is_file():
        parser.exit(
            2, f"kineto_read.py: error: {SAMPLES[args.sample]} is absent (../shared/traces)\n"
        )
    if args.copies:
        side_by_side(args.sample, args.copies, args.hta)
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("big.json.gz" if args.gzip else "big.json")
        text = json.dumps(build(args.mb, args.sample)).encode()
        path.write_bytes(gzip.compress(text, 6) if args.gzip else text)
        del text
        start = time.perf_counter()
        traces = read_traces([str(path)])
        read_s = time.perf_counter() - start
        start = time.perf_counter()
        analysis = analyse(traces, [str(path)])
        analyse_s = time.perf_counter() - start
        (r,) = analysis.ranks
        size_mb = path.stat().st_size / 1e6
    kernels = sum(k.count for k in r.kernels)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{args.sample}: {size_mb:.1f} MB {'gzip' if args.gzip else 'JSON'}, {len(r.steps)} steps, "
        f"{len(traces[0].activities.start):,} GPU activities (top kernels {kernels:,}): "
        f"read {read_s:.2f} s, analyse {analyse_s:.2f} s, peak memory {peak_mb:,.0f} MB"
    )


if __name__ == "__main__":
    main()
