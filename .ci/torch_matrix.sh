#!/usr/bin/env bash
# The torch matrix: the profiler's tests (counting, --fake-cuda, time, memory, the demos) on the
# oldest supported torch, the lent GPU machine's (2.11, on Python 3.12 as there) and the newest,
# each the CUDA build pip installs from the package index on Linux (no GPU is needed to install
# or import it: nothing here calls the GPU).
#
#   bash .ci/torch_matrix.sh                 # every entry of MATRIX
#   bash .ci/torch_matrix.sh 2.15.0          # one entry (or a release MATRIX does not list)
#   bash .ci/torch_matrix.sh --setup-only    # make the environments, run nothing
#
# Each entry's environment is kept under $GPUWATCH_CI_CACHE (default ~/.cache/gpuwatch-ci) and
# reused while it holds that torch. An entry that cannot install, or whose torch gpuwatch's own
# install would change, fails the run: it never passes silently.
set -uo pipefail
cd "$(dirname "$0")/.."

# release, Python (2.11 runs on 3.12: the lent GPU machine's)
MATRIX=("2.9.1 python3.11" "2.11.0 python3.12" "2.15.0 python3.11")
# The entry that also runs the real frameworks' tests (tests/test_frameworks.py).
FRAMEWORKS_ON=2.15.0

# The tests that depend on the torch release: the counting paths, the fake GPU, time, memory,
# the private hooks and the demos. The monitor, the TUI, the exporter and the renderers do not
# import torch and run once, in the full suite.
TESTS=(
    tests/test_profiler_*.py tests/test_fake_*.py tests/test_time_*.py tests/test_memory_*.py
    tests/test_fast_path.py tests/test_torch_private.py tests/test_torch_range.py
    tests/test_user_fake_mode.py tests/test_thread_counts.py tests/test_cuda_timing.py
    tests/test_no_gpu_fallback.py tests/test_replay.py tests/test_replay_whatif.py
    tests/test_whatif_wired.py tests/test_demos.py tests/test_distributed.py
    tests/test_release_counts.py tests/test_library_frames.py tests/test_compiled.py
)

cache=${GPUWATCH_CI_CACHE:-$HOME/.cache/gpuwatch-ci}
# NB: the package index as a user's pip sees it: no local wheel folder, no cap on torch.
pypi=(env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null)

has_torch() { # ENV VERSION: the environment holds exactly that torch, a CUDA build
    "$1/bin/python" -c 'import sys, torch
sys.exit(not (torch.__version__.split("+")[0] == sys.argv[1] and torch.version.cuda))' "$2" \
        2>/dev/null
}

torch_lines() { # the torch, triton and nvidia packages of an environment, as pip freeze says
    "$1/bin/python" -m pip freeze 2>/dev/null | grep -iE '^(torch|triton|nvidia-|cuda-)' |
        grep -iv '^nvidia-ml-py' | sort
}

find_python() { # python3.12 -> a command that runs it (on PATH, or a pyenv version not selected)
    local found
    if "$1" -c '' 2>/dev/null; then
        echo "$1"
        return 0
    fi
    for found in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"${1#python}"*/bin/"$1"; do
        [ -x "$found" ] && "$found" -c '' 2>/dev/null && echo "$found" && return 0
    done
    return 1
}

make_env() { # VERSION PYTHON -> the environment's path on stdout; non-zero if it cannot be made
    local version=$1 python env=$cache/torch-$1
    if ! python=$(find_python "$2"); then
        echo "ci: torch $version: $2 is not on this machine" >&2
        return 1
    fi
    if ! has_torch "$env" "$version"; then
        rm -rf "$env"
        "$python" -m venv "$env" || return 1
        "${pypi[@]}" "$env/bin/python" -m pip install -q --upgrade pip >&2 || return 1
        "${pypi[@]}" "$env/bin/python" -m pip install -q "torch==$version" >&2 || return 1
        has_torch "$env" "$version" || return 1
    fi
    # gpuwatch's own install must leave the user's torch as it was (pyproject.toml declares a
    # lower bound only): its wheel, then the checkout in place for the tests.
    local before after wheels
    before=$(torch_lines "$env")
    wheels=$(mktemp -d)
    "$env/bin/python" -m pip wheel -q --no-deps -w "$wheels" . >&2 || return 1
    "${pypi[@]}" "$env/bin/python" -m pip install -q "$wheels"/gpuwatch-*.whl >&2 || return 1
    "${pypi[@]}" "$env/bin/python" -m pip install -q -e '.[test]' >&2 || return 1
    rm -rf "$wheels"
    after=$(torch_lines "$env")
    if [ "$before" != "$after" ]; then
        echo "ci: torch $version: installing gpuwatch changed the environment's torch:" >&2
        diff <(echo "$before") <(echo "$after") >&2
        return 1
    fi
    echo "ci: torch $version: installing gpuwatch's wheel left torch and its" \
        "$(echo "$before" | wc -l) torch/nvidia/cuda packages as they were" >&2
    echo "$env"
}

run_entry() { # VERSION PYTHON
    local version=$1 python=$2 env started
    started=$(date +%s)
    if ! env=$(make_env "$version" "$python"); then
        echo "ci: FAILED torch $version: its environment could not be made (above)"
        return 1
    fi
    echo "ci: torch $version ($("$env/bin/python" -c 'import sys, torch
print(torch.__version__, "CUDA", torch.version.cuda, "Python", sys.version.split()[0])')),"\
        "ready in $(($(date +%s) - started)) s"
    [ "$setup_only" = 1 ] && return 0
    local status=0
    # NB: a --fake-cuda test whose harness fails to build fails here (GPUWATCH_REQUIRE_FAKE_CUDA),
    # it does not skip: a matrix that skipped them would look green while testing none.
    # NB: the gap sampler's tests of a long pause (at the start; between a step's ops) read
    # Python stacks on a thread of its own, the same on every release; beside a second worker on
    # a loaded box their 10% tolerance is the sampler thread's scheduling, not torch's (seen
    # here: 95 ms of a 120 ms pause at load 5). They run in the full suite.
    # The in-process tests of those files (-m "not slow": the counting, the fake GPU, time and
    # memory, the demos' counts), then the collectives under a real torchrun with gloo (slow,
    # but what c10d dispatches differs by release); the rest of the slow tier drives the same
    # code through processes and runs in the full suite.
    PATH="$env/bin:$PATH" GPUWATCH_REQUIRE_FAKE_CUDA=1 "$env/bin/python" -m pytest -q -n 2 \
        -p no:cacheprovider -m "not slow" "${TESTS[@]}" --deselect \
        tests/test_time_gaps.py::test_a_sleep_and_the_setup_before_the_first_op_are_their_own_lines \
        --deselect \
        tests/test_time_gpu_profile.py::test_the_gpus_idle_over_a_long_pause_is_the_pauses_line \
        || status=1
    PATH="$env/bin:$PATH" "$env/bin/python" -m pytest -q -n 2 -p no:cacheprovider \
        tests/test_distributed.py || status=1
    # The real frameworks (HF Trainer and generate(), Lightning, accelerate, timm), their current
    # releases, on the newest torch: its CUDA build is what their users have, and PyPI's
    # torchvision (timm's) imports beside it (beside the CPU build of the full suite it cannot,
    # and timm's tests skip there).
    if [ "$version" = "$FRAMEWORKS_ON" ]; then
        "${pypi[@]}" "$env/bin/python" -m pip install -q -e '.[frameworks]' "torch==$version" \
            >&2 || status=1
        PATH="$env/bin:$PATH" "$env/bin/python" -m pytest -q -n 2 -p no:cacheprovider -rs \
            tests/test_frameworks.py || status=1
    fi
    # The GPU tests and the GPU checks' own imports, on the lent machine's release: collected
    # (their modules import and their fixtures resolve here; the tests skip without a GPU).
    if [ "$version" = 2.11.0 ]; then
        PATH="$env/bin:$PATH" "$env/bin/python" -m pytest -q --collect-only -m gpu \
            -p no:cacheprovider tests >/dev/null || {
            echo "ci: FAILED torch $version: the gpu tests do not collect"
            status=1
        }
        PATH="$env/bin:$PATH" bash .ci/gpu_checks.sh selfcheck || status=1
    fi
    echo "ci: torch $version: exit $status in $(($(date +%s) - started)) s"
    return $status
}

setup_only=0
wanted=()
for arg in "$@"; do
    case "$arg" in
    --setup-only) setup_only=1 ;;
    *) wanted+=("$arg") ;;
    esac
done
# A release named that MATRIX does not list (the next one, the week it ships) runs on python3.
entries=()
for version in "${wanted[@]}"; do
    python=python3
    for entry in "${MATRIX[@]}"; do
        [ "${entry%% *}" = "$version" ] && python=${entry#* }
    done
    entries+=("$version $python")
done
[ ${#entries[@]} -eq 0 ] && entries=("${MATRIX[@]}")
failed=0
for entry in "${entries[@]}"; do
    read -r version python <<<"$entry"
    run_entry "$version" "$python" || failed=1
done
exit $failed
