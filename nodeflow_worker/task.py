"""The task a registered function receives."""

from __future__ import annotations

import datetime as dt
import threading
from typing import TYPE_CHECKING, Any

from nodeflow_worker.client import MAX_LOG_ENTRIES, LeasedTask, StaleLease, parse_time
from nodeflow_worker.errors import LeaseLost

if TYPE_CHECKING:
    from nodeflow_worker.worker import Worker


class Task:
    """One leased attempt of a task: its input and identity, plus a manual
    ``heartbeat`` (the worker also beats on its own), ``log`` lines that go
    with the result, and ``lease_lost``, set when the server has taken the
    task back (its result would be dropped, so a long function may stop)."""

    def __init__(self, leased: LeasedTask, worker: Worker) -> None:
        self.leased = leased
        self.task_id = leased.task_id
        self.execution_id = leased.execution_id
        self.task_type = leased.task_type
        self.reference_task_name = leased.reference_task_name
        self.input: dict = leased.input
        self.attempt = leased.attempt
        # The same for every attempt and re-delivery of one logical task: pass
        # it to whatever the function changes so a repeat does nothing new.
        self.idempotency_key = leased.idempotency_key
        self.worker_id = worker.worker_id
        self.raw = leased.raw
        self.lease_lost = threading.Event()
        self.lost_reason = ""
        self.logs: list[str] = []
        self._worker = worker
        self._lock = threading.Lock()
        self._lease_expires_at = leased.lease_expires_at

    @property
    def lease_expires_at(self) -> dt.datetime | None:
        with self._lock:
            return self._lease_expires_at

    def heartbeat(self, progress: Any = None) -> None:
        """Extend the lease now (optionally recording ``progress`` on the
        task). Raises ``LeaseLost`` when the task is no longer this worker's."""
        try:
            answer = self._worker.client.heartbeat(self.leased, progress)
        except StaleLease as exc:
            self.mark_lost(str(exc))
            raise LeaseLost(str(exc)) from exc
        self.extend(parse_time(answer.get("leaseExpiresAt")))

    def log(self, line: str) -> None:
        """Keep a line for the result's ``logs`` (the last 100 are sent)."""
        self.logs.append(str(line))
        del self.logs[:-MAX_LOG_ENTRIES]

    def extend(self, expires_at: dt.datetime | None) -> bool:
        """Record a new lease expiry; True if it moved later."""
        with self._lock:
            moved = expires_at is not None and (self._lease_expires_at is None or expires_at > self._lease_expires_at)
            if expires_at is not None:
                self._lease_expires_at = expires_at
            return moved

    def mark_lost(self, reason: str) -> None:
        self.lost_reason = reason
        self.lease_lost.set()

    def __repr__(self) -> str:
        return f"<Task {self.task_type} {self.task_id} attempt {self.attempt}>"
