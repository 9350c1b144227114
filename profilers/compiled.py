"""torch.compile under the profiler: what dynamo did while the profile ran.

Read from dynamo's own records when the profile starts and when its report is built, never per
op. NB: dynamo will not trace a frame while a ``TorchDispatchMode`` that does not set
``ignore_compile_internals`` is on the stack (torch/_dynamo/convert_frame.py, "non-infra torch
dispatch mode present"): the code runs eager, every op through the mode. gpuwatch's dispatch
mode (kernel timing, ``--count-ops``, ``--memory``) and ``--fake-cuda``'s keep that default on
purpose, so that every copy and sync inside compiled code is still seen: the counts are of the
eager code, and the report says so. The fast path of ``--no-kernel-timing`` is no mode:
dynamo compiles under it, and the report says what it compiled and where its graphs broke.

Under a mode of ours the profile sets torch.compiler's own ``force_eager`` stance
(:func:`run_eager`): dynamo would skip each frame anyway, but only after a check per frame per
call (a small MLP's compiled forward counted at 1.30-1.37x the eager model's cost; 1.16-1.21x
with the stance: benchmarks/compiled_counting.py), and ``fullgraph=True`` would raise, finding no
compiled frame; with the stance compiled functions run as plain Python, their calls counted.
"""

from __future__ import annotations

import functools
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import CodeType

from profilers.registry import patch, switch
from profilers.timing.replayed import simulated_gpus
from profilers.torch_private import dynamo_loaded

REASON_CHARS = 300
"""A graph break's reason is dynamo's first line of it, cut at this many characters."""

MAX_REASONS = 20
"""The most frequent reasons kept in a report (a run's reasons are few; a bound all the same)."""


@dataclass(frozen=True)
class DynamoMark:
    """Dynamo's records when the profile started (all 0 where dynamo was not loaded yet)."""

    frames: int = 0
    """How many code objects dynamo had been handed (its ``input_codes``, in order)."""
    graphs: int = 0
    breaks: Counter[str] = field(default_factory=Counter)
    eager_under: str | None = None
    """The dispatch mode that keeps dynamo from compiling while the profile runs; None on the
    fast path of ``--no-kernel-timing`` (no mode)."""
    cudagraph_skips: int = 0
    """How many compiled graphs inductor had run without CUDA graphs (``mode="reduce-overhead"``
    on a CPU tensor, a mutated input, ...): its ``cudagraph_skips`` counter."""


CodeRef = Callable[[], CodeType | None]  # a weak reference to a code object


def _counters() -> Mapping[str, Counter[str]] | None:
    counters: Mapping[str, Counter[str]] | None = dynamo_loaded("torch._dynamo.utils.counters")
    return counters


def _handed() -> list[CodeRef]:
    """Weak references to the code objects dynamo has been handed, in order (its
    ``input_codes``: once per code, not per call; a frame it skipped under a mode included;
    NB: append-only, so the codes since a mark are those after its count)."""
    seen: object = getattr(dynamo_loaded("torch._dynamo.convert_frame.input_codes"), "seen", None)
    return list(seen) if isinstance(seen, list) else []


_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<function>.+?)_at_(?P<line>\d+)$")
"""The name of the function dynamo makes for the code after a graph break: the broken
function's name and the break's line (torch/_dynamo/resume_execution.py)."""


def breaks_in(name: str) -> str:
    """The user's function a resume function is of (a resume of a resume names it too)."""
    inner = _RESUME.match(name)
    return breaks_in(inner["function"]) if inner is not None else name


def _by_line(
    codes: list[CodeRef], user: Callable[[str], bool], display: Callable[[str], str]
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """``(graph-break lines, recompiled functions)`` of the user's code among ``codes``: each
    break where dynamo resumed after it (its resume function's name gives the line), each
    function or resume dynamo holds more than one compiled version of (cache entries: one
    per set of guards, the first compile and each recompile)."""
    path = "torch._C._dynamo.eval_frame._debug_get_cache_entry_list"
    entries: Callable[[CodeType], list[object]] | None = dynamo_loaded(path)
    breaks: Counter[tuple[str, int, str]] = Counter()
    recompiled: list[dict[str, object]] = []
    for ref in codes:
        code = ref()
        if code is None or not user(code.co_filename):
            continue
        file = display(code.co_filename)
        resumed = _RESUME.match(code.co_name)
        if resumed is not None:
            breaks[(file, int(resumed["line"]), breaks_in(resumed["function"]))] += 1
        versions = len(entries(code)) if entries is not None else 0
        if versions > 1:
            line = int(resumed["line"]) if resumed is not None else code.co_firstlineno
            function = code.co_name
            if resumed is not None:
                function = f"{breaks_in(resumed['function'])} after its graph break"
            recompiled.append(
                {"file": file, "line": line, "function": function, "compiles": versions}
            )
    lines = [{"file": f, "line": n, "function": fn} for (f, n, fn) in sorted(breaks)]
    return lines[:MAX_REASONS], recompiled[:MAX_REASONS]


class EagerCalls:
    """Calls of torch.compile'd functions run eager under the profile's ``force_eager`` stance
    (none where the stance could not be set: a torch without it, a profile entered inside a
    compiled region)."""

    def __init__(self) -> None:
        self.count = 0
        self._forced = False

    def force(self, stack: ExitStack) -> None:
        """Sets the stance (once; dynamo must be loaded) and counts the compiled calls that
        run under it, until ``stack`` closes; the stance the script had is put back then,
        unless the script set one of its own meanwhile."""
        if self._forced:
            return
        self._forced = True
        pick: Callable[[object], object] | None
        pick = dynamo_loaded("torch._dynamo.eval_frame._callback_from_stance")
        set_stance = getattr(sys.modules.get("torch.compiler"), "set_stance", None)
        if pick is None or set_stance is None:
            return
        try:
            stance = set_stance("force_eager")
        except RuntimeError:  # "attempted to set_stance in a torch.compile region"
            return

        def put_back() -> None:
            if _stance_now() != "force_eager":
                return  # the script set its own meanwhile: kept
            try:
                stance.__exit__(None, None, None)
            except RuntimeError:  # left inside a compiled region: torch refuses the change there
                pass

        switch("profiler", stack, "torch.compiler.set_stance('force_eager')", put_back)

        def counted(callback: object) -> object:
            # NB: once per call of a compiled function, never per op; torch.compiler.disable's
            # wrappers (callback None) and run-only ones (False) come here too: not counted
            if callback is not None and callback is not False and _stance_now() == "force_eager":
                self.count += 1
            return pick(callback)

        module = sys.modules["torch._dynamo.eval_frame"]
        patch("profiler", stack, module, "_callback_from_stance", counted)


def _stance_now() -> str | None:
    return getattr(dynamo_loaded("torch._dynamo.eval_frame._stance"), "stance", None)


def run_eager(stack: ExitStack, mark: DynamoMark) -> EagerCalls | None:
    """Under a dispatch mode of ours (``mark.eager_under``), compiled code runs eager by
    torch.compiler's ``force_eager`` stance (module doc): set now where dynamo is loaded,
    else at the script's first ``torch.compile`` (dynamo is 3 s to import: never for a
    script that compiles nothing). None on the fast path (dynamo compiles there)."""
    if mark.eager_under is None:
        return None
    calls = EagerCalls()
    if "torch._dynamo.eval_frame" in sys.modules:
        calls.force(stack)
        return calls
    import torch

    compile_: Callable[..., object] = torch.compile

    @functools.wraps(compile_)
    def compile_then_force(*args: object, **kwargs: object) -> object:
        out = compile_(*args, **kwargs)  # dynamo loaded now
        calls.force(stack)
        return out

    patch("profiler", stack, torch, "compile", compile_then_force)
    return calls


def dynamo_mark(counting: str) -> DynamoMark:
    """Dynamo's records now (the profile's start), and which dispatch mode the profile runs
    under: ``--fake-cuda``'s (on for the whole run, whatever the counting path) or
    gpuwatch's own (``counting`` is ``"every_op"``)."""
    if simulated_gpus() is not None:
        under: str | None = "--fake-cuda's dispatch mode"
    else:
        under = "gpuwatch's dispatch mode" if counting == "every_op" else None
    counters = _counters()
    if counters is None:
        return DynamoMark(eager_under=under)
    return DynamoMark(
        frames=len(_handed()),
        graphs=int(counters["stats"]["unique_graphs"]),
        breaks=Counter(counters["graph_break"]),
        eager_under=under,
        cudagraph_skips=_cudagraph_skips(counters),
    )


def _cudagraph_skips(counters: Mapping[str, Counter[str]]) -> int:
    """Inductor's count of graphs it compiled for CUDA graphs and ran without them (NB: it
    logs the reason only where ``TORCH_LOGS=cudagraphs`` is on; the count is kept always)."""
    return int(counters["inductor"].get("cudagraph_skips", 0))


def compiled_section(
    start: DynamoMark,
    user: Callable[[str], bool],
    display: Callable[[str], str],
    eager: EagerCalls | None = None,
) -> dict[str, object] | None:
    """What dynamo did since ``start``: ``{"frames", "graphs", "graph_breaks", "ran_eager",
    "graph_break_lines", "recompiled", "cudagraph_skips"}``, or None where the script compiled nothing (dynamo was handed no frame). ``ran_eager``
    names the dispatch mode under which dynamo compiled no graph of the frames it was handed
    (they ran eager), else None."""
    counters = _counters()
    if counters is None:
        return None
    handed = _handed()[start.frames :]
    frames = len(handed)
    graphs = int(counters["stats"]["unique_graphs"]) - start.graphs
    eager_calls = eager.count if eager is not None else 0
    if frames <= 0 and graphs <= 0 and eager_calls <= 0:
        return None
    breaks: Counter[str] = Counter()
    for reason, count in (Counter(counters["graph_break"]) - start.breaks).items():
        text = str(reason).strip().splitlines()
        breaks[text[0][:REASON_CHARS] if text else "(no reason given)"] += int(count)
    lines, recompiled = _by_line(handed, user, display)
    return {
        "frames": frames,
        "graphs": max(graphs, 0),
        "graph_breaks": [
            {"reason": reason, "count": count} for reason, count in breaks.most_common(MAX_REASONS)
        ],
        "graph_break_lines": lines,
        "recompiled": recompiled,
        "ran_eager": start.eager_under if graphs <= 0 else None,
        "cudagraph_skips": max(_cudagraph_skips(counters) - start.cudagraph_skips, 0),
        "eager_calls": eager_calls,
    }
