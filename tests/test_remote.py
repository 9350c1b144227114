"""``gpuwatch top --remote``: other hosts' GPUs from their /metrics, in the TUI and --json, and a
remote answer treated as untrusted (a stopped exporter, garbage, a reply that never ends or is
huge: one "unreachable", never a hang or a crash)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from gpuwatch.monitor.export import GpuCollector
from gpuwatch.monitor.nvml import FakeBackend
from gpuwatch.monitor.nvml.remote import HostsBackend, RemoteHost, parse_metrics
from gpuwatch.monitor.nvml.sampler import Sampler
from gpuwatch.ui.top.app import TopApp
from gpuwatch.ui.widgets import GpuCard
from tests.conftest import plain, wait_until


def exporter(gpus: int, clock) -> tuple[str, object, GpuCollector]:
    """An exporter on a free loopback port, serving a fake backend's snapshot."""
    sampler = Sampler(FakeBackend(gpu_count=gpus, clock=clock), background_pcie=False)
    collector = GpuCollector("node")
    collector.snapshot = sampler.snapshot()
    sampler.close()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
    return f"http://127.0.0.1:{server.server_port}", server, collector


def test_a_metrics_page_reads_back_as_the_gpus_it_describes(clock):
    url, server, collector = exporter(2, clock)
    try:
        host = RemoteHost(url, interval_s=60)
        (g0, g1) = host.state().gpus
        host.close()
    finally:
        server.shutdown()
    want = collector.snapshot.gpus[1]
    assert g1.name == f"{url.removeprefix('http://')}: {want.name}" and g1.uuid == want.uuid
    assert g1.gpu_util_pct == want.gpu_util_pct and g1.temperature_c == want.temperature_c
    assert g1.memory_used_bytes == want.memory_used_bytes  # MiB on the wire, bytes back
    assert g1.memory_total_bytes == want.memory_total_bytes
    assert {p.pid for p in g1.processes} == {p.pid for p in want.processes}


def test_hosts_side_by_side_and_one_stopped_mid_run(clock):
    a_url, a, _ = exporter(2, clock)
    b_url, b, _ = exporter(1, clock)
    hosts = [RemoteHost(u, interval_s=60, timeout_s=1) for u in (a_url, b_url)]
    backend = HostsBackend(hosts, local=FakeBackend(gpu_count=1, clock=clock))
    try:
        assert backend.device_count() == 1 + 2 + 1
        names = [backend.sample(i).name or "" for i in range(4)]
        assert names[0] == "NVIDIA H100 80GB HBM3 (demo)"  # the local GPU first
        assert names[1].startswith(a_url.removeprefix("http://") + ": ")
        assert names[3].startswith(b_url.removeprefix("http://") + ": ")
        b.shutdown()
        b.server_close()
        hosts[1].refresh()
        stopped = backend.sample(3)
        assert stopped.name.endswith("(UNREACHABLE)") and stopped.gpu_util_pct is None
        assert "unreachable since" in stopped.problem and "last answer" in stopped.problem
        assert backend.sample(1).problem is None and backend.sample(1).gpu_util_pct is not None
        with pytest.raises(PermissionError):  # a remote pid means nothing here
            backend.send_signal(backend.sample(1).processes[0].pid + 10**6, 15)
    finally:
        backend.close()
        a.shutdown()


class _BadServer:
    """A TCP server that answers every request with ``behaviour`` (garbage, a reply that never
    ends, a huge one)."""

    def __init__(self, behaviour: str) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.behaviour = behaviour
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(4096)
            head = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n"
            try:
                if self.behaviour == "garbage":
                    conn.sendall(head + b'DCGM_FI_DEV_GPU_UTIL{gpu="0" 12 oops\n\x00\xff{{{\n')
                elif self.behaviour == "huge":
                    conn.sendall(head + b"# " + b"x" * (9 * 1024 * 1024))
                else:  # "endless": headers, then a trickle that never finishes
                    conn.sendall(head)
                    for _ in range(100):
                        time.sleep(0.05)
                        conn.sendall(b"#")
            except OSError:
                pass
            conn.close()


@pytest.mark.parametrize("behaviour", ["garbage", "huge", "endless"])
def test_an_untrusted_answer_costs_one_unreachable_line(behaviour):
    bad = _BadServer(behaviour)
    started = time.monotonic()
    host = RemoteHost(bad.url, interval_s=60, timeout_s=0.5)
    backend = HostsBackend([host])
    sample = backend.sample(0)
    host.close()
    assert time.monotonic() - started < 10  # the per-read timeout; never a hang
    assert sample.problem is not None and "unreachable since" in sample.problem
    assert sample.processes == ()


def test_parse_keeps_label_values_short():
    page = f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",modelName="{"x" * 5000}"}} 7\n'
    (g,) = parse_metrics(page, "h")
    assert g.gpu_util_pct == 7 and len(g.name or "") < 300


@pytest.mark.slow
async def test_top_shows_remote_cards_grouped_by_host(clock):
    url, server, _ = exporter(2, clock)
    backend = HostsBackend([RemoteHost(url, interval_s=60)])
    app = TopApp(backend, interval_s=0.1)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_until(lambda: app.samples_taken >= 1)
            await pilot.pause()
            titles = [c.border_title for c in app.query(GpuCard)]
            host = url.removeprefix("http://")
            assert titles == [f"GPU {i} · {host}: NVIDIA H100 80GB HBM3 (demo)" for i in (0, 1)]
            assert "%" in plain(app.query_one("#gpu-0", GpuCard).query_one("#body"))
    finally:
        server.shutdown()
        backend.close()


def test_top_json_over_remote_hosts_only(clock, capsys):
    import json

    from gpuwatch.cli.main import main

    url, server, _ = exporter(2, clock)
    dead = _BadServer("garbage").url
    try:
        assert main(["top", "--remote-only", "--remote", url, "--remote", dead, "--json"]) == 0
    finally:
        server.shutdown()
    doc = json.loads(capsys.readouterr().out)
    assert [g["index"] for g in doc["gpus"]] == [0, 1, 2]
    assert doc["gpus"][2]["name"].endswith("(UNREACHABLE)") and doc["gpus"][2]["problem"]
    assert main(["top", "--remote-only"]) == 2
    assert "--remote-only goes with --remote URL" in capsys.readouterr().err
