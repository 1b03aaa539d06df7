"""Which HTTP failures are worth retrying, and how long to wait between tries."""

from __future__ import annotations

import random
import threading

import httpx

# Server answers that mean "try again later", not "you are wrong".
TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


def is_transient(exc: BaseException) -> bool:
    """True for a failure another try may not meet: no connection, a timeout,
    an overloaded or restarting server, a garbled answer."""
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code in TRANSIENT_STATUSES
    return isinstance(exc, (httpx.TransportError, ValueError))


class Backoff:
    """Exponential delay with full jitter, capped; ``reset`` after a success."""

    def __init__(self, *, first_s: float = 0.1, max_s: float = 10.0, factor: float = 2.0) -> None:
        self.first_s, self.max_s, self.factor = first_s, max_s, factor
        self.tries = 0

    def next_delay(self) -> float:
        ceiling = min(self.max_s, self.first_s * self.factor**self.tries)
        self.tries += 1
        return random.uniform(ceiling / 2, ceiling)

    def wait(self, stop: threading.Event) -> bool:
        """Sleep the next delay; returns early (True) when ``stop`` is set."""
        return stop.wait(self.next_delay())

    def reset(self) -> None:
        self.tries = 0
