"""The one way every NVML call is made (:class:`Query`), and what its answers mean for the
caller. Takes the pynvml module as a value: only gpuwatch/monitor/nvml/_real.py imports it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

log = logging.getLogger("gpuwatch.monitor.nvml")

DRIVER_MISMATCH = (
    "the NVIDIA driver was upgraded while the system runs (NVML library and kernel module "
    "differ): reboot, or reload the driver (the nvidia kernel modules)"
)


class GpuLost(Exception):
    """NVML answered GpuIsLost or Unknown for a device: it fell off the bus or hung."""


class GpuUnavailable(Exception):
    """NVML could not open a device this time (no handle): shown, and asked again next tick."""


class Query:
    """Runs every NVML call for one backend: an unsupported or refused call answers ``None``
    and is not retried every tick; a lost GPU raises :class:`GpuLost`."""

    def __init__(self, nvml: ModuleType) -> None:
        self._nvml = nvml
        self._unsupported: set[tuple[int, str]] = set()
        self.denied: set[tuple[int, str]] = set()
        """Calls NVML refused for lack of permission (not retried; shown to the user)."""
        self._logged: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self.in_flight = 0
        """NVML calls under way now: a call that hangs keeps this above 0."""
        self.driver_problem: str | None = None

    def is_unsupported(self, index: int, name: str) -> bool:
        return (index, name) in self._unsupported

    def __call__(self, index: int, name: str, *args: object) -> Any:
        key = (index, name)
        if key in self._unsupported:
            return None
        nvml = self._nvml
        fn: Callable[..., object] | None = getattr(nvml, name, None)
        if fn is None:
            self._remember(key, f"{name} is missing from this pynvml", -1)
            return None
        try:
            with self._lock:
                self.in_flight += 1
            try:
                return fn(*args)
            finally:
                with self._lock:
                    self.in_flight -= 1
        except nvml.NVMLError_NotSupported:
            self._unsupported.add(key)
        except nvml.NVMLError_NoPermission:
            with self._lock:
                self.denied.add(key)
            self._remember(key, f"{name}: no permission", -2)
        except nvml.NVMLError_LibRmVersionMismatch:
            # NB: the driver was upgraded under the running system: every call fails until the
            # kernel module matching the new library is loaded.
            self.driver_problem = DRIVER_MISMATCH
            self._log_once(name, -4, DRIVER_MISMATCH)
        except nvml.NVMLError_FunctionNotFound:
            self._remember(
                key, f"{name} is not in this driver's NVML (driver older than the bindings)", -3
            )
        except (nvml.NVMLError_GpuIsLost, nvml.NVMLError_Unknown) as exc:
            raise GpuLost(str(exc)) from exc
        except (nvml.NVMLError_NotFound, nvml.NVMLError_NoData, nvml.NVMLError_Timeout):
            pass  # nothing to report this tick (no samples yet, a busy driver); ask again next time
        except nvml.NVMLError as exc:
            self._log_once(name, getattr(exc, "value", 0), f"{name} failed: {exc}")
        return None

    def _remember(self, key: tuple[int, str], message: str, code: int) -> None:
        with self._lock:
            self._unsupported.add(key)
        self._log_once(key[1], code, message)

    def _log_once(self, name: str, code: int, message: str) -> None:
        with self._lock:
            if (name, code) in self._logged:
                return
            self._logged.add((name, code))
        log.warning(message)
