"""Dropping persistent database connections the server has already closed.

With ``CONN_MAX_AGE`` > 0 a thread keeps its connection between requests
(and a role between ticks). After PostgreSQL restarts, or a backend is
terminated, that connection is dead, and the first query on it fails: the
request would answer 500, the tick would fail. ``CONN_HEALTH_CHECKS`` avoids
that with a query per request (a round trip and a commit each). This looks
at the socket instead: an idle session that is not LISTENing has nothing to
read unless the server is closing it (its last error message, then EOF), so
a readable socket means the connection is gone. One ``poll()`` per
connection, no round trip. A restart in the middle of a request still fails
that request.
"""

from __future__ import annotations

import select

from django.db import connections


def close_dead_connections(**kwargs) -> int:
    """Close this thread's PostgreSQL connections whose server side has gone;
    how many. Connections inside a transaction are left alone. Connected to
    ``request_started``; called by the role loop before each tick."""
    closed = 0
    for connection in connections.all(initialized_only=True):
        raw = connection.connection
        if connection.vendor != "postgresql" or raw is None or connection.in_atomic_block:
            continue
        if _server_closed(raw):
            connection.close()
            closed += 1
    return closed


def _server_closed(raw) -> bool:
    try:
        poller = select.poll()
        poller.register(raw.pgconn.socket, select.POLLIN)
        return bool(poller.poll(0))
    except Exception:  # noqa: BLE001 - no usable socket (already closed): dead too
        return True
