"""``gpuwatch top --remote`` against hostile or broken exporters on 127.0.0.1: labels that carry
escape codes, newlines or markup; a server that drips its headers; NaN, infinities and absurd
values; pages listing thousands of GPUs and a hundred thousand processes; every host unreachable;
no local NVML."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuwatch.cli.main import main
from gpuwatch.monitor.nvml.remote import HostsBackend, RemoteHost, parse_metrics
from gpuwatch.monitor.nvml.sampler import Sampler
from gpuwatch.output.snapshot import snapshot_text


@pytest.fixture
def page_server() -> Iterator[list]:
    """Serves a page of text at /metrics: ``url = start(text)``."""
    servers: list[ThreadingHTTPServer] = []

    def start(text: str) -> str:
        body = text.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start  # type: ignore[misc]
    for s in servers:
        s.shutdown()
        s.server_close()


EVIL = (
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",modelName="H100\\n| 9 | fake row \x1b[2J\x1b]0;pwn\x07 [/oops]"} 50\n'
    'gpuwatch_process_gpu_memory_bytes{gpu="0",pid="7",command="evil\x1b[31m\\ncmd\u202e"} 1048576\n'
)


def test_escape_codes_newlines_and_markup_in_labels_never_reach_the_terminal(
    page_server, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "200")  # the whole name fits, whatever another test left set
    url = page_server(EVIL)
    assert main(["top", "--remote-only", "--remote", url, "--once"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    (row,) = [line for line in out.splitlines() if "H100" in line]
    assert "fake row" in row  # the \n did not split the table row
    assert "[/oops]" in row  # shown as text, not read as markup
    (proc,) = [line for line in out.splitlines() if "evil" in line]
    assert "evil?[31m?cmd?" in proc
    # on a tty (colour on), the only escape codes are rich's own colours
    host = RemoteHost(url, interval_s=60)
    sampler = Sampler(HostsBackend([host]), background_pcie=False)
    colour = snapshot_text(sampler.snapshot(), color=True)
    sampler.close()
    assert "\x1b[2J" not in colour and "\x1b]0;" not in colour and "\x1b[31m?" not in colour


async def test_the_tui_shows_a_markup_label_as_text(page_server):
    from gpuwatch.ui.top.app import TopApp
    from gpuwatch.ui.widgets import GpuCard
    from tests.conftest import wait_until

    url = page_server(EVIL)
    app = TopApp(HostsBackend([RemoteHost(url, interval_s=60)]), interval_s=0.1)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(lambda: app.samples_taken >= 1)
        await pilot.pause()
        title = str(app.query_one("#gpu-0", GpuCard).border_title)
    assert "[/oops]" in title and "\x1b" not in title and "\n" not in title


class DripServer:
    """Answers every connection with a status line, then a header byte every 0.1 s, forever."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        try:
            conn.sendall(b"HTTP/1.0 200 OK\r\n")
            while not self.stop.wait(0.1):
                conn.sendall(b"X")
        except OSError:
            pass
        conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.mark.slow
def test_a_server_that_drips_its_headers_is_cut_off_and_remote_only_says_why(capsys):
    drip = DripServer()
    try:
        started = time.monotonic()
        host = RemoteHost(drip.url, interval_s=60, timeout_s=0.5)
        assert time.monotonic() - started < 2.5
        assert "TimeoutError: no whole answer within 0.5 s" in (host.state().error or "")
        host.close()
        # --remote-only, every host unreachable: exit 1, and why, within the 3 s deadline
        started = time.monotonic()
        assert main(["top", "--remote-only", "--remote", drip.url, "--once"]) == 1
        assert time.monotonic() - started < 6
    finally:
        drip.close()
    captured = capsys.readouterr()
    assert captured.out == ""
    host_port = drip.url.removeprefix("http://")
    assert captured.err.strip() == (
        "gpuwatch: error: no GPUs to show: no remote host answered "
        f"({host_port}: TimeoutError: no whole answer within 3 s)"
    )


ODD = (
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",modelName="A"} NaN\n'
    'DCGM_FI_DEV_POWER_USAGE{gpu="0"} +Inf\n'
    'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 1e300\n'
    'DCGM_FI_DEV_SM_CLOCK{gpu="0"} 1410\n'
    'DCGM_FI_DEV_GPU_UTIL{gpu="1",modelName="B"} 37\n'
    'DCGM_FI_DEV_POWER_USAGE{gpu="1"} -Inf\n'
)


def test_nan_infinities_and_absurd_values_cost_one_value_each(page_server, capsys):
    url = page_server(ODD)
    assert main(["top", "--remote-only", "--remote", url, "--json"]) == 0

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} in the JSON")

    doc = json.loads(capsys.readouterr().out, parse_constant=no_constants)
    g0, g1 = doc["gpus"]
    assert (g0["gpu_util_pct"], g0["power_w"], g0["temperature_c"], g0["sm_clock_mhz"]) == (
        None, None, None, 1410,
    )  # fmt: skip
    assert g0["problem"] == (
        "values out of range left out: DCGM_FI_DEV_GPU_TEMP, DCGM_FI_DEV_GPU_UTIL, "
        "DCGM_FI_DEV_POWER_USAGE"
    )
    assert (g1["gpu_util_pct"], g1["power_w"]) == (37, None)
    assert main(["top", "--remote-only", "--remote", url, "--once"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 200  # no 300-digit figure


@pytest.mark.slow
def test_thousands_of_gpus_and_a_hundred_thousand_processes_are_cut_and_said(
    page_server, capsys, monkeypatch
):
    import gpuwatch.monitor.nvml.remote as remote

    # NB: the 10 MiB page comes from a server in this process, sharing its GIL: on a loaded
    # machine it can take longer than the 3 s deadline to send (the drip test checks that one).
    fetch = remote.fetch
    monkeypatch.setattr(remote, "fetch", lambda url, _t, most: fetch(url, 30.0, most))
    monkeypatch.setattr(remote, "TIMEOUT_S", 30.0)  # and the startup's wait for a first answer
    monkeypatch.setenv("COLUMNS", "200")
    gpus = "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",modelName="H"}} 5\n' for i in range(5000))
    procs = "".join(
        f'gpuwatch_process_gpu_memory_bytes{{gpu="0",pid="{p}",command="p"}} {p}\n'
        for p in range(100_000)
    )
    url = page_server(gpus + procs)
    started = time.monotonic()
    assert main(["top", "--remote-only", "--remote", url, "--once"]) == 0
    assert time.monotonic() - started < 40
    out = capsys.readouterr().out
    assert "GPU 0: 99,936 more processes not shown (the 64 using the most memory are)" in out
    assert "GPU 63: its /metrics lists 4,936 more GPUs, not shown (at most 64)" in out
    (g0,) = [g for g in parse_metrics(gpus + procs, "h") if g.index == 0]
    assert [p.pid for p in g0.processes[:2]] == [99_999, 99_998]  # the most memory first


def test_remote_without_local_nvml_says_the_local_gpus_are_missing(
    page_server, capsys, monkeypatch
):
    import gpuwatch.monitor.nvml as nvml

    def no_nvml(**kw: object) -> None:
        raise nvml.NvmlUnavailable("NVML is not available: libnvidia-ml.so.1 not found")

    monkeypatch.setattr(nvml, "open_backend", no_nvml)
    url = page_server('DCGM_FI_DEV_GPU_UTIL{gpu="0",modelName="A"} 5\n')
    assert main(["top", "--remote", url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["problem"] == (
        "no local GPUs (NVML is not available: libnvidia-ml.so.1 not found): showing the remote "
        "hosts only"
    )
    assert main(["top", "--remote", url, "--once"]) == 0
    assert "! no local GPUs (NVML is not available" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("url", "why"),
    [
        (
            "javascript:alert(1)",
            "neither an http(s):// URL nor HOST:PORT (e.g. http://node-a:9400)",
        ),
        ("JavaScript://alert(1)", "only http:// and https:// are read"),
        ("ftp://node-a/metrics", "only http:// and https:// are read"),
        ("file:///etc/passwd", "only http:// and https:// are read"),
        ("mailto:ops@node-a", "neither an http(s):// URL nor HOST:PORT (e.g. http://node-a:9400)"),
        ("data:text/plain,x", "neither an http(s):// URL nor HOST:PORT (e.g. http://node-a:9400)"),
        ("http://", "no host, or a port that is not a number"),
        ("http://node-a:99999", "no host, or a port that is not a number"),
    ],
)
def test_a_url_that_is_not_http_is_refused_before_anything_is_opened(
    url: str, why: str, capsys, monkeypatch
):
    import gpuwatch.monitor.nvml as nvml
    import gpuwatch.monitor.nvml.remote as remote

    opened: list[str] = []
    monkeypatch.setattr(nvml, "open_backend", lambda **kw: opened.append("nvml"))
    monkeypatch.setattr(remote, "RemoteHost", lambda url, *a, **kw: opened.append(url))
    assert main(["top", "--remote", url, "--once"]) == 2
    assert opened == []  # neither the local GPUs nor any host was tried
    assert capsys.readouterr().err == f"gpuwatch: error: --remote {url}: {why}\n"


def test_host_port_and_a_bare_host_still_work(page_server, capsys):
    from gpuwatch.monitor.nvml.remote import checked_url, metrics_url

    url = page_server('DCGM_FI_DEV_GPU_UTIL{gpu="0",modelName="A"} 5\n')
    host_port = url.removeprefix("http://")
    assert main(["top", "--remote-only", "--remote", host_port, "--once"]) == 0
    assert "A" in capsys.readouterr().out
    for bare, fetched in [
        ("node-a", "http://node-a/metrics"),
        ("node-a:9400", "http://node-a:9400/metrics"),
        ("10.0.0.7:9400/gpu", "http://10.0.0.7:9400/gpu"),
        ("[::1]:9400", "http://[::1]:9400/metrics"),
        ("HTTPS://node-a", "https://node-a/metrics"),
    ]:
        assert metrics_url(checked_url(bare)) == fetched
