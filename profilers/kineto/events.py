"""A torch.profiler trace as typed events: GPU activities, the host's runtime calls and CPU ops,
the steps, and what the names in a trace mean (which calls block the host, which copies are
pageable, which Python frames are the user's).

Times are integer nanoseconds from the trace's first event (Kineto writes microseconds, as floats
since torch 2.0; a float of an epoch-based microsecond keeps about 0.25 us, which bounds every
figure's resolution, as it does HTA's).
"""

from __future__ import annotations

import re
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]
NO_CALL = -(1 << 63)
"""The start of a call not in the trace: before any time."""

KERNEL = "kernel"
MEMCPY = "memcpy"
MEMSET = "memset"
KINDS = (KERNEL, MEMCPY, MEMSET)

#: Kineto's category of each GPU activity, old (torch 1.8/1.9) and new spellings, lower-cased.
GPU_CATS = {"kernel": KERNEL, "gpu_memcpy": MEMCPY, "memcpy": MEMCPY, "gpu_memset": MEMSET,
            "memset": MEMSET}  # fmt: skip
RUNTIME_CATS = frozenset({"cuda_runtime", "runtime", "cuda_driver", "driver"})
PYTHON_CATS = frozenset({"python_function", "python"})

#: Runtime and driver calls that hold the host until the GPU has done something (the CUDA
#: runtime API's synchronous calls). NB: cudaMemcpy (no Async) is synchronous for every
#: direction; cudaMemcpyAsync holds the host only when host memory is pageable (handled apart).
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpy2D", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol", "cudaMemcpyPeer", "cudaMemset",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD_v2", "cuMemcpy",
})  # fmt: skip
ASYNC_COPY_CALLS = frozenset({"cudaMemcpyAsync", "cudaMemcpy2DAsync", "cuMemcpyAsync"})

#: CPU ops whose host wait is a copy (a blocking ``.to()``/``.cpu()``/``copy_``), not a sync.
COPY_OPS = frozenset({"aten::copy_", "aten::_to_copy", "aten::to", "aten::_copy_from"})

#: Host spans of a collective (the CPU side of NCCL or gloo calls).
COMM_PREFIXES = ("nccl:", "c10d::", "gloo:", "record_param_comms", "c10d:")

_MEMCPY_KIND = {"htod": "h2d", "dtoh": "d2h", "dtod": "d2d", "ptop": "p2p", "htoh": "h2h"}
_MEMCPY_NAME = re.compile(r"Memcpy\s+(\w+)\s*(?:\((\w+)\s*->\s*(\w+)\))?", re.IGNORECASE)
_FRAME = re.compile(r"^(.*)\((\d+)\):\s*(.*)$")

#: Paths that are never the user's own code (a frame there is the library's, not a line to fix).
#: (``/Lib/``: the standard library on Windows, ``Python311/Lib/threading.py``).
_LIBRARY_MARKS = ("site-packages", "dist-packages", "/torch/", "/lib/python3", "/Lib/", "<frozen",
                  "<string>")  # fmt: skip


def memcpy_kind(name: str) -> tuple[str, str]:
    """``(direction, memory)`` of a Memcpy activity's name: ``"Memcpy HtoD (Pageable -> Device)"``
    is ``("h2d", "pageable")``; memory is ``""`` where the trace does not say (old CUPTI, ROCm)."""
    m = _MEMCPY_NAME.match(name)
    if m is None:
        return "", ""
    direction = _MEMCPY_KIND.get(m.group(1).lower(), "")
    host = {"h2d": m.group(2), "d2h": m.group(3)}.get(direction) or ""
    memory = host.lower() if host.lower() in ("pageable", "pinned") else ""
    return direction, memory


def is_input(name: str) -> bool:
    """The host fetching a batch: torch.profiler names each ``__next__`` of a DataLoader's
    iterator ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`` (or Multi...)."""
    return name.startswith("enumerate(DataLoader)") and "__next__" in name


@dataclass(frozen=True, slots=True)
class Where:
    """Where a cost belongs: the user's line when the trace has Python stacks, and always the
    CPU op (or runtime call) that was running."""

    op: str
    file: str | None = None
    line: int | None = None
    function: str | None = None

    def label(self) -> str:
        if self.file is None:
            return self.op
        return f"{self.file}:{self.line} ({self.function})"

    def key(self) -> str:
        return self.label() if self.file is None else f"{self.label()} [{self.op}]"


#: The packages a training step's stack passes through that are never the line to fix.
#: NB: torch's Python tracer writes a frame's path relative to the ``sys.path`` entry it was
#: found under (``torch/nn/modules/module.py``, ``vllm/engine/llm_engine.py``,
#: ``threading.py``), so an installed package is known by its first component, not a folder.
LIBRARIES = frozenset(
    {
        "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "torchrec", "torch_xla",
        "functorch", "tensordict", "triton", "numpy", "transformers", "accelerate", "datasets",
        "tokenizers", "safetensors", "peft", "diffusers", "timm", "lightning", "pytorch_lightning",
        "lightning_fabric", "deepspeed", "apex", "fairscale", "xformers", "flash_attn", "megatron",
        "vllm", "sglang", "einops", "tqdm", "PIL", "hydra", "omegaconf", "wandb", "tensorboard",
        "fbgemm_gpu", "ray", "gpuwatch", "profilers",
    }
)  # fmt: skip
#: Standard-library modules, less the names a user's own script is often given.
_STDLIB = frozenset(sys.stdlib_module_names) - {"code", "trace", "profile", "test", "this"}


@lru_cache(1 << 16)  # NB: a trace names each frame thousands of times
def user_frame(frame: str) -> tuple[str, int, str] | None:
    """``(file, line, function)`` of a frame written ``path/to/file.py(123): fn`` when it is the
    user's own code (not torch, not an installed package, not the standard library)."""
    m = _FRAME.match(frame.strip())
    if m is None:
        return None
    path = m.group(1).replace("\\", "/")  # a trace recorded on Windows writes backslashes
    if path.startswith(("<built-in", "nn.Module", "<")) or "(" in path:
        return None
    if any(mark in path for mark in _LIBRARY_MARKS):
        return None
    top = path.split("/", 1)[0].removesuffix(".py")
    if not path.startswith("/") and (top in LIBRARIES or top in _STDLIB):
        return None
    return path, int(m.group(2)), m.group(3)


class Activities:
    """The GPU activities (kernels, memcpys, memsets on a stream) as int64 columns, a row each
    (``kind``: an index in :data:`KINDS`, ``name``: an index in ``names``): a large trace holds
    hundreds of thousands, and a tuple each was most of the analysis's memory."""

    launched: Ints
    """The start of each one's launch call (:data:`NO_CALL`: none in the trace)."""
    places: Ints
    """Where each one's launch call was made: an id in ``wheres`` (-1: no launch in the trace;
    the reader sets these, and keeps no host call past them)."""
    wheres: list[Where]

    def __init__(self, data: array[int], ids: dict[str, int]) -> None:
        """``data``: a row of 8 a row (kind, name, device, stream, start, end, correlation, bytes);
        ``ids``: the names' ids. NB: the columns are views of ``data`` (a copy: its size again)."""
        cols = np.frombuffer(data, np.int64).reshape(-1, 8).T
        self.kind, self.name, self.device, self.stream, self.start, self.end = cols[:6]
        self.correlation, self.bytes, self.names = cols[6], cols[7], list(ids)
        """-1: none (no launch has it)."""
        self.copy_kinds = [memcpy_kind(n) for n in self.names]
        """Per name, :func:`memcpy_kind` (a memcpy's direction and host memory)."""
        # NB: NCCL names every kernel ncclKernel_*/ncclDevKernel_*
        nccl = np.array(
            [n.startswith(("nccl", "void nccl")) or "ncclKernel" in n for n in self.names]
        )
        self.nccl = (self.kind == KINDS.index(KERNEL)) & nccl[self.name]


class Calls:
    """Host calls (runtime calls, CPU ops) keyed by correlation or external id (``first``: the
    first call of a key wins, else the last), a column each of a row's key, name, tid, start,
    end, ext id and stack (the old traces' ``Call stack``): names' ids int32, a CPU op's ext id
    its key, kept once (``first``). A large trace holds hundreds of thousands."""

    def __init__(self, names: dict[str, int], first: bool) -> None:
        self.ids, self.first, self.names = names, first, list[str]()
        self.data = [array(c) for c in ("qiiqq" if first else "qiiqqq") + "i"]
        self.known = self.rows = np.zeros(0, np.int64)
        self.cols = [np.zeros(0, np.int64)] * 7

    def append(self, cols: Sequence[Any]) -> None:
        """Adds rows given by column (the 7, or 6 without the ext id when ``first``)."""
        for arr, col in zip(self.data, cols, strict=True):
            arr.frombytes(np.asarray(col, arr.typecode).tobytes())

    def seal(self) -> None:
        """Index the keys (once every call is in)."""
        self.names = list(self.ids)
        cols = [np.frombuffer(a, a.typecode) for a in self.data]
        self.cols = cols[:5] + cols[:1] + cols[5:] if self.first else cols
        order = np.argsort(self.cols[0], kind="stable")
        key = self.cols[0][order]
        # NB: sorted stably, the first row of a key heads its run and the last one ends it
        heads = np.flatnonzero(np.r_[True, key[1:] != key[:-1]][: len(key)])
        pick = heads if self.first else np.r_[heads[1:], len(key)][: len(heads)] - 1
        self.known, self.rows = key[pick], order[pick].astype(np.int32)

    def at(self, rows: Ints) -> Ints:
        """The rows (int64, 7 columns each)."""
        return np.stack([c[rows] for c in self.cols], 1)

    def rows_of(self, keys: Ints) -> Ints:
        """The row of each key (-1: none)."""
        if not len(self.known):
            return np.full(len(keys), -1, np.int64)
        i = np.minimum(np.searchsorted(self.known, keys), len(self.known) - 1)
        return np.where(self.known[i] == keys, self.rows[i], -1)


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    number: int | None
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class HostSpan:
    """A stretch of host time with a cause: ``input``, ``sync``, ``copy`` or ``comm``."""

    cause: str
    start_ns: int
    end_ns: int
    where: Where
    detail: str = ""


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace, read: every GPU activity, the host calls that launched them, the host's
    waits, the steps, and where the user's code was (``lines_at``)."""

    path: str
    rank: int
    gpus: dict[int, str]
    base_us: float
    """The trace's first timestamp (us): times here count from it."""
    activities: Activities
    names: list[str]
    """The host calls' names, threads and stacks (ids in the reader's rows)."""
    steps: list[Step]
    spans: list[HostSpan]
    span_ns: tuple[int, int]
    """The first and last moment of anything in the trace."""
    python: dict[str, tuple[Ints, Ints]] = field(default_factory=dict)
    """Per thread, the user's innermost Python frame over time: segment starts and frame ids
    (in ``frames``; -1: none)."""
    frames: list[tuple[str, int, str]] = field(default_factory=list)
    main_tid: str = ""
    """The thread that records the steps (or launches the most)."""
    notes: tuple[str, ...] = ()
    has_stacks: bool = False
