"""Answers to "why is my task not running?": queue depth and tasks in
flight, which workers poll which queue and when they last did.

Polls are recorded cheaply: each process upserts (namespace, queue, worker)
at most once per ``POLL_RECORD_S``, outside any transaction of the poll, so
a busy worker costs one small write every few seconds, not one per poll.
"""
from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass

from django.db import DatabaseError
from django.db.models import Count, Max, Q

from executions.models import Task, TaskStatus
from metadata.models import TaskDefinition
from nodeflow import clock
from quotas.models import WorkerPoll

log = logging.getLogger(__name__)

POLL_RECORD_S = 5.0
# A queue nobody polled for this long has no pollers (blockedBy noPollers).
NO_POLLERS_S = 60.0
_MAX_REMEMBERED = 50_000

_lock = threading.Lock()
_recorded: dict[tuple[int, str, str], float] = {}


def record_poll(*, namespace_id: int, queue: str, worker_id: str) -> None:
    """Note that ``worker_id`` polls ``queue`` (at most every POLL_RECORD_S
    per process). A failure to record never fails the poll."""
    key = (namespace_id, queue, worker_id)
    now_s = time.monotonic()
    with _lock:
        last = _recorded.get(key)
        if last is not None and now_s - last < POLL_RECORD_S:
            return
        if len(_recorded) > _MAX_REMEMBERED:
            _recorded.clear()
        _recorded[key] = now_s
    try:
        WorkerPoll.objects.bulk_create(
            [WorkerPoll(namespace_id=namespace_id, queue=queue, worker_id=worker_id, last_poll_at=clock.now())],
            update_conflicts=True, unique_fields=["namespace", "queue", "worker_id"], update_fields=["last_poll_at"],
        )
    except DatabaseError:
        log.warning("could not record a poll of %s by %s", queue, worker_id, exc_info=True)
        with _lock:
            _recorded.pop(key, None)


def forget_polls() -> None:
    with _lock:
        _recorded.clear()
        _seen.clear()


def last_poll(*, namespace_id: int, queue: str) -> dt.datetime | None:
    return WorkerPoll.objects.filter(namespace_id=namespace_id, queue=queue).aggregate(at=Max("last_poll_at"))["at"]


# The latest poll of each queue this process has read. A queue's last poll
# only moves forward, so one seen less than NO_POLLERS_S ago settles "it has
# pollers" until then, whatever the table says now (blockedBy shows no time
# for a queue that has pollers).
_seen: dict[tuple[int, str], dt.datetime] = {}


def recent_poll(*, namespace_id: int, queue: str, now: dt.datetime) -> dt.datetime | None:
    """``last_poll`` when it is older than NO_POLLERS_S (or there is none);
    otherwise a poll no older than that, from memory when this process has
    seen one."""
    key = (namespace_id, queue)
    horizon = now - dt.timedelta(seconds=NO_POLLERS_S)
    seen = _seen.get(key)
    if seen is not None and seen >= horizon:
        return seen
    found = last_poll(namespace_id=namespace_id, queue=queue)
    if found is not None and found >= horizon:
        with _lock:
            if len(_seen) > _MAX_REMEMBERED:
                _seen.clear()
            _seen[key] = found
    return found


@dataclass(frozen=True)
class QueueUse:
    task_type: str
    depth: int  # SCHEDULED and not held (ready, or waiting for a retry delay or a control)
    in_flight: int  # IN_PROGRESS

    def view(self) -> dict:
        return {"taskType": self.task_type, "depth": self.depth, "inFlight": self.in_flight}


def _counts(namespace_id: int, queue: str | None = None) -> dict[str, tuple[int, int]]:
    rows = Task.objects.filter(namespace_id=namespace_id, kind="worker", status__in=(TaskStatus.SCHEDULED, TaskStatus.IN_PROGRESS))
    if queue is not None:
        rows = rows.filter(queue=queue)
    found = rows.values("queue").annotate(
        depth=Count("id", filter=Q(status=TaskStatus.SCHEDULED, held=False)),
        in_flight=Count("id", filter=Q(status=TaskStatus.IN_PROGRESS)),
    )
    return {row["queue"]: (row["depth"], row["in_flight"]) for row in found}


def queue_use(*, namespace_id: int, queue: str) -> QueueUse:
    depth, in_flight = _counts(namespace_id, queue).get(queue, (0, 0))
    return QueueUse(queue, depth, in_flight)


def queues(*, namespace_id: int) -> list[QueueUse]:
    """Every worker queue with open tasks, and every task definition's queue."""
    counts = _counts(namespace_id)
    names = set(counts) | set(TaskDefinition.objects.filter(namespace_id=namespace_id).values_list("name", flat=True))
    return [QueueUse(name, *counts.get(name, (0, 0))) for name in sorted(names)]


def workers(*, namespace_id: int, queue: str | None = None) -> list[dict]:
    """Workers by id, most recent first, each with its last poll per queue."""
    rows = WorkerPoll.objects.filter(namespace_id=namespace_id).order_by("-last_poll_at")
    if queue is not None:
        rows = rows.filter(queue=queue)
    by_worker: dict[str, dict] = {}
    for worker_id, name, at in rows.values_list("worker_id", "queue", "last_poll_at")[:10_000]:
        entry = by_worker.setdefault(worker_id, {"workerId": worker_id, "lastPollAt": at, "queues": []})
        entry["queues"].append({"taskType": name, "lastPollAt": at})
    return list(by_worker.values())
