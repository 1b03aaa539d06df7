"""Automatic heartbeats: one thread keeps every running task's lease alive.

Each task is beaten when about a third of its lease is left, so two beats
may fail before the lease runs out. The lease the server grants is the
task's ``heartbeatTimeout`` (or, without one, its ``startToCloseTimeout``),
so a short heartbeat timeout means frequent beats and a long one few; no beat
waits longer than ``max_interval_s``, which also bounds how late a canceled
task is noticed. Leases are read as instants on this machine's clock: keep
worker and server clocks synchronised (NTP), as with any lease.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time

import httpx

from nodeflow_worker.backoff import is_transient
from nodeflow_worker.client import Client, StaleLease, parse_time
from nodeflow_worker.task import Task

log = logging.getLogger("nodeflow_worker")

MIN_INTERVAL_S = 0.05
# After a failed beat, try again this soon (or sooner if the lease is shorter).
RETRY_AFTER_S = 1.0
# A lease at its start-to-close cap cannot be extended; look again this long
# after it ends, to learn that the server took the task back.
AFTER_EXPIRY_S = 0.5


def seconds_left(expires_at: dt.datetime | None, now: dt.datetime) -> float | None:
    return None if expires_at is None else (expires_at - now).total_seconds()


def next_beat_in(left_s: float | None, *, extended: bool, max_interval_s: float) -> float:
    """Seconds until the next beat, given what the lease has left and whether
    the last beat moved it (a lease that stopped moving is at its start-to-close
    cap: beating cannot help, so only look again once it has ended)."""
    if left_s is None:
        return max_interval_s
    if not extended:
        return min(max(left_s, 0.0) + AFTER_EXPIRY_S, max_interval_s)
    return min(max(left_s / 3, MIN_INTERVAL_S), max_interval_s)


class Heartbeats:
    def __init__(self, client: Client, *, max_interval_s: float) -> None:
        self.client = client
        self.max_interval_s = max_interval_s
        self._due: dict[str, tuple[Task, float]] = {}
        self._cond = threading.Condition()
        # Until when the loop sleeps (-inf while it is awake): a task due
        # later needs no wake-up, and most are (each lease is long).
        self._sleeps_until = -math.inf
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="nodeflow-heartbeats", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def add(self, task: Task) -> None:
        self._schedule(task, extended=True, new=True)

    def remove(self, task: Task) -> None:
        with self._cond:
            self._due.pop(task.task_id, None)

    def _schedule(self, task: Task, *, extended: bool, new: bool = False, retry: bool = False) -> None:
        left = seconds_left(task.lease_expires_at, dt.datetime.now(dt.UTC))
        delay = next_beat_in(left, extended=extended, max_interval_s=self.max_interval_s)
        if retry:
            delay = min(delay, RETRY_AFTER_S)
        with self._cond:
            # A task that finished while its beat was in flight stays removed.
            if new or task.task_id in self._due:
                at = time.monotonic() + delay
                self._due[task.task_id] = (task, at)
                if at < self._sleeps_until:
                    self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                due = self._wait_for_due()
            if due is None:
                return
            for task in due:
                self._beat(task)

    def _wait_for_due(self) -> list[Task] | None:
        while not self._closed:
            now = time.monotonic()
            due = [task for task, at in self._due.values() if at <= now]
            if due:
                return due
            soonest = min((at for _, at in self._due.values()), default=now + self.max_interval_s)
            self._sleeps_until = soonest
            try:
                self._cond.wait(max(soonest - now, 0.001))
            finally:
                self._sleeps_until = -math.inf
        return None

    def _beat(self, task: Task) -> None:
        try:
            answer = self.client.heartbeat(task.leased)
        except StaleLease as exc:
            self._lost(task, str(exc))
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code == 404:
                self._lost(task, "the task no longer exists")
            else:
                self._failed(task, exc)
        except Exception as exc:  # noqa: BLE001 - a failed beat must not stop the others
            self._failed(task, exc)
        else:
            self._schedule(task, extended=task.extend(parse_time(answer.get("leaseExpiresAt"))))

    def _lost(self, task: Task, reason: str) -> None:
        with self._cond:
            if self._due.pop(task.task_id, None) is None:
                return  # it finished meanwhile: its own result decides
        log.warning("%r: lease lost (%s); its result will be dropped", task, reason)
        task.mark_lost(reason)

    def _failed(self, task: Task, exc: Exception) -> None:
        level = logging.INFO if is_transient(exc) else logging.WARNING
        log.log(level, "%r: heartbeat failed (%s); trying again", task, exc)
        self._schedule(task, extended=True, retry=True)
