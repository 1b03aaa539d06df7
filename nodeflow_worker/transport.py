"""The SDK's HTTP transport: httpx's client on the standard library's
``http.client`` connections, kept alive in a pool.

httpx's own transport (httpcore and h11) cost about as much CPU per request
as everything else a worker does for a no-op task: a worker shares its
machine's cores with the server, and a sequential flow waits for each of its
requests, so that CPU is latency. This transport keeps httpx's interface
(``Client``, ``Response``, its errors and timeouts) and sends each request
with ``http.client``: the request line, headers and body in one write (no
Nagle / delayed-ACK stall), the answer read whole. ``exchange`` is that one
request; ``handle_request`` is httpx's way in, and the SDK's ``Client``
calls ``exchange`` itself for its own calls (httpx's client around it cost
as much again: nodeflow_worker/client.py).

Connections are kept alive and reused most recently used first; one that
the server has closed while it was idle (its socket reads as ready) is
dropped before it is used, as httpcore does. Errors become httpx's: a refused
or failed connect is ``ConnectError``, a timeout ``ConnectTimeout`` or
``ReadTimeout``, a connection lost mid-request ``RemoteProtocolError`` or
``ReadError``, so callers tell transient failures the same way
(``backoff.is_transient``).
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
from typing import NamedTuple

import httpx

MAX_IDLE = 64  # kept-alive connections a pool keeps at most

Origin = tuple[str, str, int]  # scheme, host, port


def origin_of(url: httpx.URL) -> Origin:
    """Where a request to ``url`` goes; ``UnsupportedProtocol`` unless http or https."""
    if url.scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol(f"the URL's scheme must be http or https, not {url.scheme!r}: {url}")
    return url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80)


class Answer(NamedTuple):
    """An HTTP answer, read whole."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


class _OneWrite:
    """A request's head and body in one write. ``http.client`` sends the
    body in a write of its own; with Nagle's algorithm on, the second write
    waits for the ACK of the first, which the server delays (about 40 ms on
    Linux). TCP_NODELAY alone would send two packets; this sends one."""

    _buffer: list[bytes]
    sock: socket.socket

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]  # the http.client class it is mixed into
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send_output(self, message_body=None, encode_chunked=False) -> None:
        if not isinstance(message_body, bytes):
            super()._send_output(message_body, encode_chunked)  # type: ignore[misc]  # as above
            return
        self._buffer.extend((b"", message_body))  # the head's blank line, then the body
        data = b"\r\n".join(self._buffer)
        del self._buffer[:]
        self.send(data)  # type: ignore[attr-defined]  # http.client's


class _Connection(_OneWrite, http.client.HTTPConnection):
    pass


class _TLSConnection(_OneWrite, http.client.HTTPSConnection):
    pass


def _dropped(connection: http.client.HTTPConnection) -> bool:
    """An idle kept-alive connection the server has closed (or sent
    something unasked on) reads as ready: it cannot carry a request."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class KeptAliveTransport(httpx.BaseTransport):
    """``httpx.Client(transport=KeptAliveTransport())``: HTTP/1.1 over
    kept-alive ``http.client`` connections, safe to share between threads."""

    def __init__(self, *, verify: ssl.SSLContext | bool = True) -> None:
        # httpx's own default context (certifi's authorities, SSL_CERT_FILE):
        # an https URL is trusted as it was with httpx's transport.
        self._tls = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify)
        self._lock = threading.Lock()
        self._idle: dict[Origin, list[http.client.HTTPConnection]] = {}
        self._closed = False

    # --- the pool --------------------------------------------------------------
    def _take(self, origin: Origin, timeout: float | None) -> http.client.HTTPConnection:
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                connection = idle.pop() if idle else None
            if connection is None:
                scheme, host, port = origin
                if scheme == "https":
                    return _TLSConnection(host, port, timeout=timeout, context=self._tls)
                return _Connection(host, port, timeout=timeout)
            if not _dropped(connection):
                return connection
            connection.close()

    def _give_back(self, origin: Origin, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            if not self._closed and len(idle) < MAX_IDLE:
                idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for connection in connections:
            connection.close()

    # --- one request -----------------------------------------------------------
    def exchange(
        self,
        origin: Origin,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        *,
        connect_s: float | None,
        read_s: float | None,
    ) -> Answer:
        """One request to ``origin`` (scheme, host, port): ``target`` is the
        path and query, ``headers`` every header to send (Host included),
        the answer read whole. Failures are httpx's errors, without a
        request: ``handle_request``'s caller, httpx's client, attaches it,
        as does the SDK's ``Client``."""
        connection = self._take(origin, connect_s)
        try:
            if connection.sock is None:
                try:
                    connection.connect()
                except TimeoutError as exc:
                    raise httpx.ConnectTimeout(str(exc) or "timed out connecting") from exc
                except OSError as exc:
                    raise httpx.ConnectError(str(exc)) from exc
            connection.sock.settimeout(read_s)
            connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                connection.putheader(name, value)
            connection.endheaders(body or None)
            answer = connection.getresponse()
            data = answer.read()
        except httpx.TransportError:
            connection.close()
            raise
        except TimeoutError as exc:
            connection.close()
            raise httpx.ReadTimeout(str(exc) or "timed out") from exc
        except (http.client.RemoteDisconnected, BrokenPipeError, http.client.IncompleteRead) as exc:
            connection.close()
            raise httpx.RemoteProtocolError(f"the server closed the connection: {exc}") from exc
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
        if answer.will_close:
            connection.close()
        else:
            self._give_back(origin, connection)
        return Answer(answer.status, answer.reason, answer.getheaders(), data)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """httpx's side: its request sent by ``exchange``, its response built from the answer."""
        timeouts = request.extensions.get("timeout", {})
        answer = self.exchange(
            origin_of(request.url),
            request.method,
            request.url.raw_path.decode("ascii"),
            request.headers.raw,
            request.read(),
            connect_s=timeouts.get("connect"),
            read_s=timeouts.get("read"),
        )
        return httpx.Response(
            answer.status,
            headers=answer.headers,
            stream=httpx.ByteStream(answer.body),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": answer.reason.encode("ascii", "replace")},
        )
