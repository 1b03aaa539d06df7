"""Helpers for system-task tests: a real HTTP server on loopback, and running
the system-task role in the test's thread.

The server answers by path:

- ``/ok``: 200 with a JSON echo of the request (method, path, headers, body);
- ``/status/<code>``: that status (``?retry_after=`` adds a Retry-After);
- ``/slow``: answers only when the test releases it (or after 10 s);
- ``/close``: closes the connection without answering;
- ``/sequence``: the next answer of ``server.sequence`` (a list of
  ``(status, body)``), repeating the last one;
- ``/hold``: waits for ``server.release`` like ``/slow``, then 200.

Every request is recorded in ``server.requests``.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from executions.roles.systemtasks import SystemTaskRole
from tests.engine_helpers import sweep

SLOW_LIMIT_S = 10.0


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    base: str = ""
    requests: list[Seen] = field(default_factory=list)
    sequence: list[tuple[int, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    def hits(self, path: str) -> int:
        return sum(1 for seen in self.requests if urlsplit(seen.path).path == path)


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _any(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            server.requests.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            route = url.path.strip("/").split("/")
            if route[0] == "close":
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if route[0] in ("slow", "hold"):
                server.arrived.set()
                server.release.wait(SLOW_LIMIT_S)
            if route[0] == "status":
                self._answer(int(route[1]), {"status": int(route[1])}, query.get("retry_after"))
            elif route[0] == "sequence":
                status, payload = server.sequence.pop(0) if len(server.sequence) > 1 else server.sequence[0]
                self._answer(status, payload)
            else:
                echo = {
                    "method": self.command,
                    "path": self.path,
                    "headers": dict(self.headers.items()),
                    "body": body.decode() if body else None,
                }
                self._answer(200, echo)

        def _answer(self, status: int, payload: Any, retry_after: str | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("x-test", "yes")
            if retry_after:
                self.send_header("retry-after", retry_after)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

    return Handler


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server on loopback answering with ``handler``, for the
    block; yields its base URL. Handlers still running when the block ends
    must have been let go by then (shutdown waits for the serving loop)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def http_server() -> Iterator[Server]:
    server = Server()
    with serving(_handler(server)) as server.base:
        yield server
        server.release.set()


def run_system_tasks() -> int:
    """What the system-task role would do now, then the other roles."""
    count = SystemTaskRole().run_once()
    sweep()
    return count


def system_task(ref: str, task_type: str, name: str | None = None, **inputs: Any) -> dict:
    """A workflow task of a system type whose inputParameters are ``inputs``."""
    return {"name": name or ref, "taskReferenceName": ref, "type": task_type, "inputParameters": inputs}


def http_task(ref: str, uri: str, *, name: str | None = None, **request: Any) -> dict:
    return system_task(ref, "HTTP", name, http_request={"uri": uri, **request})
