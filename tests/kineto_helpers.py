"""Small torch.profiler traces written by hand, in today's Kineto spelling, for exact figures.

Times are integer microseconds (Kineto's unit); each helper returns the event it appends.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

PID = 4242
MAIN = 4242


class TraceBuilder:
    def __init__(self, rank: int | None = None, gpu: str = "NVIDIA H100 80GB HBM3") -> None:
        self.events: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": gpu, "computeMajor": 9}],
        }
        if rank is not None:
            self.meta["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
        self._ext = 0
        self._corr = 1000

    def _x(self, cat: str, name: str, ts: float, dur: float, **fields: Any) -> dict[str, Any]:
        e = {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": MAIN, "ts": ts, "dur": dur}
        e.update(fields)
        self.events.append(e)
        return e

    def step(self, n: int, ts: float, dur: float) -> dict[str, Any]:
        return self._x("user_annotation", f"ProfilerStep#{n}", ts, dur, args={})

    def op(self, name: str, ts: float, dur: float, tid: int = MAIN) -> int:
        """A CPU op; returns its external id (for the runtime calls made inside it)."""
        self._ext += 1
        self._x("cpu_op", name, ts, dur, tid=tid, args={"External id": self._ext})
        return self._ext

    def loader(self, ts: float, dur: float) -> int:
        return self.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", ts, dur)

    def python(self, frame: str, ts: float, dur: float, tid: int = MAIN) -> None:
        self._x("python_function", frame, ts, dur, tid=tid, args={})

    def runtime(self, name: str, ts: float, dur: float, ext: int = 0, tid: int = MAIN) -> int:
        """A runtime call; returns its correlation id."""
        self._corr += 1
        args = {"External id": ext, "cbid": 211, "correlation": self._corr}
        self._x("cuda_runtime", name, ts, dur, tid=tid, args=args)
        return self._corr

    def _gpu(
        self, cat: str, name: str, ts: float, dur: float, corr: int, stream: int, **args: Any
    ) -> None:
        a = {"device": 0, "stream": stream, "correlation": corr, **args}
        self._x(cat, name, ts, dur, pid=0, tid=stream, args=a)

    def kernel(self, name: str, ts: float, dur: float, corr: int = -1, stream: int = 7) -> None:
        self._gpu("kernel", name, ts, dur, corr, stream)

    def launch(
        self,
        op: str,
        at: float,
        kernel_ts: float,
        kernel_dur: float,
        stream: int = 7,
        name: str = "",
    ) -> None:
        """An op at ``at`` (4 us) whose cudaLaunchKernel (2 us) queues one kernel."""
        ext = self.op(op, at, 4)
        corr = self.runtime("cudaLaunchKernel", at + 1, 2, ext)
        self.kernel(name or f"{op}_kernel", kernel_ts, kernel_dur, corr, stream)

    def memcpy(
        self, kind: str, ts: float, dur: float, corr: int, nbytes: int, stream: int = 7
    ) -> None:
        self._gpu("gpu_memcpy", f"Memcpy {kind}", ts, dur, corr, stream, bytes=nbytes)

    def doc(self) -> dict[str, Any]:
        return {**self.meta, "traceEvents": self.events}

    def write(self, path: Path, gz: bool = False) -> Path:
        text = json.dumps(self.doc())
        if gz:
            path.write_bytes(gzip.compress(text.encode()))
        else:
            path.write_text(text)
        return path
