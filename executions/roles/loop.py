"""The one loop skeleton every long-running role uses, and the one way a
role's process stops.

A role implements ``tick()``: claim and do one small unit of work, and say
whether it found any. The loop calls ``tick`` back to back while there is
work, waits ``idle_wait_s`` (or until woken) when there is none, logs an
error per tick instead of dying, and stops promptly when its stop event is
set. The same ``tick`` serves every way a role runs: a thread of
``nodeflow_run``, a role command (``command.RoleCommand``), a Celery beat
task (``executions.celery_tasks``), and ``run_once`` in tests and cron.

``stop_on_signals``: the first SIGTERM or SIGINT asks everything to stop
after the unit in hand (drain); a second exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from django.db import close_old_connections, connection

from nodeflow.stale_connections import close_dead_connections

log = logging.getLogger("nodeflow.roles")


class Role:
    name = "role"
    idle_wait_s = 1.0
    error_wait_s = 1.0

    def __init__(self, stop: threading.Event | None = None) -> None:
        self.stop = stop or threading.Event()
        self.wake = threading.Event()

    def tick(self) -> bool:
        """Do one unit of work; True if there was work (so tick again at once)."""
        raise NotImplementedError

    def on_start(self) -> None:
        """Hook: runs once in the role's thread before the first tick."""

    def run(self) -> None:
        log.info("%s started", self.name)
        self.on_start()
        try:
            while not self.stop.is_set():
                self._wait(self._safe_tick())
        finally:
            connection.close()
            log.info("%s stopped", self.name)

    def run_once(self, *, budget_s: float | None = None) -> int:
        """Tick until there is no work left (or ``budget_s`` has passed);
        returns how many ticks found work."""
        give_up = None if budget_s is None else time.monotonic() + budget_s
        count = 0
        while (give_up is None or time.monotonic() < give_up) and self.tick():
            count += 1
        return count

    def _safe_tick(self) -> float:
        close_old_connections()
        close_dead_connections()  # e.g. after a database restart: reconnect instead of failing the tick
        try:
            return 0.0 if self.tick() else self.idle_wait_s
        except Exception:
            log.exception("%s: tick failed", self.name)
            connection.close()  # the connection may be broken (e.g. the database restarted)
            return self.error_wait_s

    def _wait(self, seconds: float) -> None:
        if seconds <= 0:
            return
        # request_stop sets wake too, so either shutdown or new work ends the wait.
        if not self.stop.is_set():
            self.wake.wait(seconds)
        self.wake.clear()

    def request_stop(self) -> None:
        self.stop.set()
        self.wake.set()


def stop_on_signals(stop: Callable[[], None]) -> None:
    """SIGTERM/SIGINT: the first calls ``stop`` (finish the unit in hand,
    then stop); a second exits at once, without waiting for it."""
    stopping = threading.Event()

    def on_signal(signum, frame) -> None:
        if stopping.is_set():
            os._exit(1)
        else:
            stopping.set()
            log.info("signal %s: stopping after the work in hand (again to exit at once)", signum)
            stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
