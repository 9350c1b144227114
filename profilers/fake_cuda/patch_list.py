"""The changes ``--fake-cuda`` makes outside itself (profilers/patch_list.py lists them all with
the profiler's and the guards'; the mechanism is profilers/registry.py)."""

from __future__ import annotations

import functools

from profilers.registry import Entry

_entry = functools.partial(Entry, "fake_cuda")


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


COMM = _names("broadcast broadcast_coalesced reduce_add reduce_add_coalesced scatter gather")
"""DataParallel's functions in ``torch.nn.parallel.comm`` and ``torch.cuda.comm``."""
RNG = _names(
    "get_rng_state set_rng_state get_rng_state_all set_rng_state_all manual_seed manual_seed_all "
    "seed seed_all initial_seed"
)
"""torch.cuda's RNG functions (``torch.cuda.random``'s too): the fake GPU's ``FakeRng``."""
_GRAPHS = ("CUDAGraph", "graph", "graph_pool_handle", "is_current_stream_capturing")

FAKE_CUDA: tuple[Entry, ...] = (
    # -- the fake GPU (profilers/fake_cuda/) ---------------------------------------------------
    _entry(
        "threading.Thread",
        ("_bootstrap_inner",),
        "each thread runs with the fake GPU's mode at the bottom of its stack",
        "modes are thread-local",
        "fake GPU tensors in the script's threads (they would fail)",
    ),
    _entry(
        "torch.cuda",
        _names(
            "is_available device_count current_device set_device is_initialized _lazy_init init "
            "synchronize get_device_name get_device_properties get_device_capability "
            "is_bf16_supported empty_cache device Event Stream current_stream default_stream "
            "stream"
        ),
        "answers as a machine with N GPUs",
        "a CPU-only torch answers 'no GPU' or fails",
        "the script takes its CPU path or fails",
    ),
    _entry(
        "torch.accelerator",
        _names("is_available current_accelerator device_count current_device_index synchronize"),
        "as torch.cuda's",
        "scripts ask torch.accelerator too",
        "as torch.cuda's",
    ),
    _entry(
        "torch.nn.parallel.comm",
        COMM,
        "the copies each makes, on fake tensors",
        "the real ones are C++ of a CUDA build",
        "nn.DataParallel",
    ),
    _entry(
        "torch.cuda.comm",
        COMM,
        "as torch.nn.parallel.comm",
        "as torch.nn.parallel.comm",
        "nn.DataParallel",
    ),
    _entry(
        "torch._subclasses.fake_tensor",
        ("init_gpu_context",),
        "does nothing",
        "it makes a real CUDA tensor",
        "any fake CUDA tensor (it fails)",
    ),
    _entry(
        "torch.nn.modules.module.Module",
        ("_apply",),
        "model.cuda()/.to() keep parameters' identity across the fake move",
        "optimizers hold the parameters",
        "optimizers that step the old parameters",
    ),
    _entry(
        "torch.optim.optimizer.Optimizer",
        ("__init__",),
        "optimizers are known, to follow their parameters' moves",
        "as Module._apply",
        "as Module._apply",
    ),
    _entry(
        "torch.optim.optimizer",
        ("_foreach_supported_types",),
        "an optimizer's default picks the foreach path for fake GPU tensors, as for a GPU's",
        "torch takes foreach (and fused) only for plain tensors, which fake ones are not",
        "the default optimizer path a GPU runs, and its device mismatches (for-loop instead)",
    ),
    _entry(
        "torch._subclasses.fake_tensor.FakeTensor",
        ("tolist",),
        "one copy to the host, as on a GPU",
        "FakeTensor.tolist() reads element by element",
        "tolist() counted as one sync per element",
    ),
    _entry(
        "torch._subclasses.fake_tensor.FakeTensor",
        ("__repr__", "__format__"),
        "print(t), f'{t:.4f}' as on a GPU (placeholder values)",
        "fake tensors print as FakeTensor(...)",
        "scripts that print or format GPU values",
    ),
    _entry(
        "torch._subclasses.fake_tensor.FakeTensor",
        ("__reduce_ex__",),
        "torch.save of fake GPU tensors",
        "fake tensors cannot be pickled",
        "checkpointing (torch.save fails)",
    ),
    _entry(
        "profilers.fake_cuda.real.HostBacked",
        ("tolist", "__repr__", "__format__", "__reduce_ex__"),
        "with real values (--fake-values real), the same as FakeTensor's four above",
        "as FakeTensor's",
        "as FakeTensor's",
    ),
    _entry(
        "profilers.fake_cuda.real.HostBacked",
        ("fake_mode", "harness"),
        "a real-values GPU tensor answers the harness's questions as a fake tensor does",
        "the harness's parts tell GPU tensors by their fake_mode and their harness",
        "every op on a real-values GPU tensor",
    ),
    _entry(
        "torch.nn.functional",
        ("scaled_dot_product_attention",),
        "attention on fake GPU tensors runs PyTorch's math path, on both builds of torch "
        "(its inputs cast as autocast casts them, a boolean mask made additive as sdpa does)",
        "a CUDA build picks a fused kernel by asking the real cuDNN's version first",
        "every attention layer on the CUDA build (nanoGPT, transformers)",
    ),
    _entry(
        "torch.serialization",
        ("location_tag",),
        "as __reduce_ex__",
        "as __reduce_ex__",
        "as __reduce_ex__",
    ),
    _entry(
        "torch",
        ("save",),
        "torch.save marks where one save begins and ends (then calls torch's own)",
        "torch.save copies a storage to the host once per save, however many tensors share it",
        "tied weights and views would count one device-to-host copy per tensor",
    ),
    _entry(
        "torch.serialization",
        ("save",),
        "as torch.save (the same function)",
        "as torch.save",
        "as torch.save",
    ),
    _entry(
        "torch",
        ("load",),
        "torch.load follows the map_location given, and keeps each storage bound for a GPU on "
        "the host while the file is read (then calls torch's own)",
        "a checkpoint saved on a GPU loads onto the GPU when no map_location moves it",
        "torch.load(f) of a GPU checkpoint stops: torch.UntypedStorage() refuses device cuda",
    ),
    _entry(
        "torch.serialization",
        ("load",),
        "as torch.load (the same function)",
        "as torch.load",
        "as torch.load",
    ),
    _entry(
        "torch._utils",
        ("_rebuild_tensor",),
        "a tensor of a storage torch.load bound for a GPU is a view of that storage's bytes, "
        "moved to the fake GPU once, whole",
        "each storage is copied host->GPU once, however many tensors share it",
        "tied weights would come back untied, and each tensor counted as its own copy",
    ),
    _entry(
        "torch._C",
        _names(
            "_cuda_memoryStats _cuda_resetPeakMemoryStats _cuda_resetAccumulatedMemoryStats "
            "_cuda_emptyCache _cuda_ipc_collect"
        ),
        "torch.cuda's memory statistics answered by the fake GPU's allocator count",
        "torch.cuda.memory calls these C entry points",
        "memory_allocated() and friends",
    ),
    _entry(
        "torch.cuda",
        ("cudart",),
        "mem_get_info() from the fake allocator",
        "it calls the CUDA runtime",
        "torch.cuda.mem_get_info()",
    ),
    _entry(
        "torch.cuda.memory",
        ("is_initialized", "_lazy_init"),
        "says CUDA is initialised",
        "torch/cuda/memory.py holds its own references",
        "memory statistics",
    ),
    _entry(
        "torch.cuda",
        RNG,
        "the fake GPUs' RNG state",
        "a CPU-only torch has no CUDA generators",
        "seeding and RNG state calls (they fail)",
    ),
    _entry("torch.cuda.random", RNG, "as torch.cuda's", "as torch.cuda's", "as torch.cuda's"),
    _entry(
        "torch._C",
        ("__getattr__",),
        "a torch._C._cuda_* entry point that is not simulated says so in one line",
        "a CPU-only torch lacks them",
        "a clear error (an AttributeError deep in torch instead)",
    ),
    _entry(
        "torch._C",
        ("_cuda_*",),
        "a CUDA build's own entry points hidden (deleted while on)",
        "they would answer from the real runtime",
        "the same answers on both builds",
    ),
    _entry(
        "torch.backends.cudnn",
        ("is_available", "is_acceptable"),
        "the fake GPU has no cuDNN: RNNs and convolutions take torch's non-cuDNN CUDA paths",
        "a CUDA build asks its cuDNN library, which does not load without a GPU",
        "nn.LSTM/GRU moved to the fake GPU on a CUDA build (flatten_parameters raises)",
    ),
    _entry(
        "torch.cuda.nvtx",
        ("_nvtx",),
        "NVTX ranges kept, shown nowhere",
        "a CPU-only torch has no NVTX",
        "scripts that mark ranges (they fail)",
    ),
    _entry(
        "torch.cuda",
        (*_GRAPHS, "default_generators"),
        "CUDA graphs captured and replayed on the fake GPU; its generators",
        "a CPU-only torch has none",
        "scripts that use CUDA graphs or generators",
    ),
    _entry(
        "torch.cuda.graphs",
        (*_GRAPHS, "_cuda_isCurrentStreamCapturing"),
        "as torch.cuda's",
        "torch.cuda.graphs holds its own references",
        "as torch.cuda's",
    ),
    _entry(
        "torch",
        ("Generator",),
        "torch.Generator(device='cuda') on the fake GPU",
        "a CPU-only torch has no CUDA generator",
        "such generators (they fail)",
    ),
    _entry(
        "",
        ("torch._C._set_only_lift_cpu_tensors(True)",),
        "torch.tensor(data, device='cuda') made on the host and moved by a _to_copy",
        "FakeTensorMode's own switch; the copy is then one the modes see",
        "that copy (and fake tensors from data)",
    ),
)
