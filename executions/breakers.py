"""Circuit breakers for the system tasks that leave the process (SPEC §8).

Configured by NODE_FLOW_CIRCUIT_BREAKER (off unless ``"enabled": true``).
Per process: a shared breaker would need shared state, a second dependency
that can fail. Keyed by target: HTTP, HTTP_POLL and WEBHOOK by host (one
dead host is dead for all three), GRPC by service name.

- CLOSED: calls go through. Over the last ``windowMs``, once at least
  ``minimumRequests`` calls have ended and failures / calls ≥ ``failureRatio``,
  the breaker opens. Only failures that say the dependency is unhealthy count
  (timeouts, connection errors, 5xx, 429); a 4xx is the caller's problem and
  counts as an answer.
- OPEN: every call is refused without being made; the runner fails the task
  retryably (never terminally: the retry policy still decides), naming
  ``circuitOpen:<key>``. After the open period the breaker is HALF_OPEN.
- HALF_OPEN: exactly one probe is let through (under a lock); the rest are
  refused. The probe succeeds → CLOSED, open period back to ``openMs``; it
  fails → OPEN again for twice the last period, at most ``maxOpenMs``.

Time is read from an injectable monotonic clock (``configure(clock=…)``), so
tests move it instead of sleeping. Each process writes its breakers to
``BreakerState`` every REPORT_INTERVAL_S (``report_if_due``), one row per
namespace that used the breaker, for ``GET /v1/ns/{ns}/breakers``.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from executions.models import BreakerState
from nodeflow import clock as wall_clock

CLOSED, OPEN, HALF_OPEN = "CLOSED", "OPEN", "HALF_OPEN"
REPORT_INTERVAL_S = 5.0
# The route lists rows reported this recently (a dead process stops reporting).
LISTED_FOR_S = 300.0
# Rows not reported for this long are deleted by any reporter.
FORGET_AFTER_S = 3600.0

Clock = Callable[[], float]


@dataclass(frozen=True)
class Config:
    enabled: bool = False
    failure_ratio: float = 0.5
    minimum_requests: int = 10
    window_s: float = 30.0
    open_s: float = 5.0
    max_open_s: float = 60.0

    @classmethod
    def parse(cls, raw: dict | None) -> Config:
        raw = raw or {}
        unknown = set(raw) - {"enabled", "failureRatio", "minimumRequests", "windowMs", "openMs", "maxOpenMs"}
        if unknown:
            raise ImproperlyConfigured(f"NODE_FLOW_CIRCUIT_BREAKER: unknown field(s) {', '.join(sorted(unknown))}")
        config = cls(
            enabled=raw.get("enabled") is True,
            failure_ratio=_number(raw, "failureRatio", 0.5),
            minimum_requests=int(_number(raw, "minimumRequests", 10)),
            window_s=_number(raw, "windowMs", 30_000) / 1000,
            open_s=_number(raw, "openMs", 5_000) / 1000,
            max_open_s=_number(raw, "maxOpenMs", 60_000) / 1000,
        )
        if not 0 < config.failure_ratio <= 1 or config.minimum_requests < 1 or config.max_open_s < config.open_s:
            raise ImproperlyConfigured(
                "NODE_FLOW_CIRCUIT_BREAKER: failureRatio must be in (0, 1], minimumRequests ≥ 1, maxOpenMs ≥ openMs"
            )
        return config


def _number(raw: dict, name: str, default: float) -> float:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ImproperlyConfigured(f"NODE_FLOW_CIRCUIT_BREAKER: {name} must be a positive number")
    return float(value)


@dataclass(frozen=True)
class Permit:
    """Leave to make one call; hand it back with ``release``. ``breaker`` is
    None when no breaker applies (off, or a task that leaves no process)."""

    breaker: Breaker | None = None
    probe: bool = False

    def release(self, counts: bool | None) -> None:
        """``counts``: True, the call failed in a way that counts; False, the
        dependency answered; None, no call was made (frees a probe slot)."""
        if self.breaker is not None:
            self.breaker.release(self, counts)


FREE = Permit()


class Breaker:
    def __init__(self, key: str, config: Config, clock: Clock) -> None:
        self.key, self.config, self.clock = key, config, clock
        self._lock = threading.Lock()
        self.state = CLOSED
        self._calls: deque[tuple[float, bool]] = deque()  # (ended at, counted as a failure)
        self._open_s = config.open_s
        self._opened_until = 0.0
        self._probing = False
        self.namespaces: set[int] = set()

    def acquire(self) -> Permit | None:
        """A permit, or None while open (or while half-open with its probe out)."""
        with self._lock:
            if self.state == OPEN and self.clock() >= self._opened_until:
                self.state, self._probing = HALF_OPEN, False
            if self.state == CLOSED:
                return Permit(self)
            if self.state == HALF_OPEN and not self._probing:
                self._probing = True
                return Permit(self, probe=True)
            return None

    def release(self, permit: Permit, counts: bool | None) -> None:
        with self._lock:
            now = self.clock()
            if permit.probe:
                self._probing = False
                if counts is True:
                    self._open(now, min(self._open_s * 2, self.config.max_open_s))
                elif counts is False:
                    self.state, self._open_s = CLOSED, self.config.open_s
                    self._calls.clear()
                return
            if self.state != CLOSED or counts is None:
                return  # answers to calls let through before it opened say nothing new
            self._calls.append((now, counts))
            self._prune(now)
            failures = sum(failed for _, failed in self._calls)
            if (
                len(self._calls) >= self.config.minimum_requests
                and failures / len(self._calls) >= self.config.failure_ratio
            ):
                self._open(now, self.config.open_s)

    def _open(self, now: float, seconds: float) -> None:
        # The window is kept (it is what the report shows) and cleared on closing.
        self.state, self._open_s, self._opened_until = OPEN, seconds, now + seconds

    def _prune(self, now: float) -> None:
        while self._calls and self._calls[0][0] < now - self.config.window_s:
            self._calls.popleft()

    def open_remaining_s(self) -> float:
        """Seconds until a probe may be tried (0 unless open)."""
        with self._lock:
            return max(self._opened_until - self.clock(), 0.0) if self.state == OPEN else 0.0

    def snapshot(self) -> dict:
        with self._lock:
            self._prune(self.clock())
            remaining = max(self._opened_until - self.clock(), 0.0) if self.state == OPEN else None
            return {
                "state": self.state,
                "failures": sum(f for _, f in self._calls),
                "requests": len(self._calls),
                "open_remaining_s": remaining,
            }


class Breakers:
    """This process's breakers by key."""

    def __init__(self, config: Config, clock: Clock = time.monotonic) -> None:
        self.config, self.clock = config, clock
        self._lock = threading.Lock()
        self._breakers: dict[str, Breaker] = {}

    def get(self, key: str) -> Breaker:
        with self._lock:
            breaker = self._breakers.get(key)
            if breaker is None:
                breaker = self._breakers[key] = Breaker(key, self.config, self.clock)
            return breaker

    def all(self) -> list[Breaker]:
        with self._lock:
            return list(self._breakers.values())

    def acquire(self, key: str | None, namespace_id: int) -> Permit | None:
        """A permit to call ``key``, or None while its breaker refuses calls."""
        if not self.config.enabled or key is None:
            return FREE
        breaker = self.get(key)
        breaker.namespaces.add(namespace_id)
        return breaker.acquire()


_registry: Breakers | None = None
_registry_lock = threading.Lock()


def registry() -> Breakers:
    global _registry
    with _registry_lock:
        if _registry is None:
            _registry = Breakers(Config.parse(settings.NODE_FLOW_CIRCUIT_BREAKER))
        return _registry


def configure(raw: dict | None = None, *, clock: Clock = time.monotonic) -> Breakers:
    """Replace this process's breakers (tests; ``raw`` None: from settings)."""
    global _registry
    with _registry_lock:
        config = Config.parse(settings.NODE_FLOW_CIRCUIT_BREAKER if raw is None else raw)
        _registry = Breakers(config, clock)
        return _registry


# --- reporting to the database ------------------------------------------------

_last_report = 0.0
_report_lock = threading.Lock()


def process_id() -> str:
    """Read each time: a Celery worker forks its children after import."""
    return f"{socket.gethostname()}:{os.getpid()}"


def report_if_due() -> None:
    global _last_report
    if not _report_lock.acquire(blocking=False):
        return  # another thread of this process is reporting
    try:
        if time.monotonic() - _last_report >= REPORT_INTERVAL_S:
            _last_report = time.monotonic()
            report()
    finally:
        _report_lock.release()


def report() -> int:
    """Write this process's breakers; returns how many rows were written."""
    if not registry().config.enabled:
        return 0
    now = wall_clock.now()
    rows = [
        _row(breaker, namespace_id, now) for breaker in registry().all() for namespace_id in list(breaker.namespaces)
    ]
    BreakerState.objects.filter(updated_at__lt=now - dt.timedelta(seconds=FORGET_AFTER_S)).delete()
    BreakerState.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["process", "namespace", "key"],
        update_fields=["state", "failures", "requests", "opened_until", "updated_at"],
    )
    return len(rows)


def _row(breaker: Breaker, namespace_id: int, now: dt.datetime) -> BreakerState:
    state = breaker.snapshot()
    remaining = state["open_remaining_s"]
    return BreakerState(
        process=process_id(),
        namespace_id=namespace_id,
        key=breaker.key,
        state=state["state"],
        failures=state["failures"],
        requests=state["requests"],
        updated_at=now,
        opened_until=now + dt.timedelta(seconds=remaining) if remaining is not None else None,
    )


def listed(namespace_id: int) -> list[dict]:
    """The breakers every process reported lately for one namespace."""
    since = wall_clock.now() - dt.timedelta(seconds=LISTED_FOR_S)
    rows = BreakerState.objects.filter(namespace_id=namespace_id, updated_at__gte=since).order_by("key", "process")
    return [
        {
            "key": row.key,
            "state": row.state,
            "process": row.process,
            "failures": row.failures,
            "requests": row.requests,
            "openedUntil": _iso(row.opened_until),
            "updatedAt": _iso(row.updated_at),
        }
        for row in rows
    ]


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None
