"""Every change the profiler, ``--fake-cuda`` and the budget guards make outside themselves: what
it changes, why, and what is lost without it (as profilers/torch_private.py lists torch's private
hooks). The mechanism is profilers/registry.py; ``tests/test_patch_registry.py`` runs each
installer and fails on any change of ours that is not listed here.
"""

from __future__ import annotations

from profilers.fake_cuda.patch_list import COMM as _COMM
from profilers.fake_cuda.patch_list import FAKE_CUDA
from profilers.registry import Entry

_SYNCS = "explicit synchronize calls: the dispatcher never sees them"

ENTRIES: tuple[Entry, ...] = (
    *FAKE_CUDA,
    # -- torch.compile under a dispatch mode of ours (profilers/compiled.py) ------------------
    Entry(
        "profiler",
        "",
        ("torch.compiler.set_stance('force_eager')",),
        "compiled functions run as plain Python while a dispatch mode of ours is on (the "
        "script's own stance put back at the end)",
        "dynamo compiles nothing under a dispatch mode: it checked and skipped each frame of "
        "every call (a small MLP's forward at 1.30-1.37x the eager model's counting, "
        "1.16-1.21x with the stance), and fullgraph=True raised",
        "compiled models counted nearer the eager model's cost; fullgraph=True runs under kernel "
        "timing, --count-ops, --memory and --fake-cuda",
    ),
    Entry(
        "profiler",
        "torch._dynamo.eval_frame",
        ("_callback_from_stance",),
        "counts the calls of compiled functions that ran eager by that stance",
        "with the stance dynamo is handed no frame: nothing else says a compiled function ran",
        "the report's 'torch.compile ran eager' line (compiled.eager_calls)",
    ),
    Entry(
        "profiler",
        "torch",
        ("compile",),
        "sets that stance at the script's first torch.compile, where dynamo was not loaded "
        "when the profile started",
        "dynamo takes 3 s to import: a profile never loads it for a script that compiles nothing",
        "as the stance: compiled functions made during the run would be checked frame by frame",
    ),
    # -- the profiler (profilers/patches.py, profilers/counting/, profilers/timing/) ----------
    Entry(
        "profiler",
        "threading.Thread",
        ("_bootstrap_inner",),
        "each thread started while profiling runs inside its own mode (or the fast path's key)",
        "dispatch modes and dispatch keys are thread-local",
        "ops of the script's threads (DataParallel replicas)",
    ),
    Entry(
        "profiler",
        "torch.autograd",
        ("_engine_run_backward",),
        "remembers the calling line while a backward (Tensor.backward, autograd.backward or "
        "grad) runs; the private function, so that the public ones stay torch's own",
        "autograd's device threads run backward ops with no user frame",
        "backward ops charged to the .backward() line (they go to <no user frame>)",
    ),
    Entry(
        "profiler",
        "",
        ("torch.optim optimizer step post-hook",),
        "each optimizer.step() ends a step",
        "steps are what --steps and the step clock count",
        "step counts, --steps windows and per-step time",
    ),
    Entry(
        "profiler",
        "torch.distributed.distributed_c10d.Work",
        ("wait",),
        "times the wait and charges it to the calling line",
        "a wait on an async collective is below the dispatcher",
        "comm.wait_ms per line",
    ),
    Entry(
        "profiler",
        "torch.nn.parallel.comm",
        _COMM,
        "counts the copies each makes",
        "DataParallel's comm runs in C++ below the dispatcher",
        "DataParallel's GPU-to-GPU copies",
    ),
    Entry(
        "profiler",
        "torch.cuda.comm",
        _COMM,
        "as torch.nn.parallel.comm",
        "the same functions, under their other name",
        "as torch.nn.parallel.comm",
    ),
    Entry(
        "profiler",
        "torch.cuda",
        ("synchronize",),
        "counts a sync and times the wait",
        _SYNCS,
        "explicit syncs (counts and time)",
    ),
    Entry(
        "profiler",
        "torch.cuda.streams.Stream",
        ("synchronize",),
        "as torch.cuda.synchronize",
        _SYNCS,
        "Stream.synchronize() syncs",
    ),
    Entry(
        "profiler",
        "torch.cuda.streams.Event",
        ("synchronize",),
        "as torch.cuda.synchronize",
        _SYNCS,
        "Event.synchronize() syncs",
    ),
    Entry(
        "profiler",
        "profilers.fake_cuda.torch_api.FakeStream",
        ("synchronize",),
        "as torch.cuda.synchronize, on the fake GPU's stream class",
        _SYNCS,
        "Stream syncs under --fake-cuda",
    ),
    Entry(
        "profiler",
        "profilers.fake_cuda.torch_api.FakeEvent",
        ("synchronize",),
        "as torch.cuda.synchronize, on the fake GPU's event class",
        _SYNCS,
        "Event syncs under --fake-cuda",
    ),
    Entry(
        "profiler",
        "torch._tensor_str",
        ("_str",),
        "printing a GPU tensor counts its copy to the host",
        "torch prints with every mode disabled",
        "the sync of print(t)",
    ),
    Entry(
        "profiler",
        "torch.utils.data.dataloader._BaseDataLoaderIter",
        ("__next__",),
        "times the wait for each batch",
        "input waits are host time no op shows",
        "report.time's input waits",
    ),
    Entry(
        "profiler",
        "",
        ("input: *",),
        "times each item of an input iterator named by dotted name (Options.inputs): a "
        "class's __next__, the iterators its __iter__ returns, or a function's results",
        "iterators other than the DataLoader (generators, DALI, webdataset, HF datasets) feed "
        "steps too; the user names the ones that do",
        "their waits: the step's time shows as host work at a library line",
    ),
    Entry(
        "profiler",
        "torch.cuda",
        ("is_available", "device_count"),
        "notes the first line told 'no GPU'",
        "a report of a run that fell back to the CPU says why",
        "gpu_fallback in the report",
    ),
    Entry(
        "profiler",
        "torch.accelerator",
        ("is_available", "device_count"),
        "as torch.cuda's",
        "as torch.cuda's",
        "as torch.cuda's",
    ),
    Entry(
        "profiler",
        "",
        ("torch.library kernels at PreDispatch",),
        "a Python kernel for each counted op and a fallthrough for every other op",
        "the fast path of --no-kernel-timing (profilers/counting/kernels.py)",
        "the fast path (every op through the mode instead)",
    ),
    # -- the budget guards (profilers/guard.py) ---------------------------------------------
    Entry(
        "guard",
        "threading.Thread",
        ("start", "_bootstrap_inner"),
        "threads started in a guarded block are guarded",
        "modes are thread-local",
        "syncs of those threads",
    ),
    Entry(
        "guard",
        "torch.autograd",
        ("_engine_run_backward",),
        "as the profiler's",
        "as the profiler's",
        "backward ops' lines",
    ),
    Entry(
        "guard",
        "torch.cuda",
        ("synchronize",),
        "as the profiler's",
        _SYNCS,
        "explicit syncs in a guard",
    ),
    Entry(
        "guard",
        "torch.cuda.streams.Stream",
        ("synchronize",),
        "as the profiler's",
        _SYNCS,
        "explicit syncs in a guard",
    ),
    Entry(
        "guard",
        "torch.cuda.streams.Event",
        ("synchronize",),
        "as the profiler's",
        _SYNCS,
        "explicit syncs in a guard",
    ),
    Entry(
        "guard",
        "torch._tensor_str",
        ("_str",),
        "as the profiler's",
        "as the profiler's",
        "the sync of print(t) in a guard",
    ),
)


def find(by: str, target: str) -> Entry | None:
    """The entry that documents ``target`` changed by ``by``."""
    for entry in ENTRIES:
        if entry.by != by:
            continue
        for t in entry.targets():
            if t == target or (t.endswith("*") and target.startswith(t[:-1])):
                return entry
    return None
