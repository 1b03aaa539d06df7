"""Throttling of failed authentication, per client address.

A client that presents keys that do not authenticate is answered 429 once
it has failed ``NODE_FLOW_AUTH_FAILURES_PER_MINUTE`` times in the last
minute, without hashing or looking up what it sends, until the oldest of
those failures is a minute old. Counted per process (each API process
counts its own; a client spread over N processes gets N times the
allowance), in memory: a restart forgives. Successful requests are never
counted. The clock is ``nodeflow.clock``, so tests move time instead of
sleeping.
"""

from __future__ import annotations

import threading
from collections import deque

from django.conf import settings

from nodeflow import clock

WINDOW_S = 60.0
_MAX_CLIENTS = 10_000

_lock = threading.Lock()
_failures: dict[str, deque[float]] = {}


def _limit() -> int:
    return int(settings.NODE_FLOW_AUTH_FAILURES_PER_MINUTE)


def wait_s(client: str) -> float | None:
    """Seconds ``client`` must wait before its next attempt, or None."""
    now = clock.now().timestamp()
    with _lock:
        recent = _failures.get(client)
        if recent is None:
            return None
        while recent and recent[0] <= now - WINDOW_S:
            recent.popleft()
        if len(recent) < _limit():
            return None
        return recent[0] + WINDOW_S - now


def failed(client: str) -> None:
    """Count one failed authentication of ``client``."""
    now = clock.now().timestamp()
    with _lock:
        if len(_failures) > _MAX_CLIENTS:
            _failures.clear()
        _failures.setdefault(client, deque()).append(now)


def forget() -> None:
    with _lock:
        _failures.clear()
