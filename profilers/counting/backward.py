"""Charging backward ops to the forward line whose op made their autograd node.

Forward: autograd numbers each node from a per-thread counter before the op that makes it reaches
the dispatch mode; when a thread's ops move to a new line, :func:`note_forward` notes (counter,
line, first op). Backward: the node running (a C call per backward op) is looked up by number, in
the ``.backward()`` caller's thread first, and taken only if one of the line's ops can have made
a node of that kind (node numbers repeat across threads).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right

import torch
from torch.autograd.graph import Node

from profilers.counting.threads import BackwardOps, ThreadState, ThreadStates
from profilers.stats import LineStats, OpCount
from profilers.torch_private import sequence_nr

_STEMS: dict[type, str] = {}
"""Node type -> _node_stem of its name, for types named like their nodes (one type per kind)."""
_grad_enabled = torch.is_grad_enabled

FORWARD_ENTRIES = 50_000
"""Line changes per thread remembered for charging backward ops to forward lines (the oldest
half is dropped past twice this): a graph older than that is charged to .backward() alone."""

_NO_FORWARD_OP = 1 << 63
"""Nodes numbered from here (AccumulateGrad: UINT64_MAX) were made by no forward op."""

_BACKWARD_SUFFIX = re.compile(r"Backward\d*$")


def _node_stem(name: str) -> str:
    """``"NativeLayerNormBackward0"`` -> ``"nativelayernorm"``."""
    return _BACKWARD_SUFFIX.sub("", name.rsplit("::", 1)[-1]).replace("_", "").lower()


def _stem_of(node: Node) -> str:
    name = node.name()
    stem = _node_stem(name)
    kind = type(node)
    if kind.__name__ == name.rsplit("::", 1)[-1]:
        _STEMS[kind] = stem
    return stem


def _made_by(op: str, stem: str) -> bool:
    """Whether an op (``"native_layer_norm.default"``) can have made a node of that stem; a
    prefix, for names like ``nll_loss_forward`` whose node is ``NllLossBackward0``."""
    return bool(stem) and op.split(".", 1)[0].replace("_", "").lower().startswith(stem)


def note_forward(st: ThreadState, line: LineStats, op: str) -> None:
    """The thread's ops moved to ``line`` (first ``op``): nodes made from here are its."""
    if not _grad_enabled() or sequence_nr is None:
        return  # no node is made: the line's ops cannot be in a backward
    st.fwd_line = line
    numbers, lines, ops = st.fwd
    if len(numbers) >= 2 * FORWARD_ENTRIES:
        keep = len(numbers) - FORWARD_ENTRIES
        numbers, lines, ops = numbers[keep:], lines[keep:], ops[keep:]
        st.fwd = (numbers, lines, ops)
    lines.append(line)
    ops.append(op)
    # The counter already counts this op's own node, if it made one (autograd runs first).
    numbers.append(sequence_nr())


def backward_ops_of(
    threads: ThreadStates,
    backward_state: ThreadState | None,
    st: ThreadState,
    line: LineStats,
    node: Node,
) -> dict[str, OpCount] | None:
    """Where this thread counts the ops of autograd ``node`` run at ``line`` (the
    .backward() line): entries shared with the forward line whose op made the node, or
    None when no forward line is known (they then count at ``line`` alone).

    The node is looked up in the .backward() caller's thread first, then in the others
    (DataParallel replicas); a line is taken only if one of its ops can have made such a
    node, since node numbers are per thread and repeat across threads."""
    number = node._sequence_nr()
    if number >= _NO_FORWARD_OP:
        return None
    stem = _STEMS.get(type(node))
    if stem is None:
        stem = _stem_of(node)
    first = backward_state
    forward = None
    if first is not None:
        numbers, lines, _ops = first.fwd
        # The common case inlined (see _line_of_node): inside an entry, a known kind.
        i = bisect_right(numbers, number + 1, 0, len(numbers)) - 1
        if i >= 0 and numbers[i] != number + 1 and stem in lines[i].node_stems:
            forward = lines[i]
        else:
            forward = _line_of_node(first.fwd, number, stem)
    if forward is None:
        others = [o for o in threads.all() if o is not first and o.fwd[0]]
        for other in others:
            forward = _line_of_node(other.fwd, number, stem)
            if forward is not None:
                break
        else:
            return None
    key = (id(line), id(forward))
    found = st.backward.get(key)
    if found is None:
        found = st.backward[key] = BackwardOps(line, forward)
    return found.ops


def _line_of_node(
    fwd: tuple[list[int], list[LineStats], list[str]], number: int, stem: str
) -> LineStats | None:
    numbers, lines, ops = fwd
    # NB: an entry's number was read inside its first op, after autograd made that op's node
    # (if it made one): node n was made by an op that saw n + 1.
    end = len(numbers)  # numbers are appended last: entries below this are whole
    i = bisect_right(numbers, number + 1, 0, end) - 1
    if i < 0:
        return None
    if numbers[i] == number + 1:
        # The first op at the first line entered at n + 1 made node n, or an op before it did.
        j = bisect_left(numbers, number + 1, 0, i + 1)
        if _made_by(ops[j], stem):
            return lines[j]
        i = j - 1
        if i < 0:
            return None
    line = lines[i]
    if stem in line.node_stems:
        return line
    if any(_made_by(op, stem) for op in list(line.op_breakdown)):
        line.node_stems.add(stem)  # only yes is kept: a line can gain the op later
        return line
    return None
