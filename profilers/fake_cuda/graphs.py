"""CUDA graphs and CUDA generators on the fake GPU.

A capture runs each op on the fake GPU as always (its outputs are fake tensors of the shapes,
dtypes and devices a GPU gives, as the graph pool's tensors are on a GPU, whose values are
written only when the graph runs) and records it as the op reached the fake GPU. ``replay()``
dispatches the recorded ops again from the replay's line, so the profiler counts each replay's
kernels (and any GPU-to-GPU or pinned copy the graph holds) there; each op hands back the very
tensor it made at capture, as a GPU writes into the same memory. What a GPU cannot capture (a
host wait, a copy to or from pageable host memory) raises PyTorch's CUDA error and invalidates
the capture, and the fake GPU remembers the user line that did it (``options.fake_cuda``).
"""

from __future__ import annotations

import functools
import itertools
import sys
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.cuda.graphs
from torch.utils._pytree import tree_flatten

from profilers.counting.ops import METADATA_OPS
from profilers.counting.user_code import UserCode
from profilers.registry import patch

if TYPE_CHECKING:
    from profilers.fake_cuda.harness import FakeCuda
    from profilers.fake_cuda.mode import Args, Kwargs, Op

CAPTURE_ERROR = (
    "CUDA error: operation not permitted when stream is capturing\n"
    "Search for `cudaErrorStreamCaptureUnsupported' in "
    "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more "
    "information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"
)
"""PyTorch's error (c10/cuda/CUDAException.cpp) for cudaErrorStreamCaptureUnsupported: what a
sync (cudaStreamSynchronize) or a pageable copy (cudaMemcpyAsync) returns while capturing."""

INVALIDATED_ERROR = "CUDA error: operation failed due to a previous error during capture"
"""What cudaStreamEndCapture returns (cudaErrorStreamCaptureInvalidated) after such an error."""

_ERROR_TYPE: type[RuntimeError] = getattr(torch, "AcceleratorError", RuntimeError)
"""torch raises CUDA errors as ``torch.AcceleratorError`` (a RuntimeError) since 2.8."""


@dataclass
class _Op:
    func: Op
    args: Args
    kwargs: Kwargs
    out: object


class Graphs:
    """The fake GPU's capture under way (one per process, as on a GPU), the replay under way
    per thread, and the lines whose capture failed."""

    def __init__(self) -> None:
        self.capturing: FakeCUDAGraph | None = None
        self.busy = 0
        """Captures and replays under way: the fake GPU's dispatch looks here only then."""
        self.replaying = threading.local()
        self.errors: list[dict[str, str | int]] = []
        self.captures = 0
        self.replays = 0
        self._lock = threading.Lock()
        self._user = UserCode()

    def recorded(
        self, func: Op, args: Args, kwargs: Kwargs, out: object, on_gpu: Callable[[object], bool]
    ) -> None:
        """An op the fake GPU ran (any thread: autograd's device threads capture backward on
        the capture's stream too); recorded when it touched a GPU tensor."""
        graph = self.capturing
        if graph is None or graph.error is not None or func in METADATA_OPS:
            return
        if any(on_gpu(t) for t in tree_flatten((args, kwargs, out))[0]):
            with self._lock:
                graph.ops.append(_Op(func, args, kwargs, out))

    def replayed(self, func: Op) -> tuple[bool, object]:
        """``(True, out)`` when ``func`` is the op a replay on this thread is running now."""
        op: _Op | None = getattr(self.replaying, "op", None)
        if op is None or op.func is not func:
            return False, None
        self.replaying.op = None
        return True, op.out

    def forbid(self, what: str) -> None:
        """Raises PyTorch's error if a capture is under way: ``what`` (a host wait or a pageable
        copy) cannot be captured. The capture is invalidated, as on a GPU."""
        graph = self.capturing
        if graph is None or getattr(self.replaying, "op", None) is not None:
            return
        frame = self._user.first(sys._getframe(1))
        file, line = "<unknown>", 0
        if frame is not None:
            file, line = self._user.display(frame.f_code.co_filename), frame.f_lineno
        graph.error = f"{what} at {file}:{line}"
        with self._lock:
            self.errors.append({"file": file, "line": line, "what": what})
        raise _ERROR_TYPE(
            f"{CAPTURE_ERROR}\nthe fake GPU: {graph.error} makes the host wait for the "
            "GPU or copies pageable host memory, which a CUDA graph capture does not allow"
        )

    def to_dict(self) -> dict[str, object]:
        return {"captures": self.captures, "replays": self.replays, "capture_errors": self.errors}


GRAPHS: Graphs | None = None
"""The harness's, while one is on (FakeStream and FakeEvent reach it here)."""


def forbid_while_capturing(what: str) -> None:
    if GRAPHS is not None:
        GRAPHS.forbid(what)


_pools = itertools.count(1)


class FakeCUDAGraph:
    """``torch.cuda.CUDAGraph`` on the fake GPU (see the module's text)."""

    def __init__(self, keep_graph: bool = False) -> None:
        self.ops: list[_Op] = []
        self.error: str | None = None
        self._captured = False
        self._pool: tuple[int, int] = (0, next(_pools))

    def _graphs(self) -> Graphs:
        if GRAPHS is None:
            raise RuntimeError("the fake GPU: this CUDA graph outlived the fake GPU")
        return GRAPHS

    def capture_begin(
        self, pool: tuple[int, int] | None = None, capture_error_mode: str = "global", **_: object
    ) -> None:
        graphs = self._graphs()
        if self._captured:
            raise RuntimeError(
                "This CUDAGraph instance already owns a captured graph. To capture a new "
                "graph, create a new instance."
            )
        if graphs.capturing is not None:
            raise RuntimeError("the fake GPU: one CUDA graph capture at a time")
        if pool is not None:
            self._pool = (int(pool[0]), int(pool[1]))
        self.ops, self.error = [], None
        graphs.capturing = self
        graphs.busy += 1

    def capture_end(self) -> None:
        graphs = self._graphs()
        if graphs.capturing is not self:
            raise RuntimeError("capture_end() called before capture_begin().")
        graphs.capturing = None
        graphs.busy -= 1
        if self.error is not None:
            self.ops = []
            raise _ERROR_TYPE(f"{INVALIDATED_ERROR} ({self.error})")
        self._captured = True
        graphs.captures += 1

    def instantiate(self) -> None:
        if not self._captured:
            raise RuntimeError("capture_end() must have been called before calling instantiate")

    def replay(self) -> None:
        """The captured kernels, again: each op dispatched from this line, counted as a GPU runs
        it (no host wait), writing into the tensors it made at capture."""
        if not self._captured:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
        graphs = self._graphs()
        graphs.replays += 1
        graphs.busy += 1
        try:
            # NB: below autograd and view tracking: the ops hand back tensors autograd already
            # knows (the capture's), as the graph's kernels write into them.
            with torch._C._AutoDispatchBelowADInplaceOrView():
                for op in self.ops:
                    graphs.replaying.op = op
                    op.func(*op.args, **op.kwargs)
        finally:
            graphs.replaying.op = None
            graphs.busy -= 1

    def reset(self) -> None:
        self.ops, self._captured, self.error = [], False, None

    def pool(self) -> tuple[int, int]:
        return self._pool

    def enable_debug_mode(self) -> None:
        pass

    def debug_dump(self, debug_path: str) -> None:
        raise NotImplementedError(
            "the fake GPU does not simulate torch.cuda.CUDAGraph.debug_dump; run it on a GPU"
        )

    def register_generator_state(self, generator: object) -> None:
        pass


class FakeGraphContext:
    """``torch.cuda.graph(g)``: a sync, then the capture on a side stream.

    NB: PyTorch's ``graph.__exit__`` ends the capture whatever happened inside; after an error
    that error is "operation failed due to a previous error during capture", chained to the
    first. The fake ends a failed capture quietly, so the script's error (and the report's) is
    the line that could not be captured."""

    def __init__(
        self,
        cuda_graph: FakeCUDAGraph,
        pool: tuple[int, int] | None = None,
        stream: object = None,
        capture_error_mode: str = "global",
        **_: object,
    ) -> None:
        self.cuda_graph = cuda_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        torch.cuda.synchronize()  # as torch.cuda.graph does: one counted sync on this line
        self.cuda_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, exc_type: object, *exc: object) -> None:
        graph: FakeCUDAGraph = self.cuda_graph
        if exc_type is not None and GRAPHS is not None and GRAPHS.capturing is graph:
            GRAPHS.capturing = None
            GRAPHS.busy -= 1
            graph.ops = []
            return
        self.cuda_graph.capture_end()


# -- generators ---------------------------------------------------------------------------------


class _GeneratorType(type(torch._C.Generator)):  # type: ignore[misc]
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch._C.Generator)


class FakeGenerator(torch._C.Generator):
    """A CUDA generator of the fake GPU: seeded, with a CUDA generator's 16-byte state (the seed
    and the Philox offset). NB: a host generator underneath, which torch's random ops accept;
    with placeholders random ops on the fake GPU draw no numbers; with real values they draw
    from it (fake_cuda/real.py), and the state's offset bytes name the host state saved at
    ``get_state()``, so that ``set_state()`` returns to that very draw, as a GPU's Philox offset
    does (``torch.utils.checkpoint`` recomputes dropout masks that way)."""

    index: int

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", self.index)

    def get_state(self) -> torch.Tensor:
        seed = self.initial_seed()
        mark = next(_marks)
        with _saved_lock:
            _saved[mark] = super().get_state()
            while len(_saved) > _SAVED_STATES:
                _saved.pop(next(iter(_saved)))
        raw = seed.to_bytes(8, "little") + mark.to_bytes(8, "little")
        return torch.tensor(list(raw), dtype=torch.uint8)

    def set_state(self, new_state: torch.Tensor) -> FakeGenerator:
        raw = bytes(new_state.to("cpu").tolist())
        saved = _saved.get(int.from_bytes(raw[8:16], "little"))
        if saved is not None:
            super().set_state(saved)
        else:  # a state from elsewhere (a GPU's checkpoint): its seed
            self.manual_seed(int.from_bytes(raw[:8], "little"))
        return self

    def __repr__(self) -> str:
        return f"<torch._C.Generator object (cuda:{self.index}, gpuwatch --fake-cuda)>"


_SAVED_STATES = 256
"""Host states kept for ``set_state`` (5 KB each; a state is set back within a step)."""
_saved: dict[int, torch.Tensor] = {}
_saved_lock = threading.Lock()
_marks = itertools.count(1)

DEFAULT_SEED = 67280421310721
"""The seed a CUDA generator starts with (c10/core/GeneratorImpl.h, default_rng_seed_val)."""


def new_generator(index: int) -> FakeGenerator:
    g = FakeGenerator()
    g.index = index
    g.manual_seed(DEFAULT_SEED)
    return g


def patch_graphs_and_generators(stack: ExitStack, harness: FakeCuda) -> None:
    """``torch.cuda.CUDAGraph``, ``torch.cuda.graph``, ``graph_pool_handle``,
    ``is_current_stream_capturing`` (``make_graphed_callables`` is torch's own, on these), and
    ``torch.Generator(device="cuda")`` with ``torch.cuda.default_generators``."""
    global GRAPHS
    graphs = GRAPHS = harness.graphs

    set_attr = functools.partial(patch, "fake_cuda", stack)

    def _release() -> None:
        global GRAPHS
        GRAPHS = None

    def capturing() -> bool:
        return graphs.capturing is not None

    stack.callback(_release)
    for owner in (torch.cuda, torch.cuda.graphs):
        set_attr(owner, "CUDAGraph", FakeCUDAGraph)
        set_attr(owner, "graph", FakeGraphContext)
        set_attr(owner, "graph_pool_handle", lambda: (0, next(_pools)))
        set_attr(owner, "is_current_stream_capturing", capturing)
    set_attr(torch.cuda.graphs, "_cuda_isCurrentStreamCapturing", capturing)

    host_generator = torch._C.Generator

    class Generator(torch._C.Generator, metaclass=_GeneratorType):
        """``torch.Generator``: on ``cuda`` a fake GPU's generator, elsewhere torch's own."""

        def __new__(cls, device: torch.device | str | int = "cpu") -> Any:
            d = torch.device(device)
            if d.type != "cuda":
                return host_generator(d)
            index = harness.current_device() if d.index is None else d.index
            harness.check_device(torch.device("cuda", index))
            return new_generator(index)

    defaults = tuple(new_generator(i) for i in range(harness.devices))
    set_attr(torch, "Generator", Generator)
    set_attr(torch.cuda, "default_generators", defaults)
