"""A stand-in ``pynvml`` module for measuring GPU monitors side by side on a machine with no GPU.

Put this folder first on ``PYTHONPATH`` and any monitor that imports ``pynvml`` (gpuwatch, nvitop,
gpustat) sees the same two GPUs with two compute processes each. Every name of the real
nvidia-ml-py (constants, error classes, structures) is copied; the ``nvml*`` functions answer from
``tests.stub_nvml.StubNvml`` and the few more a monitor asks for, and every other one raises
``NVMLError_NotSupported``, as a driver does for what a board lacks, so both monitors show the
same values and the same N/A.

Environment: ``GPUWATCH_STUB_PIDS`` (comma-separated, at least four) are the processes' PIDs; the
utilisation and the power move every second so that a monitor has something to redraw.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

_here = Path(__file__).resolve().parent


def _load_real() -> Any:
    for entry in sys.path:
        if not entry or Path(entry).resolve() == _here:
            continue
        candidate = Path(entry) / "pynvml.py"
        if candidate.is_file():
            spec = importlib.util.spec_from_file_location("_real_pynvml", candidate)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules["_real_pynvml"] = module
            spec.loader.exec_module(module)
            return module
    raise ImportError("the real nvidia-ml-py (pynvml.py) is not installed")


_real = _load_real()
for _name, _value in vars(_real).items():
    if not _name.startswith("__"):
        globals()[_name] = _value

sys.path.insert(0, str(_here.parent.parent))  # the repository, for tests.stub_nvml
from tests.stub_nvml import StubNvml, default_device, proc  # noqa: E402

_pids = [int(p) for p in os.environ.get("GPUWATCH_STUB_PIDS", "").split(",") if p]
if len(_pids) < 4:
    _pids = [os.getpid()] * 4


def _device(index: int) -> dict[str, Any]:
    device = default_device(index)
    device["compute"] = [
        proc(_pids[2 * index], (1 + index) << 30),
        proc(_pids[2 * index + 1], 512 << 20),
    ]
    return device


_stub = StubNvml([_device(0), _device(1)])


class _Moving(StubNvml):
    """Values that change each second, as a busy GPU's do."""

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        tick = int(time.time())
        return SimpleNamespace(gpu=(40 + 7 * tick + 13 * h) % 100, memory=(10 + 3 * tick) % 60)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 100_000 + (int(time.time()) * 7_919 % 150) * 1000


_stub = _Moving(_stub.devices)


def _not_supported(*_args: Any, **_kwargs: Any) -> Any:
    raise _real.NVMLError_NotSupported(_real.NVML_ERROR_NOT_SUPPORTED)


_LIBRARY_CALLS = (
    "nvmlDevice",
    "nvmlSystem",
    "nvmlUnit",
    "nvmlGpu",
    "nvmlVgpu",
    "nvmlEvent",
    "nvmlComputeInstance",
    "nvmlGet",
    "nvmlSet",
)
for _name in list(globals()):
    if _name.startswith(_LIBRARY_CALLS) and callable(globals()[_name]):
        globals()[_name] = _not_supported

for _name in dir(StubNvml):
    if _name.startswith("nvml"):
        globals()[_name] = getattr(_stub, _name)


def nvmlInitWithFlags(_flags: int) -> None:
    _stub.nvmlInit()


def nvmlDeviceGetIndex(h: int) -> int:
    return h


def nvmlDeviceGetHandleByUUID(uuid: Any) -> int:
    text = uuid.decode() if isinstance(uuid, bytes) else uuid
    for i, device in enumerate(_stub.devices):
        if device["uuid"] == text:
            return i
    raise _real.NVMLError_NotFound(_real.NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetMaxClockInfo(_h: int, clock: int) -> int:
    return 1980 if clock == _real.NVML_CLOCK_SM else 1593


def nvmlDeviceGetPowerManagementLimit(h: int) -> int:
    return int(_stub.devices[h]["limit_mw"])


def nvmlSystemGetCudaDriverVersion() -> int:
    return 12040


def nvmlDeviceGetComputeRunningProcesses(h: int) -> list[Any]:
    return [
        SimpleNamespace(
            pid=p.pid,
            usedGpuMemory=p.usedGpuMemory,
            gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF,
        )
        for p in _stub.nvmlDeviceGetComputeRunningProcesses(h)
    ]


nvmlDeviceGetComputeRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses
nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses

# nvitop calls a few functions through C function pointers of the library when pynvml exposes its
# pointer lookup; without it nvitop calls the module's functions, as on older nvidia-ml-py.
_nvmlGetFunctionPointer = None
