"""One HTTP(S) GET with one deadline for all of it: connecting, the TLS handshake, the headers
and the body.

``urllib``'s ``timeout`` bounds each socket operation, so a server that drips its headers a byte
every second is never timed out. Here every read and write first sets the socket's timeout to
what is left of the deadline (the TLS handshake is bounded as a whole by the timeout it starts
with), and urllib's plumbing (proxies from the environment, redirects) is kept.
"""

from __future__ import annotations

import functools
import http.client
import socket
import ssl
import time
import urllib.error
import urllib.request
from typing import Any

_MIB = 1024 * 1024
_Address = tuple[str, int]


def _left(deadline: float, timeout_s: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"no whole answer within {timeout_s:g} s")
    return left


class _Bounded:
    """Every read and write of the socket within the fetch's deadline."""

    deadline: float | None = None
    timeout_s: float = 0.0

    def _bound(self) -> None:
        if self.deadline is not None:
            self.settimeout(_left(self.deadline, self.timeout_s))  # type: ignore[attr-defined]

    def recv_into(self, *args: object, **kwargs: object) -> int:
        self._bound()
        return int(super().recv_into(*args, **kwargs))  # type: ignore[misc]

    def recv(self, *args: object, **kwargs: object) -> bytes:
        self._bound()
        return bytes(super().recv(*args, **kwargs))  # type: ignore[misc]

    def sendall(self, *args: object, **kwargs: object) -> None:
        self._bound()
        super().sendall(*args, **kwargs)  # type: ignore[misc]


class _Socket(_Bounded, socket.socket):
    pass


class _TlsSocket(_Bounded, ssl.SSLSocket):
    pass


def _open(
    address: _Address, timeout: object = None, source_address: _Address | None = None, **kw: float
) -> socket.socket:
    """http.client's ``create_connection``, every step within the fetch's deadline (``kw``)."""
    (host, port), deadline, timeout_s = address, kw["deadline"], kw["timeout_s"]
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = _Socket(family, kind, proto)
        try:
            sock.settimeout(_left(deadline, timeout_s))
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        sock.deadline, sock.timeout_s = deadline, timeout_s
        # NB: the TLS handshake that follows is bounded as a whole by this timeout.
        sock.settimeout(_left(deadline, timeout_s))
        return sock
    raise error or OSError(f"cannot resolve {host}")


class _Http(http.client.HTTPConnection):
    def __init__(self, host: str, *, deadline: float, timeout_s: float, **kw: Any) -> None:
        super().__init__(host, **kw)
        self._create_connection = functools.partial(_open, deadline=deadline, timeout_s=timeout_s)


class _Https(http.client.HTTPSConnection):
    def __init__(self, host: str, *, deadline: float, timeout_s: float, **kw: Any) -> None:
        super().__init__(host, **kw)
        self._deadline, self._timeout_s = deadline, timeout_s
        self._create_connection = functools.partial(_open, deadline=deadline, timeout_s=timeout_s)

    def connect(self) -> None:
        super().connect()
        if isinstance(self.sock, _TlsSocket):
            self.sock.deadline, self.sock.timeout_s = self._deadline, self._timeout_s


class _HttpHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: float, timeout_s: float) -> None:
        super().__init__()
        self.bound = {"deadline": deadline, "timeout_s": timeout_s}

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_Http, **self.bound), req)  # type: ignore[arg-type]


class _HttpsHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: float, timeout_s: float) -> None:
        context = ssl.create_default_context()
        context.sslsocket_class = _TlsSocket
        super().__init__(context=context)
        self.context = context
        self.bound = {"deadline": deadline, "timeout_s": timeout_s}

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(
            functools.partial(_Https, **self.bound),  # type: ignore[arg-type]
            req,
            context=self.context,
        )


def fetch(url: str, timeout_s: float, max_bytes: int) -> str:
    """The body of ``url``: at most ``max_bytes``, the whole exchange within ``timeout_s``
    (TimeoutError past it, ValueError past the size)."""
    deadline = time.monotonic() + timeout_s
    opener = urllib.request.build_opener(
        _HttpHandler(deadline, timeout_s), _HttpsHandler(deadline, timeout_s)
    )
    chunks: list[bytes] = []
    size = 0
    try:
        with opener.open(url, timeout=timeout_s) as answer:
            while chunk := answer.read1(65536):
                chunks.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    raise ValueError(f"the reply is over {max_bytes // _MIB} MiB")
                _left(deadline, timeout_s)
    except (TimeoutError, urllib.error.URLError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, TimeoutError):
            raise TimeoutError(f"no whole answer within {timeout_s:g} s") from None
        raise
    return b"".join(chunks).decode("utf-8", "replace")
