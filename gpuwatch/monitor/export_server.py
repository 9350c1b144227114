"""The exporter's HTTP(S) server: no client, however slow or idle, holds up another or SIGTERM.

prometheus_client's ``start_http_server`` does the TLS handshake in the thread that accepts (one
idle TCP connection then blocks every scrape and the shutdown), never times a connection out
(idle ones pile up until the descriptor limit, where its accept loop spins), and listens with a
backlog of 5. This server keeps its scrape answer (prometheus_client's ``MetricsHandler``: gzip,
OpenMetrics, ``name[]``) and changes how connections are held:

- the handshake runs in the connection's own thread, bounded like the rest of it;
- each connection has one deadline (``gpuwatch export --client-timeout``), accept to last byte (a client that sends a byte a second
  is cut off as surely as an idle one), enforced by one reaper thread;
- at most :data:`MAX_CONNECTIONS` connections are served at once, fewer when the descriptor limit
  is low; the rest wait in a listen backlog of :data:`BACKLOG`, unaccepted, costing no descriptor.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import resource
import socket
import ssl
import threading
import time
from http.server import HTTPServer
from typing import Any

from prometheus_client.exposition import MetricsHandler

from profilers.registry import OwnThread

#: Connections served at once (a scrape takes milliseconds: more wait in the backlog).
MAX_CONNECTIONS = 128
#: The listen backlog (the kernel caps it at net.core.somaxconn, 4096 on current Linux).
BACKLOG = 1024
#: Descriptors left for everything else the exporter holds (NVML, the terminal, the listener).
RESERVED_FDS = 32


def connection_cap(limit: int = MAX_CONNECTIONS) -> int:
    """Connections served at once: ``limit``, or fewer where RLIMIT_NOFILE is low, so that the
    server never meets EMFILE from its own connections."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(1, min(limit, soft - RESERVED_FDS))


class _Reaper:
    """One thread that shuts down every connection past its deadline (the handler's thread then
    sees end-of-file or a reset and finishes)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._live: dict[int, socket.socket] = {}
        self._ids = itertools.count()
        self._closed = False
        OwnThread(target=self._run, name="gpuwatch-export-reaper", daemon=True).start()

    def watch(self, conn: socket.socket, deadline: float) -> int:
        with self._cond:
            key = next(self._ids)
            self._live[key] = conn
            heapq.heappush(self._heap, (deadline, key))
            self._cond.notify()
            return key

    def swap(self, key: int, conn: socket.socket) -> None:
        """The connection is now ``conn`` (the TLS socket that took over the descriptor)."""
        with self._cond:
            if key in self._live:
                self._live[key] = conn

    def forget(self, key: int) -> None:
        # NB: under the lock, before the handler closes the socket: the reaper never shuts down
        # a descriptor number that has since been reused by another connection.
        with self._cond:
            self._live.pop(key, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                while self._heap and (
                    self._heap[0][0] <= now or self._heap[0][1] not in self._live
                ):
                    _, key = heapq.heappop(self._heap)
                    conn = self._live.pop(key, None)
                    if conn is not None:
                        try:
                            # NB: the base class's shutdown, also for a TLS socket: no TLS
                            # close_notify exchange with a client that is not answering.
                            socket.socket.shutdown(conn, socket.SHUT_RDWR)
                        except OSError:
                            pass  # already gone
                self._cond.wait(self._heap[0][0] - now if self._heap else None)


class _Handler(MetricsHandler):
    """prometheus_client's scrape answer; each server's subclass bounds every socket
    operation by its connection deadline (``timeout``)."""

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing (a scrape a second would fill the journal)."""


class MetricsServer(HTTPServer):
    """Serves ``registry`` at every path, over TLS when ``tls`` is given; :meth:`close` ends it
    within about half a second whatever the clients do."""

    request_queue_size = BACKLOG

    def __init__(
        self,
        address: str,
        port: int,
        registry: Any,
        deadline_s: float,
        tls: ssl.SSLContext | None = None,
        max_connections: int | None = None,
    ) -> None:
        info = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, sockaddr = info[0]
        self.address_family = family
        self.tls = tls
        self.deadline_s = deadline_s
        self.max_connections = connection_cap() if max_connections is None else max_connections
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._closing = threading.Event()
        handler = type(
            "GpuwatchMetricsHandler", (_Handler,), {"registry": registry, "timeout": deadline_s}
        )
        super().__init__((str(sockaddr[0]), int(sockaddr[1])), handler)
        self._reaper = _Reaper()
        self._thread = OwnThread(
            target=self.serve_forever, name="gpuwatch-export-http", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return self.socket.accept()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                # NB: the pending connection keeps the listener readable, so without a pause
                # the select loop would spin at full CPU until a descriptor frees up.
                self._closing.wait(0.1)
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        # NB: wait for a free slot here, in the accepting thread: the connections beyond the
        # cap stay in the kernel's backlog (no descriptor, no thread) until one ends.
        while not self._slots.acquire(timeout=0.25):
            if self._closing.is_set():
                self.shutdown_request(request)
                return
        key = self._reaper.watch(request, time.monotonic() + self.deadline_s)
        OwnThread(
            target=self._serve_one,
            args=(request, client_address, key),
            name="gpuwatch-export-client",
            daemon=True,
        ).start()

    def _serve_one(self, request: socket.socket, client_address: Any, key: int) -> None:
        conn = request
        try:
            if self.tls is not None:
                # The whole handshake is bounded by the socket's timeout (and the reaper).
                request.settimeout(self.deadline_s)
                conn = self.tls.wrap_socket(request, server_side=True)
                self._reaper.swap(key, conn)
            self.finish_request(conn, client_address)
        except Exception:  # noqa: S110 (a client that hangs up, stalls or fails TLS: nothing to say)
            pass
        finally:
            self._reaper.forget(key)
            self.shutdown_request(conn)
            self._slots.release()

    def close(self) -> None:
        """Stops accepting and closes the listener (connections being answered are cut off by
        their deadline at the latest; their threads are daemons)."""
        self._closing.set()
        if self._thread.is_alive():
            self.shutdown()
        self.server_close()
        self._reaper.close()


def tls_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """A server context for the certificate and key (OSError/ssl.SSLError when unreadable)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    return context
