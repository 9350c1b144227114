"""The real backend over NVML. The only module in gpuwatch that imports ``pynvml``."""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Callable
from types import ModuleType
from typing import SupportsInt

import psutil

from gpuwatch.monitor.nvml._gpm import GpmReader, pct, rate
from gpuwatch.monitor.nvml._host import HostProcesses, send_signal_checked
from gpuwatch.monitor.nvml._jobs import Jobs, ProcReader, read_proc
from gpuwatch.monitor.nvml._query import DRIVER_MISMATCH, GpuLost, GpuUnavailable, Query
from gpuwatch.monitor.nvml.backend import NvmlUnavailable
from gpuwatch.monitor.nvml.samples import GpuSample, ProcessSample

log = logging.getLogger("gpuwatch.monitor.nvml")


def _import_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise NvmlUnavailable("the nvidia-ml-py package (pynvml) is not installed") from exc
    module: ModuleType = pynvml
    return module


class RealBackend:
    """GPU samples from NVML through pynvml (tests pass a stub ``nvml`` and ``read_proc``, the
    reader of ``/proc/PID/...`` files for the processes' jobs)."""

    label = "NVML"
    simulated = False

    def __init__(
        self,
        nvml: ModuleType | None = None,
        clock: Callable[[], float] = time.monotonic,
        read_proc: ProcReader = read_proc,
    ) -> None:
        self._nvml = nvml if nvml is not None else _import_pynvml()
        self._clock = clock
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError_LibraryNotFound as exc:
            raise NvmlUnavailable(
                "NVML library (libnvidia-ml.so) not found: is the NVIDIA driver installed?"
            ) from exc
        except nvml.NVMLError_DriverNotLoaded as exc:
            raise NvmlUnavailable("the NVIDIA driver is not loaded") from exc
        except nvml.NVMLError_NoPermission as exc:
            raise NvmlUnavailable("no permission to open the NVIDIA devices (NVML)") from exc
        except nvml.NVMLError_LibRmVersionMismatch as exc:
            raise NvmlUnavailable(f"NVML cannot start: {DRIVER_MISMATCH}") from exc
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML failed to initialise: {exc}") from exc
        self._query = Query(self._nvml)
        self._closed = False
        self._handles: dict[int, object] = {}  # NVML's device handles
        self._static: dict[int, tuple[str | None, str | None, str | None]] = {}
        self._lost: set[int] = set()
        self._proc_util_ts: dict[int, int] = {}
        self._nvlinks: dict[int, list[int]] = {}
        self._nvlink_prev: dict[int, tuple[float, int, int]] = {}
        self._host = HostProcesses()
        self._jobs = Jobs(read_proc)
        self._gpm = GpmReader(self._nvml, self._query)
        self._unresolved: set[tuple[int, int]] = set()
        if self.device_count() == 0:
            self.close()
            raise NvmlUnavailable("NVML found no NVIDIA GPUs on this machine")
        atexit.register(self.close)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._query.in_flight:
            # NB: a call still hangs in the driver; nvmlShutdown would wait for it (forever, for
            # a hung driver). The process's exit releases NVML all the same.
            log.warning("NVML left open: a call is still waiting on the driver")
            return
        self._gpm.close()
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass  # shutting down: a driver that already went away has nothing left to release

    def driver_version(self) -> str | None:
        return _text(self._query(-1, "nvmlSystemGetDriverVersion"))

    def device_count(self) -> int:
        try:
            return int(self._nvml.nvmlDeviceGetCount())
        except self._nvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML could not count the GPUs: {exc}") from exc

    @property
    def driver_problem(self) -> str | None:
        """A problem of the whole driver, seen on any call (a driver upgraded under us)."""
        return self._query.driver_problem

    def gpu_of_mig(self, mig_uuid: str) -> int | None:
        """The NVML index of the GPU the MIG instance ``MIG-<uuid>`` is part of; None if NVML
        does not know the instance (or this driver has no MIG calls)."""
        nvml = self._nvml
        try:
            instance = nvml.nvmlDeviceGetHandleByUUID(mig_uuid)
            gpu = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(instance)
            return int(nvml.nvmlDeviceGetIndex(gpu))
        except (nvml.NVMLError, AttributeError):
            return None

    def _handle(self, index: int) -> object:
        h = self._handles.get(index)
        if h is None:
            nvml = self._nvml
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(index)
            except (nvml.NVMLError_GpuIsLost, nvml.NVMLError_Unknown) as exc:
                raise GpuLost(str(exc)) from exc
            except nvml.NVMLError as exc:
                raise GpuUnavailable(f"NVML cannot open this GPU: {exc}") from exc
            self._handles[index] = h
        return h

    def sample(self, index: int) -> GpuSample:
        if index in self._lost:
            return self._lost_sample(index)
        try:
            return self._sample(index)
        except GpuLost as exc:
            log.error("GPU %d is lost: %s", index, exc)
            self._lost.add(index)
            return self._lost_sample(index)
        except GpuUnavailable as exc:
            # Not lost: asked again next tick (a driver busy resetting it, a cgroup change).
            return GpuSample(index=index, name=None, uuid=None, pci_bus_id=None, problem=str(exc))

    def _lost_sample(self, index: int) -> GpuSample:
        name, uuid, bus = self._static.get(index, (None, None, None))
        return GpuSample(
            index=index,
            name=name,
            uuid=uuid,
            pci_bus_id=bus,
            lost=True,
            problem="NVML reports this GPU lost (fallen off the bus or hung)",
        )

    def _static_info(self, index: int, h: object) -> tuple[str | None, str | None, str | None]:
        info = self._static.get(index)
        if info is None:
            q = self._query
            pci = q(index, "nvmlDeviceGetPciInfo", h)
            bus = _text(getattr(pci, "busId", None)) if pci is not None else None
            info = (
                _text(q(index, "nvmlDeviceGetName", h)),
                _text(q(index, "nvmlDeviceGetUUID", h)),
                bus,
            )
            self._static[index] = info
        return info

    def _sample(self, index: int) -> GpuSample:
        nvml, q = self._nvml, self._query
        h = self._handle(index)
        name, uuid, bus = self._static_info(index, h)
        util = q(index, "nvmlDeviceGetUtilizationRates", h)
        mem = q(index, "nvmlDeviceGetMemoryInfo", h)
        power_mw = q(index, "nvmlDeviceGetPowerUsage", h)
        limit_mw = q(index, "nvmlDeviceGetEnforcedPowerLimit", h)
        enc = q(index, "nvmlDeviceGetEncoderUtilization", h)
        dec = q(index, "nvmlDeviceGetDecoderUtilization", h)
        nvl_tx, nvl_rx = self._nvlink_rates(index, h)
        gpm = self._gpm.read(index, h)
        if nvl_tx is None:
            nvl_tx, nvl_rx = rate(gpm, "nvlink_tx_mib_per_s"), rate(gpm, "nvlink_rx_mib_per_s")
        return GpuSample(
            index=index,
            name=name,
            uuid=uuid,
            pci_bus_id=bus,
            gpu_util_pct=_int(getattr(util, "gpu", None)),
            mem_util_pct=_int(getattr(util, "memory", None)),
            memory_used_bytes=_int(getattr(mem, "used", None)),
            memory_total_bytes=_int(getattr(mem, "total", None)),
            temperature_c=_int(q(index, "nvmlDeviceGetTemperature", h, nvml.NVML_TEMPERATURE_GPU)),
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            fan_pct=_int(q(index, "nvmlDeviceGetFanSpeed", h)),
            sm_clock_mhz=_int(q(index, "nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_SM)),
            mem_clock_mhz=_int(q(index, "nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_MEM)),
            pstate=_int(q(index, "nvmlDeviceGetPerformanceState", h)),
            throttle_reasons=_int(q(index, "nvmlDeviceGetCurrentClocksThrottleReasons", h)),
            nvlink_tx_bytes_per_s=nvl_tx,
            nvlink_rx_bytes_per_s=nvl_rx,
            encoder_util_pct=_int(enc[0]) if enc else None,
            decoder_util_pct=_int(dec[0]) if dec else None,
            sm_active_pct=pct(gpm, "sm_active_pct"),
            sm_occupancy_pct=pct(gpm, "sm_occupancy_pct"),
            tensor_active_pct=pct(gpm, "tensor_active_pct"),
            dram_active_pct=pct(gpm, "dram_active_pct"),
            gpm=self._gpm.supported(index, h),
            energy_total_mj=_int(q(index, "nvmlDeviceGetTotalEnergyConsumption", h)),
            processes=tuple(self._processes(index, h)),
            problem=self._process_problem(index),
        )

    def _process_problem(self, index: int) -> str | None:
        denied = self._query.denied
        if (index, "nvmlDeviceGetComputeRunningProcesses") in denied:
            return "no permission to list this GPU's processes (NVML NoPermission)"
        if (index, "nvmlDeviceGetProcessUtilization") in denied:
            return "no permission to read per-process utilisation (NVML NoPermission)"
        return None

    def energy_mj(self, index: int) -> int | None:
        """NVML's total-energy counter alone (mJ since the driver loaded; None where the GPU has
        none, NotSupported remembered): cheap, read every few ms for energy per step."""
        if index in self._lost:
            return None
        try:
            h = self._handle(index)
        except (GpuLost, GpuUnavailable):
            return None
        return _int(self._query(index, "nvmlDeviceGetTotalEnergyConsumption", h))

    def pcie_throughput(self, index: int) -> tuple[int | None, int | None]:
        if index in self._lost:
            return None, None
        gpm = self._gpm.pcie(index)
        if gpm is not None:
            return gpm  # NB: measured by GPM between two samples: no 20 ms wait in the driver
        nvml, q = self._nvml, self._query
        try:
            h = self._handle(index)
            # NB: each call samples the counter for 20 ms and blocks meanwhile (NVML docs for
            # nvmlDeviceGetPcieThroughput); the unit is KB/s.
            tx = q(index, "nvmlDeviceGetPcieThroughput", h, nvml.NVML_PCIE_UTIL_TX_BYTES)
            rx = q(index, "nvmlDeviceGetPcieThroughput", h, nvml.NVML_PCIE_UTIL_RX_BYTES)
        except GpuLost:
            self._lost.add(index)
            return None, None
        except GpuUnavailable:
            return None, None
        return (None if tx is None else int(tx) * 1024, None if rx is None else int(rx) * 1024)

    def _nvlink_rates(self, index: int, h: object) -> tuple[int | None, int | None]:
        nvml, q = self._nvml, self._query
        links = self._nvlinks.get(index)
        if links is None:
            links = []
            for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
                state = q(index, "nvmlDeviceGetNvLinkState", h, link)
                if state is None:
                    if q.is_unsupported(index, "nvmlDeviceGetNvLinkState"):
                        break  # no NVLink on this GPU at all
                    continue
                if state:
                    links.append(link)
            self._nvlinks[index] = links
        if not links:
            return None, None
        fields = [(nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link) for link in links]
        fields += [(nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link) for link in links]
        values = q(index, "nvmlDeviceGetFieldValues", h, fields)
        if values is None:
            return None, None
        counts = [int(v.value.ullVal) if v.nvmlReturn == 0 else 0 for v in values]
        # NB: the throughput fields are running counters in KiB; the rate is their difference.
        tx_kib, rx_kib = sum(counts[: len(links)]), sum(counts[len(links) :])
        now = self._clock()
        prev = self._nvlink_prev.get(index)
        self._nvlink_prev[index] = (now, tx_kib, rx_kib)
        if prev is None or now <= prev[0]:
            return None, None
        dt = now - prev[0]
        return (
            max(0, int((tx_kib - prev[1]) * 1024 / dt)),
            max(0, int((rx_kib - prev[2]) * 1024 / dt)),
        )

    def _processes(self, index: int, h: object) -> list[ProcessSample]:
        q = self._query
        listed: dict[int, tuple[str, int | None]] = {}
        for kind, fn in (
            ("compute", "nvmlDeviceGetComputeRunningProcesses"),
            ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
        ):
            for p in q(index, fn, h) or ():
                mem = getattr(p, "usedGpuMemory", None)
                prev = listed.get(p.pid)
                if prev is not None and prev[0] != kind:
                    kind = "compute+graphics"
                listed[p.pid] = (
                    kind,
                    _int(mem) if mem is not None else (prev[1] if prev else None),
                )
        sm_util = self._process_utilisation(index, h) if listed else {}
        out: list[ProcessSample] = []
        unresolved: set[tuple[int, int]] = set()
        for pid, (kind, mem_bytes) in listed.items():
            found = self._host.lookup(pid)
            name = command = user = job = None
            cpu = rss = started = None
            if found is None:
                # NB: a process that exits between NVML's listing and psutil's lookup is dropped.
                # One that NVML keeps listing tick after tick but psutil cannot see lives in
                # another PID namespace (a container): show it with what NVML knows.
                unresolved.add((index, pid))
                if (index, pid) not in self._unresolved:
                    continue
            else:
                proc, primed = found
                try:
                    with proc.oneshot():
                        name = proc.name()
                        command = " ".join(proc.cmdline()) or name
                        try:
                            user = proc.username()
                        except (KeyError, psutil.AccessDenied):
                            user = None
                        cpu = proc.cpu_percent(None) if primed else None
                        rss = proc.memory_info().rss
                        started = proc.create_time()
                    job = self._jobs.of(pid, started)
                except psutil.NoSuchProcess:
                    continue
                except psutil.AccessDenied:
                    pass  # another user's process: keep what NVML says, leave the rest N/A
            out.append(
                ProcessSample(
                    pid=pid,
                    gpu_index=index,
                    name=name,
                    command=command,
                    user=user,
                    type=kind,
                    gpu_memory_bytes=mem_bytes,
                    sm_util_pct=sm_util.get(pid),
                    cpu_pct=cpu,
                    host_memory_bytes=rss,
                    start_time=started,
                    job=job,
                )
            )
        self._unresolved = {k for k in self._unresolved if k[0] != index} | unresolved
        if index == 0:
            self._host.prune()
            self._jobs.keep_only(self._host.pids)
        return out

    def _process_utilisation(self, index: int, h: object) -> dict[int, int]:
        since = self._proc_util_ts.get(index, 0)
        samples = self._query(index, "nvmlDeviceGetProcessUtilization", h, since)
        if not samples:
            return {}
        util: dict[int, tuple[int, int]] = {}
        for s in samples:
            prev = util.get(s.pid)
            if prev is None or s.timeStamp > prev[0]:
                util[s.pid] = (s.timeStamp, int(s.smUtil))
        self._proc_util_ts[index] = max(ts for ts, _ in util.values())
        return {pid: sm for pid, (_, sm) in util.items()}

    def send_signal(self, pid: int, signum: int, start_time: float | None = None) -> None:
        send_signal_checked(pid, signum, start_time)


def _text(v: object) -> str | None:
    return v.decode(errors="replace") if isinstance(v, bytes) else None if v is None else str(v)


def _int(v: SupportsInt | None) -> int | None:
    return None if v is None else int(v)
