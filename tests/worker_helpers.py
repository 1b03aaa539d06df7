"""Helpers for the worker SDK's tests that talk to a stand-in server."""

from __future__ import annotations

import contextlib
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from nodeflow_worker import LeasedTask


def leased_task(task_id: str) -> LeasedTask:
    """A leased task as a poll would answer it, for reporting its result."""
    return LeasedTask(
        task_id=task_id,
        execution_id="e",
        task_type="q",
        input={},
        attempt=1,
        idempotency_key="k",
        lease_token="lease",
        raw={},
    )


@contextlib.contextmanager
def loopback_server(
    handler: type[BaseHTTPRequestHandler], *, tls: ssl.SSLContext | None = None, **attributes: Any
) -> Iterator[ThreadingHTTPServer]:
    """A real HTTP server on 127.0.0.1 (a free port) serving ``handler`` in a
    thread, with ``attributes`` set on it for the handler to record into."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    for name, value in attributes.items():
        setattr(server, name, value)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
