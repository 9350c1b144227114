"""The exporter's HTTP(S) server: no client, however slow or idle, holds up another or SIGTERM.

prometheus_client's ``start_http_server`` does the TLS handshake in the thread that accepts (one
idle TCP connection then blocks every scrape and the shutdown), never times a connection out
(idle ones pile up until the descriptor limit, where its accept loop spins), and listens with a
backlog of 5. This server keeps its scrape answer (prometheus_client's ``MetricsHandler``: gzip,
OpenMetrics, ``name[]``) and changes how connections are held: the handshake runs in the
connection's own thread; each connection has one deadline, accept to last byte (a client that
sends a byte a second is cut off as surely as an idle one), and an idle timeout; a bounded number
are served at once, the rest wait unaccepted in the backlog; when every slot is taken, the one
that has waited longest for its request makes room.
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
from collections.abc import Callable
from dataclasses import dataclass
from http.server import HTTPServer
from typing import Any

from prometheus_client.exposition import MetricsHandler
from prometheus_client.registry import CollectorRegistry

from gpuwatch.monitor.export import IDLE_TIMEOUT_S
from gpuwatch.monitor.threads import OwnThread

#: Connections served at once (a scrape takes milliseconds: more wait in the backlog).
MAX_CONNECTIONS = 128
#: The listen backlog (the kernel caps it at net.core.somaxconn, 4096 on current Linux).
BACKLOG = 1024
#: Descriptors left for everything else the exporter holds (NVML, the terminal, the listener).
RESERVED_FDS = 32
#: While every slot is taken, a connection that has not sent its whole request this long after
#: accept is closed to make room for the next (a scraper sends its request within milliseconds;
#: the grace keeps a burst of real scrapers from closing each other). Slow clients that fill the
#: backlog too are let in and closed a slot-full at a time: a scrape behind the whole backlog
#: (BACKLOG / MAX_CONNECTIONS = 8 rounds) waits about 2 s (2.1 s measured behind 1,100 slow
#: clients), within Prometheus' 10 s timeout.
SHED_AFTER_S = 0.25


def connection_cap(limit: int = MAX_CONNECTIONS) -> int:
    """Connections served at once: ``limit``, or fewer where RLIMIT_NOFILE is low, so that the
    server never meets EMFILE from its own connections."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(1, min(limit, soft - RESERVED_FDS))


@dataclass
class _Conn:
    sock: socket.socket
    accepted_at: float
    request_in: bool = False
    """Its request line and headers have been read: it is being answered, never shed."""
    shed: bool = False


class _Connections:
    """The connections being served: one thread shuts down every connection past its deadline
    (the handler's thread then sees end-of-file or a reset and finishes), and :meth:`shed`
    closes the one that has waited longest for its request when a slot is needed."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._live: dict[int, _Conn] = {}
        """In accept order (keys only grow): the first waiting one is the oldest."""
        self._ids = itertools.count()
        self._closed = False
        OwnThread(target=self._run, name="gpuwatch-export-reaper", daemon=True).start()

    def watch(self, conn: socket.socket, deadline: float) -> int:
        with self._cond:
            key = next(self._ids)
            self._live[key] = _Conn(conn, self._clock())
            heapq.heappush(self._heap, (deadline, key))
            self._cond.notify()
            return key

    def swap(self, key: int, conn: socket.socket) -> None:
        """The connection is now ``conn`` (the TLS socket that took over the descriptor)."""
        with self._cond:
            if key in self._live:
                self._live[key].sock = conn

    def request_in(self, key: int) -> bool:
        """Its request has arrived: from now on it is answered, never shed. False if it was
        cut off first (shed, or past its deadline): the headers ended at end-of-file, not at
        their blank line, and it gets no answer."""
        with self._cond:
            c = self._live.get(key)
            if c is None or c.shed:
                return False
            c.request_in = True
            return True

    def forget(self, key: int) -> None:
        # NB: under the lock, before the handler closes the socket: the reaper never shuts down
        # a descriptor number that has since been reused by another connection.
        with self._cond:
            self._live.pop(key, None)

    def shed(self, waited_s: float) -> bool:
        """Shuts down the oldest connection still waiting for its request, if it has waited
        ``waited_s`` or more and none shed before is still ending; True if one is ending."""
        with self._cond:
            if any(c.shed for c in self._live.values()):
                return True  # its thread has not released its slot yet: one at a time
            oldest = self._clock() - waited_s
            for c in self._live.values():
                if c.accepted_at > oldest:
                    return False  # the rest were accepted later still
                if not c.request_in:
                    c.shed = True
                    _cut(c.sock)
                    return True
            return False

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                now = self._clock()
                while self._heap and (
                    self._heap[0][0] <= now or self._heap[0][1] not in self._live
                ):
                    _, key = heapq.heappop(self._heap)
                    c = self._live.pop(key, None)
                    if c is not None:
                        _cut(c.sock)
                self._cond.wait(self._heap[0][0] - now if self._heap else None)


def _cut(conn: socket.socket) -> None:
    """Ends ``conn`` at once: its thread's read or write returns, and the thread finishes."""
    try:
        # NB: the base class's shutdown, also for a TLS socket: no TLS close_notify exchange
        # with a client that is not answering.
        socket.socket.shutdown(conn, socket.SHUT_RDWR)
    except OSError:
        pass  # already gone


class _Handler(MetricsHandler):
    """prometheus_client's scrape answer; each server's subclass bounds every socket
    operation by the idle timeout (``timeout``) and says when the request is in."""

    def parse_request(self) -> bool:
        if not super().parse_request():  # the request line and its headers, read
            return False
        server = self.server
        return not isinstance(server, MetricsServer) or server.request_in()

    def log_message(self, format: str, *args: object) -> None:
        """Log nothing (a scrape a second would fill the journal)."""


class MetricsServer(HTTPServer):
    """Serves ``registry`` at every path, over TLS when ``tls`` is given; :meth:`close` ends it
    within about half a second whatever the clients do. The limits are those the constants of
    this module and gpuwatch/monitor/export.py describe (``idle_s`` at most ``deadline_s``)."""

    request_queue_size = BACKLOG

    def __init__(
        self,
        address: str,
        port: int,
        registry: CollectorRegistry,
        deadline_s: float,
        tls: ssl.SSLContext | None = None,
        max_connections: int | None = None,
        idle_s: float = IDLE_TIMEOUT_S,
        shed_after_s: float = SHED_AFTER_S,
    ) -> None:
        info = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, sockaddr = info[0]
        self.address_family = family
        self.tls = tls
        self.deadline_s = deadline_s
        self.idle_s = min(idle_s, deadline_s)
        self.shed_after_s = shed_after_s
        self.max_connections = connection_cap() if max_connections is None else max_connections
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._closing = threading.Event()
        self._current = threading.local()
        """The key of the connection this thread serves (read by :meth:`request_in`)."""
        handler = type(
            "GpuwatchMetricsHandler", (_Handler,), {"registry": registry, "timeout": self.idle_s}
        )
        super().__init__((str(sockaddr[0]), int(sockaddr[1])), handler)
        self._connections = _Connections()
        self._thread = OwnThread(
            target=self.serve_forever, name="gpuwatch-export-http", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def get_request(self) -> tuple[socket.socket, object]:
        try:
            return self.socket.accept()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                # NB: the pending connection keeps the listener readable, so without a pause
                # the select loop would spin at full CPU until a descriptor frees up.
                self._closing.wait(0.1)
            raise

    def process_request(self, request: Any, client_address: object) -> None:
        # NB: wait for a free slot here, in the accepting thread: the connections beyond the
        # cap stay in the kernel's backlog (no descriptor, no thread) until one ends. While
        # every slot is taken, the connection that has waited longest for its request makes
        # room (slow and idle clients never keep a scrape waiting for their deadline).
        while not self._slots.acquire(blocking=False):
            if self._closing.is_set():
                self.shutdown_request(request)
                return
            self._connections.shed(self.shed_after_s)
            if self._slots.acquire(timeout=0.02):  # the shed one's thread ends in microseconds
                break
        key = self._connections.watch(request, time.monotonic() + self.deadline_s)
        OwnThread(
            target=self._serve_one,
            args=(request, client_address, key),
            name="gpuwatch-export-client",
            daemon=True,
        ).start()

    def request_in(self) -> bool:
        """The request of the connection this thread serves has arrived: True if it is to be
        answered (never shed from now on), False if the connection was cut off first."""
        key = getattr(self._current, "key", None)
        return key is None or self._connections.request_in(key)

    def _serve_one(self, request: socket.socket, client_address: object, key: int) -> None:
        conn = request
        self._current.key = key
        try:
            if self.tls is not None:
                # The handshake's reads and writes are bounded by the idle timeout, the whole
                # of it by the deadline (the reaper).
                request.settimeout(self.idle_s)
                conn = self.tls.wrap_socket(request, server_side=True)
                self._connections.swap(key, conn)
            self.finish_request(conn, client_address)
        except Exception:  # noqa: S110 (a client that hangs up, stalls or fails TLS: nothing to say)
            pass
        finally:
            self._current.key = None
            self._connections.forget(key)
            self.shutdown_request(conn)
            self._slots.release()

    def close(self) -> None:
        """Stops accepting and closes the listener (connections being answered are cut off by
        their deadline at the latest; their threads are daemons)."""
        self._closing.set()
        if self._thread.is_alive():
            self.shutdown()
        self.server_close()
        self._connections.close()


def tls_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """A server context for the certificate and key (OSError/ssl.SSLError when unreadable)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    return context
