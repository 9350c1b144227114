"""What both apps share: a worker thread sampling GPUs, and how GPU cards fit the terminal."""

from __future__ import annotations

import math
import threading
from typing import NamedTuple

from textual.app import App, ReturnType
from textual.message import Message

from gpuwatch.monitor.gpu_timeline import learn_mig_gpus
from gpuwatch.monitor.nvml.sampler import Sampler
from gpuwatch.monitor.nvml.samples import Snapshot
from gpuwatch.monitor.threads import OwnThread

#: Height of a full card, borders included; a brief card has no graphs; a compact card is one line.
FULL_CARD_HEIGHT = 11
BRIEF_CARD_HEIGHT = 7
FULL_CARD_MIN_WIDTH = 56
COMPACT_CARD_MIN_WIDTH = 78


class CardLayout(NamedTuple):
    compact: bool
    """One line per GPU."""
    graphs: bool
    """Full cards with their history graphs (False: brief cards, meters and stats only)."""
    columns: int


def card_layout(width: int, height: int, gpus: int, rows_for_the_rest: int) -> CardLayout:
    """The richest cards for ``gpus`` GPUs that leave ``rows_for_the_rest`` rows free: full,
    then brief (no graphs), then one line each."""
    n = max(1, gpus)
    full_cols = max(1, min(n, width // FULL_CARD_MIN_WIDTH))
    rows = math.ceil(n / full_cols)
    free = height - rows_for_the_rest
    if rows * FULL_CARD_HEIGHT <= free:
        return CardLayout(False, True, full_cols)
    if rows * BRIEF_CARD_HEIGHT <= free:
        return CardLayout(False, False, full_cols)
    return CardLayout(True, False, max(1, min(n, width // COMPACT_CARD_MIN_WIDTH)))


class SamplingApp(App[ReturnType]):
    """An app fed by a :class:`Sampler` on a worker thread; the UI never waits on NVML.
    Subclasses handle :class:`SnapshotReady`; ``sampler`` may be None (no NVML here)."""

    class SnapshotReady(Message):
        def __init__(self, snapshot: Snapshot) -> None:
            super().__init__()
            self.snapshot = snapshot

    class SamplingFailed(Message):
        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    def __init__(self, sampler: Sampler | None, interval_s: float) -> None:
        super().__init__()
        self.sampler = sampler
        self.interval_s = interval_s
        self._sample_wake = threading.Event()
        self._sample_gate = threading.Event()
        self._sample_gate.set()
        self._sampling_stopped = threading.Event()
        self.sampling_held = threading.Event()
        """Set while the sampling thread waits at a closed gate (paused): tests wait on it."""
        self._sampling_thread: threading.Thread | None = None
        self.mig_gpus: dict[str, int] = {}
        """The GPU each MIG instance of ``CUDA_VISIBLE_DEVICES`` is part of (learned when
        sampling starts; gpuwatch/monitor/gpu_timeline.py's used_gpu_indices takes it)."""

    def start_sampling(self) -> None:
        if self.sampler is not None and self._sampling_thread is None:
            self.mig_gpus = learn_mig_gpus(self.sampler.backend)
            # NB: a daemon thread of our own, not a Textual thread worker: those run in the
            # event loop's default executor, which asyncio and the interpreter wait for at exit,
            # so an NVML call that hangs would keep q from quitting.
            self._sampling_thread = OwnThread(
                target=self._sample_loop, name="gpuwatch-sampler", daemon=True
            )
            self._sampling_thread.start()

    def _sample_loop(self) -> None:
        assert self.sampler is not None
        stopped = self._sampling_stopped
        while not stopped.is_set():
            if not self._sample_gate.is_set():
                self.sampling_held.set()  # paused: nothing is sampled until the gate opens
            self._sample_gate.wait()
            self.sampling_held.clear()
            if stopped.is_set():
                break
            try:
                snap = self.sampler.snapshot()
            except Exception as exc:  # a backend bug must not take the UI down
                self.post_message(self.SamplingFailed(f"{type(exc).__name__}: {exc}"))
            else:
                if not stopped.is_set():
                    self.post_message(self.SnapshotReady(snap))
            self._sample_wake.wait(self.interval_s)
            self._sample_wake.clear()

    def hold_sampling(self, held: bool) -> None:
        if held:
            self._sample_gate.clear()
        else:
            self._sample_gate.set()
            self._sample_wake.set()

    def sample_now(self) -> None:
        self._sample_wake.set()

    def on_sampling_app_sampling_failed(self, message: SamplingFailed) -> None:
        self.notify(f"sampling failed: {message.error}", severity="error", timeout=5)

    def stop_sampling(self) -> None:
        """Stops sampling without waiting for a sample under way (it may hang in the driver)."""
        self._sampling_stopped.set()
        self._sample_gate.set()
        self._sample_wake.set()
        if self.sampler is not None:
            self.sampler.close()
