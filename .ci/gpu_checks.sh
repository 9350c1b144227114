#!/usr/bin/env bash
# Every check that needs a real NVIDIA GPU, in one run (CI has no GPU; these run on a lent one).
#
#   bash .ci/gpu_checks.sh prepare   # here, with network: wheels the GPU machine lacks -> .whl/
#   bash .ci/gpu_checks.sh selfcheck # here, on torch 2.11 and Python 3.12: what needs no GPU
#   bash .ci/gpu_checks.sh run OUT [gpu] [suite] [bench] [demos]   # there -> OUT/ (all parts
#       when none is named; one part per call on a lent machine)
#
# The GPU machine's python3 (3.12) has torch with CUDA, nvidia-ml-py, rich, psutil, pytest and
# hypothesis; textual, plotly, py-spy, pytest-asyncio and nvitop (the peer for top_cost.py) travel
# as wheels (see WHEELS). OUT receives at most 8 files: checks-PART.log (everything each part
# printed, in order), the JSON
# reports of the naive and fixed demo, top.json and model_accuracy.json (the GPU model against
# this GPU). --fake-cuda is compared with the real run.
set -uo pipefail
cd "$(dirname "$0")/.."

# The versions CI tests with (pytest and rich too: the image's may be older than textual and
# pytest-asyncio need).
WHEELS=(textual==8.2.8 mdit-py-plugins==0.7.0 markdown-it-py==4.3.0 platformdirs==4.14.7
    rich==15.0.0 plotly==7.1.0 py-spy==0.4.3 pytest==8.4.2 pluggy==1.6.0 iniconfig==2.3.0
    pytest-asyncio==1.5.0 nvitop==1.7.2 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
    referencing==0.37.0 rpds-py==2026.9.1 syrupy==4.8.0 pytest-textual-snapshot==1.1.0)
# NB: the image (.library/device/KINDS.md) has pytest-xdist, jinja2, attrs, prometheus-client and
# numpy, but not jsonschema (a report's schema check) or syrupy (the snapshot tests); its torch
# is 2.11, not the 2.13 gpuwatch is tested on (too big to carry): the checks run on 2.11 there.

prepare() {
    local exclude
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$exclude")"
    grep -qx '/.whl/' "$exclude" 2>/dev/null || echo /.whl/ >>"$exclude"
    rm -rf .whl && mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux_2_28_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
    ls .whl
}

step() {
    echo
    echo "=== $* ==="
    "$@"
    echo "=== exit $? ==="
}

setup() {
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="$PWD:/tmp/site" PATH="/tmp/site/bin:$PATH" PYTHONUNBUFFERED=1
    # The console script, without installing the package into the image's environment.
    mkdir -p /tmp/site/bin
    printf '#!/bin/sh\nexec python3 -m gpuwatch "$@"\n' >/tmp/site/bin/gpuwatch
    chmod +x /tmp/site/bin/gpuwatch
}

# The checks in four parts, each meant to fit in a lent machine's 10 minutes a command (not
# yet timed on one: a part that runs over is split further).
part_gpu() {
    step nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    step python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))"
    # The profiler on real CUDA: every dispatcher row, torch.profiler's Memcpy events,
    # set_sync_debug_mode's warnings, CUDA-event kernel time, the time view's measured GPU
    # half (tests/test_time_gpu_real.py); the whole suite there is the suite part.
    step python3 -m pytest -q -m gpu -p no:cacheprovider tests
}

part_suite() {
    # the whole suite on the GPU machine (the image has pytest-xdist)
    step python3 -m pytest -q -x -n 8 -p no:cacheprovider tests
}

part_bench() {
    step python3 benchmarks/profiler_overhead.py --device cuda --workload small
    step python3 benchmarks/profiler_overhead.py --device cuda --workload large --steps 20
    step python3 benchmarks/profiler_overhead.py --device cpu
    step python3 benchmarks/counting_paths.py --device cuda
    # The time view's GPU half (CUDA events) against torch.profiler with CUDA activities: cost
    # side by side, and each one's view of a launch-bound and a GPU-bound step (issue 30).
    # Its exactness against CUDA events around each step is in -m gpu above
    # (tests/test_time_gpu_real.py: sync-, copy-, input- and GPU-bound torch.cuda._sleep steps).
    step python3 benchmarks/time_vs_torch_profiler.py --device cuda --steps 30 --rounds 3
    step python3 -m gpuwatch top --once
    # GPM (SM activity) and the energy counter against nvidia-smi: idle, matmuls, tiny kernels
    step python3 .ci/check_gpm.py
    # Energy per step (time.steps[].energy) against the counter read directly at each
    # step's bounds, on steps of known GPU work (torch.cuda._sleep, ~1 s each)
    step python3 .ci/check_energy.py
    python3 -m gpuwatch top --json >"$out/top.json"
    echo "top --json: exit $?, $(wc -c <"$out/top.json") bytes"
    step python3 benchmarks/top_cost.py --real --seconds 20 --interval 1 \
        --peer "nvitop --interval 1"
}

part_demos() {
    for variant in naive fixed; do
        step python3 -m gpuwatch profile --json "$out/$variant.json" \
            demos/single_gpu_training.py --variant "$variant" --steps 200
    done
    # The time view, measured on the GPU: naive and fixed get different verdicts and the
    # fixed one idles less (issue 30).
    step python3 .ci/compare_time.py "$out/naive.json" "$out/fixed.json"
    # --fake-cuda against the real GPU, the same script: the totals must agree.
    for variant in naive fixed; do
        step python3 -m gpuwatch profile -q --fake-cuda --json "/tmp/$variant-fake.json" \
            demos/single_gpu_training.py --variant "$variant" --steps 200
    done
    step python3 .ci/compare_fake_cuda.py "$out/naive.json" /tmp/naive-fake.json \
        "$out/fixed.json" /tmp/fixed-fake.json
    # The replay on CUDA-event times (issue 26): each demo's step replayed as recorded, within
    # 10% of its measured step; the what-if table printed.
    for variant in naive fixed; do
        step python3 -m gpuwatch profile --what-if --json "/tmp/$variant-whatif.json" \
            demos/single_gpu_training.py --variant "$variant" --steps 200
    done
    step python3 .ci/check_replay.py /tmp/naive-whatif.json /tmp/fixed-whatif.json \
        "$out/naive.json" "$out/fixed.json"
    # The GPU model against this GPU (issue 26): each op's time (CUDA events) and each step's,
    # measured and predicted, per op class; the README's tables printed after.
    step python3 benchmarks/gpu_model_accuracy.py --json "$out/model_accuracy.json" \
        --markdown /tmp/model_accuracy.md
    step cat /tmp/model_accuracy.md
    # More fake GPUs than the machine has: the real ones are not touched (the fake guard
    # holds CUDA's entry while the harness is on; test_fake_cuda_builds.py checks memory).
    step python3 -m gpuwatch profile -q --fake-cuda --fake-gpus 4 \
        demos/fake_gpu_walkthrough.py --steps 3
    # The fast path of --no-kernel-timing against the timed run: the same totals.
    step python3 -m gpuwatch profile -q --no-kernel-timing --json /tmp/naive-fast.json \
        demos/single_gpu_training.py --variant naive --steps 200
    step python3 .ci/compare_fake_cuda.py "$out/naive.json" /tmp/naive-fast.json
    step python3 demos/exercises.py matmul
}

# What the parts above need that a machine without a GPU can check, on the lent machine's torch
# (2.11) and Python (3.12) with the same carried wheels: CI runs it (.ci/torch_matrix.sh), so a
# lent GPU's minutes go to GPU answers, not to import errors. Exits non-zero on the first failure.
selfcheck() {
    prepare >/dev/null || return 1
    setup
    local failed=0 f
    python3 -c 'import sys, torch; print("selfcheck: Python", sys.version.split()[0], "torch",
        torch.__version__)' || failed=1
    # every -m gpu test collects (its module imports, its fixtures resolve; it skips here)
    python3 -m pytest -q --collect-only -m gpu -p no:cacheprovider tests >/dev/null || {
        echo "selfcheck: the gpu tests do not collect"
        failed=1
    }
    for f in .ci/*.py benchmarks/*.py; do
        python3 -m py_compile "$f" || failed=1
    done
    # the demos part's runs, on the fake GPU: the same commands, the same comparison script
    for variant in naive fixed; do
        python3 -m gpuwatch profile -q --fake-cuda --json "/tmp/selfcheck-$variant.json" \
            demos/single_gpu_training.py --variant "$variant" --steps 5 --epochs 1 || failed=1
    done
    python3 .ci/compare_fake_cuda.py /tmp/selfcheck-naive.json /tmp/selfcheck-naive.json \
        /tmp/selfcheck-fixed.json /tmp/selfcheck-fixed.json >/dev/null || failed=1
    python3 -m gpuwatch top --demo --once >/dev/null || failed=1
    echo "selfcheck: exit $failed"
    return $failed
}

run() {
    local out=${1:?usage: gpu_checks.sh run OUT [gpu] [suite] [bench] [demos]}
    shift
    local parts=("$@")
    [ ${#parts[@]} -eq 0 ] && parts=(gpu suite bench demos)
    for part in "${parts[@]}"; do
        case "$part" in
        gpu | suite | bench | demos) ;;
        *)
            echo "unknown part: $part (gpu, suite, bench, demos)" >&2
            exit 2
            ;;
        esac
    done
    setup
    mkdir -p "$out"
    for part in "${parts[@]}"; do
        # NB: one log per part (OUT holds at most 8 files: 4 logs, top.json, naive.json,
        # fixed.json, model_accuracy.json); the demos part writes naive/fixed.json itself
        "part_$part" 2>&1 | tee "$out/checks-$part.log"
    done
}

case "${1:-}" in
prepare) prepare ;;
selfcheck) selfcheck ;;
run)
    shift
    run "$@"
    ;;
*)
    echo "usage: bash .ci/gpu_checks.sh prepare | selfcheck | run OUT [gpu] [suite] [bench] [demos]" >&2
    exit 2
    ;;
esac
