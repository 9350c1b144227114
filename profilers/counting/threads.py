"""Per-thread state, owned so that no thread's counts are ever lost:

* a thread gets its :class:`ThreadState` on its first op, new or one a finished thread left;
  only that thread writes its table;
* a thread that ends hands its state, counts and all, to the next new thread: memory stays
  bounded when a thread is started per step (``nn.DataParallel``), the counts stay listed;
* reading never clears a table: a report merges them into fresh objects, a writer undisturbed;
* an op's rule must read a tensor as its own thread sees it: the fake GPU's "inside a kernel"
  mark (a fake tensor's device reads ``meta``) was once shared, and a copy classified while
  another thread ran a fake op was lost; it is per thread now (profilers/fake_cuda/mode.py).
"""

from __future__ import annotations

import threading
from types import FrameType

from profilers.stats import LineStats, OpCount
from profilers.timing.inputs import Inside
from profilers.timing.timeline import StepClock
from profilers.torch_private import OpOverload


class BackwardOps:
    """Backward ops one thread ran at ``ran_at`` (the ``.backward()`` line) for autograd nodes
    that ops of ``forward`` made: counted in both lines when read (Recorder.merged_lines)."""

    __slots__ = ("forward", "ops", "ran_at")

    def __init__(self, ran_at: LineStats, forward: LineStats) -> None:
        self.ran_at = ran_at
        self.forward = forward
        self.ops: dict[str, OpCount] = {}
        """The hot path's entries of these ops (``ThreadState.bw_ops``)."""


class ThreadState:
    """What one thread's ops need, in slots (a threading.local read per op, then plain loads)."""

    __slots__ = (
        "backward",
        "bw_node",
        "bw_ops",
        "bw_line",
        "clock",
        "fwd",
        "fwd_line",
        "in_comm",
        "inside",
        "last_frame",
        "last_lasti",
        "last_line",
        "last_user",
        "op",
        "synced",
        "table",
    )

    def __init__(self) -> None:
        self.table: dict[tuple[str, int], LineStats] = {}
        self.op: OpOverload | None = None
        """The op running on this thread now (for sync callbacks that fire inside it)."""
        self.synced = False
        self.in_comm = 0
        self.clock: StepClock | None = None
        """The step clock (profilers/timing/timeline.py), on the profile's own thread only."""
        self.inside: Inside | None = None
        """While an input wait is timed (the clock off): what the profiler spent on the ops the
        iterator runs (collate's), to keep out of the wait (timing/inputs.py ``Inside``)."""
        # NB: the line of the last op's calling frame. Holding the frame keeps it (and so its
        # locals) alive until the next op or the end of the profile; in exchange, ops called
        # from the same frame and line skip the walk up the stack.
        self.last_frame: FrameType | None = None
        self.last_user: FrameType | None = None
        self.last_lasti = -1
        self.last_line: LineStats | None = None
        # Forward ops' autograd nodes: the nodes numbered from numbers[i] on were made at
        # lines[i], the first by first_ops[i]. Appended on a line change only; trimmed by
        # replacing the tuple, which other threads read once (the owner appends numbers last).
        self.fwd: tuple[list[int], list[LineStats], list[str]] = ([], [], [])
        self.fwd_line: LineStats | None = None
        # Backward ops of this thread that a forward line's op made the node of, by (id of the
        # line that ran them, id of the forward line); merged into both lines' counts when read.
        self.backward: dict[tuple[int, int], BackwardOps] = {}
        self.bw_node: object = None
        """The autograd node of the last backward op (its ops come one after another)."""
        self.bw_ops: dict[str, OpCount] | None = None
        self.bw_line: LineStats | None = None

    def forget_frames(self) -> None:
        self.last_frame = self.last_user = self.last_line = None
        self.bw_node = self.bw_ops = self.bw_line = None

    def new_thread(self) -> None:
        """A new thread takes this state over: its autograd node numbers start again."""
        self.forget_frames()
        self.op = None
        self.synced = False
        self.in_comm = 0
        self.clock = self.inside = None
        self.fwd = ([], [], [])
        self.fwd_line = None


class ThreadStates:
    """Every thread's state, one per live thread (a ``threading.local`` read per op)."""

    def __init__(self) -> None:
        self.tls = threading.local()
        self._lock = threading.Lock()
        self._states: list[ThreadState] = []
        self._spare: list[ThreadState] = []
        """States of threads that ended, for the next new thread."""

    def state(self) -> ThreadState:
        """This thread's state, on its first op made or taken over from a thread that ended."""
        st: ThreadState | None = getattr(self.tls, "s", None)
        if st is None:
            with self._lock:
                if self._spare:
                    st = self._spare.pop()
                    st.new_thread()
                else:
                    st = ThreadState()
                    self._states.append(st)
            self.tls.s = st
        return st

    def release(self) -> None:
        """The calling thread ends: its state, counts and all, goes to the next new thread."""
        st: ThreadState | None = getattr(self.tls, "s", None)
        if st is None:
            return
        del self.tls.s
        st.forget_frames()
        with self._lock:
            self._spare.append(st)

    def all(self) -> list[ThreadState]:
        """Every state made so far (a copy of the list: states may be added meanwhile)."""
        with self._lock:
            return list(self._states)
