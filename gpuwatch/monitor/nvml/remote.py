"""GPUs of other hosts, read from their ``/metrics`` (``gpuwatch export`` or dcgm-exporter): a
scrape that fails, hangs, or returns garbage costs an "unreachable since ..." problem on that
host's GPUs, never a hang or a crash."""

from __future__ import annotations

import datetime as _dt
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuwatch.monitor.nvml._deadline import fetch
from gpuwatch.monitor.nvml._exposition import MAX_GPUS, MAX_PROCESSES, Page, printable, read_page
from gpuwatch.monitor.nvml.backend import Backend
from gpuwatch.monitor.nvml.samples import GpuSample, ProcessSample

MAX_BYTES = 8 * 1024 * 1024
"""The most of one reply read (a dcgm-exporter page of 8 GPUs is under 100 KB)."""
TIMEOUT_S = 3.0
"""The whole of one fetch: connecting, TLS, the headers and the body."""

_MIB, _KB = 1024 * 1024, 1024


def host_of(url: str) -> str:
    """``host:port`` of a URL (two exporters on one machine stay apart)."""
    return printable(urllib.parse.urlsplit(url).netloc or url)


def checked_url(url: str) -> str:
    """``url`` if ``--remote`` takes it (``http(s)://HOST[:PORT][/PATH]`` or a bare
    ``HOST[:PORT][/PATH]``), else ValueError saying why in one line.
    NB: a bare value is read as ``http://`` + value, so a URL of another scheme written without
    ``//`` (``javascript:alert(1)``, ``mailto:a@b``, ``data:...``) would become a host
    ``javascript`` with a port ``alert(1)``: a bare value must be a host and, after a colon,
    a port number, with no user part."""
    shown = printable(url)
    bare = "://" not in url
    parts = urllib.parse.urlsplit(f"http://{url}" if bare else url)
    if not bare and parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"--remote {shown}: only http:// and https:// are read")
    try:
        _ = parts.port  # ValueError for a port that is not a number up to 65535
        reachable = bool(parts.hostname) and not any(c.isspace() for c in url)
    except ValueError:
        reachable = False
    if bare and (not reachable or "@" in parts.netloc):
        raise ValueError(
            f"--remote {shown}: neither an http(s):// URL nor HOST:PORT (e.g. http://node-a:9400)"
        )
    if not reachable:
        raise ValueError(f"--remote {shown}: no host, or a port that is not a number")
    return url


def metrics_url(url: str) -> str:
    """``http://host:9400`` -> ``http://host:9400/metrics`` (a path given is kept)."""
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    return urllib.parse.urlunsplit(
        parts._replace(path=parts.path if parts.path not in ("", "/") else "/metrics")
    )


def _num(v: float | None, scale: float = 1.0) -> int | None:
    return None if v is None else int(v * scale)


def _ratio(v: float | None) -> float | None:
    """A DCGM profiling ratio (0-1) as a percentage."""
    return None if v is None else round(100.0 * v, 1)


def _processes(gpu: str, page: Page) -> tuple[tuple[ProcessSample, ...], int]:
    """The GPU's processes using the most memory (at most MAX_PROCESSES), and how many more."""
    listed = page.processes.get(gpu, {})
    kept = sorted(
        listed.items(),
        key=lambda kv: (-(kv[1].get("gpuwatch_process_gpu_memory_bytes") or 0), kv[0]),
    )[:MAX_PROCESSES]
    procs = tuple(
        ProcessSample(
            pid=int(pid) if pid.isdigit() and len(pid) < 10 else -1,
            gpu_index=int(gpu),
            name=command,
            command=command,
            user=None,
            type="compute",
            gpu_memory_bytes=_num(m.get("gpuwatch_process_gpu_memory_bytes")),
            sm_util_pct=_num(m.get("gpuwatch_process_sm_util_percent")),
            cpu_pct=None,
            host_memory_bytes=None,
        )
        for (pid, command), m in kept
    )
    return procs, len(listed) - len(kept)


def _notes(gpu: str, page: Page, more_processes: int) -> str | None:
    """What was left out of this GPU's figures, for the user."""
    notes = []
    if more_processes:
        notes.append(
            f"{more_processes:,} more processes not shown (the {MAX_PROCESSES} using the most "
            "memory are)"
        )
    if page.implausible.get(gpu):
        notes.append("values out of range left out: " + ", ".join(sorted(page.implausible[gpu])))
    return "; ".join(notes) or None


def parse_metrics(text: str, host: str) -> list[GpuSample]:
    """The GPUs a /metrics page describes, by dcgm-exporter's names and labels (at most
    MAX_GPUS; the last one kept says how many more there were)."""
    page = read_page(text)
    out = []
    for gpu in sorted(page.values, key=int):
        v, lab = page.values[gpu], page.labels[gpu]
        used, free = v.get("DCGM_FI_DEV_FB_USED"), v.get("DCGM_FI_DEV_FB_FREE")
        plist, more = _processes(gpu, page)
        out.append(
            GpuSample(
                index=int(gpu),
                name=f"{host}: {lab.get('modelName') or 'GPU'}",
                uuid=lab.get("UUID") or None,
                pci_bus_id=lab.get("pci_bus_id") or None,
                gpu_util_pct=_num(v.get("DCGM_FI_DEV_GPU_UTIL")),
                mem_util_pct=_num(v.get("DCGM_FI_DEV_MEM_COPY_UTIL")),
                memory_used_bytes=_num(used, _MIB),
                memory_total_bytes=None
                if used is None or free is None
                else int((used + free) * _MIB),
                temperature_c=_num(v.get("DCGM_FI_DEV_GPU_TEMP")),
                power_w=v.get("DCGM_FI_DEV_POWER_USAGE"),
                sm_clock_mhz=_num(v.get("DCGM_FI_DEV_SM_CLOCK")),
                mem_clock_mhz=_num(v.get("DCGM_FI_DEV_MEM_CLOCK")),
                throttle_reasons=_num(v.get("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")),
                pcie_tx_bytes_per_s=_num(v.get("DCGM_FI_DEV_PCIE_TX_THROUGHPUT"), _KB),
                pcie_rx_bytes_per_s=_num(v.get("DCGM_FI_DEV_PCIE_RX_THROUGHPUT"), _KB),
                encoder_util_pct=_num(v.get("DCGM_FI_DEV_ENC_UTIL")),
                decoder_util_pct=_num(v.get("DCGM_FI_DEV_DEC_UTIL")),
                sm_active_pct=_ratio(v.get("DCGM_FI_PROF_SM_ACTIVE")),
                sm_occupancy_pct=_ratio(v.get("DCGM_FI_PROF_SM_OCCUPANCY")),
                tensor_active_pct=_ratio(v.get("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")),
                dram_active_pct=_ratio(v.get("DCGM_FI_PROF_DRAM_ACTIVE")),
                energy_total_mj=_num(v.get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")),
                held_idle=v.get("gpuwatch_gpu_held_idle") == 1.0,
                held_idle_s=v.get("gpuwatch_gpu_held_idle_seconds"),
                processes=plist,
                problem=_notes(gpu, page, more),
            )
        )
    if out and page.gpus_cut:
        last = out[-1]
        cut = f"its /metrics lists {page.gpus_cut:,} more GPUs, not shown (at most {MAX_GPUS})"
        out[-1] = replace(last, problem="; ".join(filter(None, [last.problem, cut])))
    return out


@dataclass
class HostState:
    gpus: list[GpuSample]
    answered: _dt.datetime | None = None
    failing_since: _dt.datetime | None = None
    error: str | None = None


class RemoteHost:
    """One host, fetched in the background every ``interval_s``; the first fetch starts at once
    on that thread, and the constructor waits for it (at most ``timeout_s``) unless ``wait`` is
    False (then :meth:`wait_first` does)."""

    def __init__(
        self, url: str, interval_s: float = 1.0, timeout_s: float = TIMEOUT_S, wait: bool = True
    ) -> None:
        self.url = metrics_url(checked_url(url))
        self.host = host_of(self.url)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._state = HostState([])
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"gpuwatch-remote-{self.host}", daemon=True
        )
        self._thread.start()
        if wait:
            self.wait_first(timeout_s + 1.0)

    def wait_first(self, timeout_s: float) -> bool:
        """Waits for the first fetch to end (answered or failed); False if it is still going."""
        return self._first.wait(max(0.0, timeout_s))

    def refresh(self) -> None:
        now = _dt.datetime.now(_dt.UTC)
        try:
            gpus = parse_metrics(fetch(self.url, self.timeout_s, MAX_BYTES), self.host)
        except Exception as exc:  # any failure of an untrusted peer: unreachable, not a crash
            with self._lock:
                st = self._state
                st.failing_since = st.failing_since or now
                st.error = printable(f"{type(exc).__name__}: {exc}", 200)
            return
        with self._lock:
            self._state = HostState(gpus, answered=now)

    def _loop(self) -> None:
        self.refresh()
        self._first.set()
        while not self._stop.wait(self.interval_s):
            self.refresh()

    def state(self) -> HostState:
        with self._lock:
            return replace(self._state, gpus=list(self._state.gpus))

    def close(self) -> None:
        self._stop.set()


def _problem(state: HostState) -> str | None:
    if state.failing_since is None:
        return None
    last = state.answered.astimezone().strftime("%H:%M:%S") if state.answered else "never"
    since = state.failing_since.astimezone().strftime("%H:%M:%S")
    return f"unreachable since {since} (last answer {last}): {state.error}"


class HostsBackend:
    """The local backend's GPUs (if any) and each remote host's, as one backend: GPU indices
    run on across hosts; each remote GPU's name starts with its host."""

    label = "remote"

    def __init__(
        self,
        hosts: Sequence[RemoteHost],
        local: Backend | None = None,
        local_problem: str | None = None,
    ) -> None:
        self.hosts = list(hosts)
        self.local = local
        self.local_problem = local_problem
        """Why there are no local GPUs when the user did not ask to leave them out."""
        self.simulated = bool(local is not None and local.simulated)
        # NB: the layout is fixed at start (the Sampler reads the count once): a host that has
        # not answered yet keeps one slot that says so.
        self._slots: list[tuple[RemoteHost | None, int]] = []
        if local is not None:
            self._slots += [(None, i) for i in range(local.device_count())]
        self._slots += [(h, i) for h in self.hosts for i in range(max(1, len(h.state().gpus)))]
        if local is None:
            self.label = "remote: " + ", ".join(h.host for h in self.hosts)

    def driver_version(self) -> str | None:
        return self.local.driver_version() if self.local is not None else None

    def device_count(self) -> int:
        return len(self._slots)

    def sample(self, index: int) -> GpuSample:
        host, i = self._slots[index]
        if host is None:
            assert self.local is not None
            return replace(self.local.sample(i), index=index)
        st = host.state()
        problem = _problem(st)
        if problem is None and i < len(st.gpus):
            g = st.gpus[i]
            procs = tuple(replace(p, gpu_index=index) for p in g.processes)
            return replace(g, index=index, processes=procs)
        # NB: no stale figures for a host that stopped answering: the slot says so instead.
        name = st.gpus[i].name if i < len(st.gpus) else f"{host.host}: GPU"
        return GpuSample(
            index=index,
            name=f"{name} (UNREACHABLE)"
            if problem
            else f"{host.host}: " + ("no GPU in its metrics" if st.answered else "no answer yet"),
            uuid=st.gpus[i].uuid if i < len(st.gpus) else None,
            pci_bus_id=None,
            problem=problem
            or ("its /metrics has no GPU" if st.answered else "this host has not answered yet"),
        )

    def pcie_throughput(self, index: int) -> tuple[int | None, int | None]:
        host, i = self._slots[index]
        if host is None:
            assert self.local is not None
            return self.local.pcie_throughput(i)
        st = host.state()
        if st.failing_since is None and i < len(st.gpus):
            return st.gpus[i].pcie_tx_bytes_per_s, st.gpus[i].pcie_rx_bytes_per_s
        return None, None

    def send_signal(self, pid: int, signum: int, start_time: float | None = None) -> None:
        """Only a process of a local GPU; a remote host's pid means nothing here."""
        local = self.local
        if local is not None and any(
            p.pid == pid for i in range(local.device_count()) for p in local.sample(i).processes
        ):
            local.send_signal(pid, signum, start_time)
            return
        raise PermissionError("a process of another host cannot be signalled from here")

    @property
    def driver_problem(self) -> str | None:
        return self.local.driver_problem if self.local is not None else self.local_problem

    def all_unreachable(self) -> str | None:
        """When no host has ever answered and there are no local GPUs: why, host by host."""
        if self.local is not None:
            return None
        states = [(h.host, h.state()) for h in self.hosts]
        if any(st.answered for _, st in states):
            return None
        return "; ".join(f"{host}: {st.error or 'no answer yet'}" for host, st in states)

    def close(self) -> None:
        for h in self.hosts:
            h.close()
        if self.local is not None:
            self.local.close()
