"""The user's line of a copy or sync that a compiled graph made.

torch.compile runs a graph as torch.fx's generated code (``<eval_with_key>.N``: backends
``eager``, ``aot_eager``, and the graphs AOTAutograd runs as they are) inside the frame of the
compiled function, whose line is its ``def`` while the graph runs: every op of the graph would be
charged there. Each node of the graph keeps the stack dynamo traced it at
(``node.meta["stack_trace"]``) and the generated code's lines name their nodes
(``GraphModule._lineno_map``, relative to the ``forward``'s first line), so the op's own line is
known: ``y = x.to("cuda")``, not ``def step(x):``.

Read only where a copy or sync is counted, never per op; each generated line once per profile.
No torch import: the graph module is the frame's ``self``, read by duck typing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from profilers.counting.user_code import UserCode

GRAPH_FILE = "<eval_with_key>"
"""How torch.fx names the code it generates for a graph module (``<eval_with_key>.3`` and, for
AOTAutograd's graphs, ``<eval_with_key>.3 from .../proxy_tensor.py:1738 in wrapped``)."""

_INTERPRETER = "torch/fx/interpreter.py"
"""Where torch.fx's Interpreter runs a graph node by node (``run_node(self, n)``)."""

_ENTRY = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+?)\s*$')
"""One frame of a node's ``stack_trace`` (Python's traceback format, outermost first)."""


@dataclass(frozen=True)
class GraphPlace:
    """Where dynamo traced a graph's op: the innermost user frame of its stack, the user frames
    around it (innermost first, the line itself left out) and the library frame below it."""

    file: str
    """As Python named it (the key the counting tables use): ``display`` gives the report's."""
    line: int
    function: str
    callers: tuple[tuple[str, int, str], ...]
    library: tuple[str, int, str] | None
    """``(file, line, function)`` as :meth:`UserCode.library_frame` gives it, or None."""


class GraphLines:
    """The places of compiled graphs' ops, for one profile."""

    def __init__(self, user: UserCode) -> None:
        self.user = user
        self._known: dict[tuple[CodeType, int], GraphPlace | None] = {}
        self._nodes: dict[int, tuple[object, GraphPlace | None]] = {}

    def place(self, frame: FrameType | None) -> GraphPlace | None:
        """The user's line a compiled graph traced the op called from ``frame`` at; None when
        no graph's generated code is between ``frame`` and the user's innermost frame (the op
        is the user's own, or a library's), or the graph kept no stack for it."""
        while frame is not None:
            code = frame.f_code
            name = code.co_filename
            if name.startswith(GRAPH_FILE):
                key = (code, frame.f_lineno)
                if key not in self._known:
                    self._known[key] = self._read(frame)
                found = self._known[key]
                if found is not None:
                    return found
            elif code.co_name == "run_node" and name.endswith(_INTERPRETER):
                found = self._node(frame.f_locals.get("n"))
                if found is not None:
                    return found
            elif self.user(name):
                return None
            frame = frame.f_back
        return None

    def _node(self, node: object) -> GraphPlace | None:
        """The place of a graph node torch.fx's Interpreter runs (``aot_eager`` runs its graphs
        so on torch 2.9: no generated code to read a line of), from its own stack."""
        if node is None:
            return None
        key = id(node)
        if key not in self._nodes:
            trace = getattr(node, "meta", {}).get("stack_trace")
            # NB: the node is kept with its place: its id is never another's while profiled
            self._nodes[key] = (node, self._parse(trace) if isinstance(trace, str) else None)
        return self._nodes[key][1]

    def _read(self, frame: FrameType) -> GraphPlace | None:
        gm: Any = frame.f_locals.get("self")
        lines = getattr(gm, "_lineno_map", None)
        graph = getattr(gm, "graph", None)
        if not isinstance(lines, dict) or graph is None:
            return None
        index = lines.get(frame.f_lineno - frame.f_code.co_firstlineno)
        if not isinstance(index, int):
            return None
        for i, node in enumerate(graph.nodes):
            if i == index:
                trace = getattr(node, "meta", {}).get("stack_trace")
                return self._parse(trace) if isinstance(trace, str) else None
        return None

    def _parse(self, trace: str) -> GraphPlace | None:
        entries = []
        for text in trace.splitlines():
            m = _ENTRY.match(text)
            if m is not None:
                entries.append((m["file"], int(m["line"]), m["function"]))
        users = [i for i, (file, _, _) in enumerate(entries) if self.user(file)]
        if not users:
            return None
        inner = users[-1]
        file, line, function = entries[inner]
        callers = tuple(entries[i] for i in reversed(users[:-1]))
        return GraphPlace(
            file, line, function, callers, self.user.library_entry(entries[inner + 1 :])
        )
