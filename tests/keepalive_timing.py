"""A kept-alive request timed against a request on a new connection, for
the servers' no-stall tests (tests/test_embedded_server.py,
tests/test_production_server.py)."""

from __future__ import annotations

import http.client
import statistics
import time

# A kept connection saves the connect: it must not cost much more than a new
# one. The stall it guards against (Nagle against delayed ACK) made it 13
# times as slow; 1.5 times failed once with the two timed one after the
# other while the suite's other worker ran, so they are timed in turns; 2
# times failed once too, timed in turns under the whole suite (7.0 ms
# against 3.5 on SQLite). Three times still fails a stall four times over.
MAX_RATIO = 3.0


def _get(conn: http.client.HTTPConnection, path: str, key: str) -> float:
    began = time.perf_counter()
    conn.request("GET", path, headers={"x-api-key": key})
    response = conn.getresponse()
    response.read()
    assert response.status == 200, response.status
    return time.perf_counter() - began


def kept_and_new(port: int, path: str, key: str, requests: int) -> tuple[float, float]:
    """Median seconds of a request on one kept-alive connection and on a
    new connection each, taken in turns, so that load from elsewhere weighs
    on both alike."""
    kept_conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    _get(kept_conn, path, key)  # connect, and warm the thread's database connection
    kept, fresh = [], []
    try:
        for _ in range(requests):
            kept.append(_get(kept_conn, path, key))
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                fresh.append(_get(conn, path, key))
            finally:
                conn.close()
    finally:
        kept_conn.close()
    return statistics.median(kept), statistics.median(fresh)


def assert_no_stall(port: int, path: str, key: str, requests: int) -> None:
    kept, fresh = kept_and_new(port, path, key, requests)
    assert kept <= MAX_RATIO * fresh, f"kept-alive p50 {kept * 1000:.2f} ms, new connection p50 {fresh * 1000:.2f} ms"
