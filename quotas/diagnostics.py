"""Answers to "why is my task not running?": queue depth and tasks in
flight, which workers poll which queue and when they last did, and whether
the system-task runners have a free thread.

A queue here is a task definition's name: its SIMPLE tasks (whose queue is
that name) and its system tasks (which name it in ``task_def_name``) are
counted together, as its controls count them.

Polls are recorded cheaply: each process upserts (namespace, queue, worker)
at most once per ``POLL_RECORD_S``, outside any transaction of the poll, so
a busy worker costs one small write every few seconds, not one per poll. A
system-task runner (the role, or a Celery worker) records itself the same
way, in every namespace, as polling the pseudo-queue ``@system:<threads>``.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import DatabaseError
from django.db.models import Count, Max, Q

from executions.models import Task, TaskStatus
from metadata.models import TaskDefinition
from nodeflow import clock
from nodeflow.models import Namespace
from quotas.models import WorkerPoll

log = logging.getLogger(__name__)

POLL_RECORD_S = 5.0
# A queue nobody polled for this long has no pollers (blockedBy noPollers).
NO_POLLERS_S = 60.0
_MAX_REMEMBERED = 50_000
# The pseudo-queue a system-task runner polls: "@system:<its threads>".
SYSTEM_QUEUE = "@system"

_lock = threading.Lock()
_recorded: dict[tuple[int, str, str], float] = {}


def record_poll(*, namespace_id: int, queue: str, worker_id: str) -> None:
    """Note that ``worker_id`` polls ``queue`` (at most every POLL_RECORD_S
    per process). A failure to record never fails the poll."""
    key = (namespace_id, queue, worker_id)
    _unpolled.pop((namespace_id, queue), None)
    if _due(key):
        _upsert_polls([namespace_id], queue, worker_id, key)


def record_system_poll(*, worker_id: str, threads: int) -> None:
    """Note that the system-task runner ``worker_id``, with ``threads``
    calls at once, looks for work (at most every POLL_RECORD_S per process),
    in every namespace: it serves them all."""
    queue = f"{SYSTEM_QUEUE}:{threads}"
    key = (0, queue, worker_id)
    if _due(key):
        _upsert_polls(Namespace.objects.values_list("id", flat=True), queue, worker_id, key)


def _due(key: tuple[int, str, str]) -> bool:
    now_s = time.monotonic()
    with _lock:
        last = _recorded.get(key)
        if last is not None and now_s - last < POLL_RECORD_S:
            return False
        if len(_recorded) > _MAX_REMEMBERED:
            _recorded.clear()
        _recorded[key] = now_s
    return True


def _upsert_polls(namespace_ids: Iterable[int], queue: str, worker_id: str, key: tuple[int, str, str]) -> None:
    """One upsert; ``namespace_ids`` may be a query (read inside the guard)."""
    now = clock.now()
    try:
        WorkerPoll.objects.bulk_create(
            [WorkerPoll(namespace_id=pk, queue=queue, worker_id=worker_id, last_poll_at=now) for pk in namespace_ids],
            update_conflicts=True,
            unique_fields=["namespace", "queue", "worker_id"],
            update_fields=["last_poll_at"],
        )
    except DatabaseError:
        log.warning("could not record a poll of %s by %s", queue, worker_id, exc_info=True)
        with _lock:
            _recorded.pop(key, None)


def forget_polls() -> None:
    with _lock:
        _recorded.clear()
        _seen.clear()
        _unpolled.clear()


def last_poll(*, namespace_id: int, queue: str) -> dt.datetime | None:
    return WorkerPoll.objects.filter(namespace_id=namespace_id, queue=queue).aggregate(at=Max("last_poll_at"))["at"]


# The latest poll of each queue this process has read. A queue's last poll
# only moves forward, so one seen less than NO_POLLERS_S ago settles "it has
# pollers" until then, whatever the table says now (blockedBy shows no time
# for a queue that has pollers).
_seen: dict[tuple[int, str], dt.datetime] = {}
# And the queues it found without a recent poll, for UNPOLLED_FOR_S: a start
# into a queue nobody polls (a backfill before its workers run) reads the
# table once a second, not once per start. A poll in this process forgets
# its queue's entry at once; one in another process shows within that time.
UNPOLLED_FOR_S = 1.0
_unpolled: dict[tuple[int, str], tuple[float, dt.datetime | None]] = {}


def recent_poll(*, namespace_id: int, queue: str, now: dt.datetime) -> dt.datetime | None:
    """``last_poll`` when it is older than NO_POLLERS_S (or there is none);
    otherwise a poll no older than that, from memory when this process has
    seen one."""
    key = (namespace_id, queue)
    horizon = now - dt.timedelta(seconds=NO_POLLERS_S)
    seen = _seen.get(key)
    if seen is not None and seen >= horizon:
        return seen
    unpolled = _unpolled.get(key)
    if unpolled is not None and time.monotonic() - unpolled[0] < UNPOLLED_FOR_S:
        return unpolled[1]
    found = last_poll(namespace_id=namespace_id, queue=queue)
    with _lock:
        if len(_seen) > _MAX_REMEMBERED or len(_unpolled) > _MAX_REMEMBERED:
            _seen.clear()
            _unpolled.clear()
        if found is not None and found >= horizon:
            _seen[key] = found
        else:
            _unpolled[key] = (time.monotonic(), found)
    return found


@dataclass(frozen=True)
class QueueUse:
    task_type: str
    depth: int  # SCHEDULED and not held (ready, or waiting for a retry delay or a control)
    in_flight: int  # IN_PROGRESS

    def view(self) -> dict:
        return {"taskType": self.task_type, "depth": self.depth, "inFlight": self.in_flight}


def _counts(namespace_id: int, name: str | None = None) -> dict[str, tuple[int, int]]:
    """(depth, in flight) by task definition name, of its worker and system
    tasks. Each arm of the condition is one partial index: task_ready,
    task_system_ready, task_in_flight."""
    named = {} if name is None else {"task_def_name": name}
    waiting = Q(status=TaskStatus.SCHEDULED, held=False)
    rows = Task.objects.filter(
        Q(waiting, kind="worker", **({} if name is None else {"queue": name}))
        | Q(waiting, kind="system", **named)
        | Q(status=TaskStatus.IN_PROGRESS, kind__in=("worker", "system"), **named),
        namespace_id=namespace_id,
    )
    found = rows.values("task_def_name").annotate(
        depth=Count("id", filter=Q(status=TaskStatus.SCHEDULED)),
        in_flight=Count("id", filter=Q(status=TaskStatus.IN_PROGRESS)),
    )
    return {row["task_def_name"]: (row["depth"], row["in_flight"]) for row in found}


def queue_use(*, namespace_id: int, queue: str) -> QueueUse:
    """The depth and tasks in flight of the task definition ``queue``: its
    SIMPLE tasks and the system tasks naming it."""
    depth, in_flight = _counts(namespace_id, queue).get(queue, (0, 0))
    return QueueUse(queue, depth, in_flight)


def queues(*, namespace_id: int) -> list[QueueUse]:
    """Every task definition, and every other name that worker or system
    tasks in the namespace open now carry (a task without a definition)."""
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


@dataclass(frozen=True)
class RunnerUse:
    """The system-task runners that polled in a namespace in the last
    NO_POLLERS_S: their threads together, the system tasks in flight on them
    (any namespace's: they share the runners), and the latest poll of any
    runner (older ones too)."""

    last_poll: dt.datetime | None
    threads: int
    in_flight: int

    @property
    def full(self) -> bool:
        return self.threads > 0 and self.in_flight >= self.threads


def runner_use(*, namespace_id: int, now: dt.datetime) -> RunnerUse:
    horizon = now - dt.timedelta(seconds=NO_POLLERS_S)
    polls = WorkerPoll.objects.filter(namespace_id=namespace_id, queue__startswith=f"{SYSTEM_QUEUE}:")
    seen = list(polls.values_list("queue", "worker_id", "last_poll_at"))
    live = {
        worker: int(threads)
        for queue, worker, at in seen
        if at >= horizon and (threads := queue.rpartition(":")[2]).isdigit()
    }
    last = max((at for _, _, at in seen), default=None)
    if not live:
        return RunnerUse(last, 0, 0)
    flying = Task.objects.filter(
        status=TaskStatus.IN_PROGRESS, kind="system", worker_id__in=list(live), lease_expires_at__gt=now
    ).count()
    return RunnerUse(last, sum(live.values()), flying)
