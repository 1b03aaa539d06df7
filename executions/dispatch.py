"""Dispatch: leasing ready tasks of a queue to a polling worker.

A lease is a random token plus an expiry. Results and heartbeats must present
the current token (fencing): a worker whose lease expired, whose task was
re-delivered or canceled, gets 409 and changes nothing. The expiry is the
start-to-close and heartbeat deadline of the attempt: each heartbeat moves it
to ``now + heartbeatTimeout``, never past ``startedAt + startToCloseTimeout``.
"""
from __future__ import annotations

import datetime as dt
import secrets
import time

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from executions import notify
from executions.models import Task, TaskStatus
from nodeflow import clock
from nodeflow.models import Namespace

# A task with neither a heartbeat nor a start-to-close timeout is re-delivered
# when its worker has been silent this long.
DEFAULT_LEASE_S = 300.0
# Long-polls re-check the queue at least this often even without a wake-up
# (tasks whose retry delay ends do not notify).
LISTEN_RECHECK_S = 1.0
# Without LISTEN/NOTIFY (SQLite, across processes) the re-check is the wake-up.
POLL_RECHECK_S = 0.05


def lease_seconds(policy: dict) -> float:
    """How long a lease lasts from the moment it is taken: the heartbeat
    timeout, capped by the start-to-close timeout; without either, the default."""
    heartbeat = float(policy.get("heartbeatTimeout") or 0)
    start_to_close = float(policy.get("startToCloseTimeout") or 0)
    seconds = heartbeat or start_to_close or DEFAULT_LEASE_S
    return min(seconds, start_to_close) if start_to_close > 0 else seconds


def lease_expiry(policy: dict, *, started_at: dt.datetime, now: dt.datetime) -> dt.datetime:
    """When a lease renewed ``now`` expires: never past startedAt + startToClose."""
    heartbeat = float(policy.get("heartbeatTimeout") or 0)
    start_to_close = float(policy.get("startToCloseTimeout") or 0)
    expires = now + dt.timedelta(seconds=heartbeat or start_to_close or DEFAULT_LEASE_S)
    if start_to_close > 0:
        expires = min(expires, started_at + dt.timedelta(seconds=start_to_close))
    return expires


def lease_tasks(*, namespace: Namespace, queue: str, worker_id: str, count: int) -> list[Task]:
    """Lease up to ``count`` ready tasks of ``queue``, highest priority first."""
    now = clock.now()
    token = secrets.token_urlsafe(18)
    if connection.vendor == "postgresql":
        return _lease_postgres(namespace.id, queue, worker_id, count, token, now)
    with transaction.atomic():
        tasks = list(
            Task.objects.filter(
                namespace=namespace, queue=queue, status=TaskStatus.SCHEDULED, held=False, available_at__lte=now
            )
            .order_by("-priority", "available_at")
            .select_for_update(skip_locked=True)[:count]
        )
        by_length: dict[float, list] = {}
        for task in tasks:
            by_length.setdefault(task.lease_seconds, []).append(task.id)
            task.status, task.started_at, task.worker_id = TaskStatus.IN_PROGRESS, now, worker_id
            task.lease_token, task.last_heartbeat_at = token, now
            task.lease_expires_at = now + dt.timedelta(seconds=task.lease_seconds)
            task.deliveries += 1
        # One UPDATE per distinct lease length (almost always one).
        for seconds, ids in by_length.items():
            Task.objects.filter(pk__in=ids).update(
                status=TaskStatus.IN_PROGRESS, started_at=now, worker_id=worker_id, lease_token=token,
                lease_expires_at=now + dt.timedelta(seconds=seconds), last_heartbeat_at=now,
                deliveries=F("deliveries") + 1,
            )
    return tasks


# The dequeue on PostgreSQL: one statement, one round trip, one commit. The
# inner SELECT walks the partial index task_ready in (priority, availability)
# order and skips rows another poller holds.
_LEASE_SQL = """
UPDATE executions_task AS t
   SET status = 'IN_PROGRESS', started_at = %(now)s, worker_id = %(worker)s, lease_token = %(token)s,
       lease_expires_at = %(now)s + make_interval(secs => t.lease_seconds),
       last_heartbeat_at = %(now)s, deliveries = t.deliveries + 1
 WHERE t.id IN (
       SELECT id FROM executions_task
        WHERE namespace_id = %(ns)s AND queue = %(queue)s AND status = 'SCHEDULED' AND NOT held
          AND available_at <= %(now)s
        ORDER BY priority DESC, available_at
        LIMIT %(count)s
          FOR UPDATE SKIP LOCKED)
RETURNING t.*
"""


def _lease_postgres(namespace_id: int, queue: str, worker_id: str, count: int, token: str, now: dt.datetime) -> list[Task]:
    params = {"now": now, "worker": worker_id, "token": token, "ns": namespace_id, "queue": queue, "count": count}
    return list(Task.objects.raw(_LEASE_SQL, params))


def poll(*, namespace: Namespace, queue: str, worker_id: str, count: int, wait_s: float) -> list[Task]:
    """Lease at once if anything is ready; otherwise wait up to ``wait_s`` for
    a wake-up and try again."""
    key = notify.queue_key(namespace.id, queue)
    recheck = LISTEN_RECHECK_S if wait_s > 0 and notify.ensure_listener() else POLL_RECHECK_S
    give_up = time.monotonic() + wait_s
    while True:
        # Registered before looking, so a wake-up between the look and the
        # wait is not lost.
        event = notify.hub.register(key)
        try:
            leased = lease_tasks(namespace=namespace, queue=queue, worker_id=worker_id, count=count)
            remaining = give_up - time.monotonic()
            if leased or remaining <= 0:
                return leased
            event.wait(min(remaining, recheck))
        finally:
            notify.hub.unregister(key, event)


# --- system tasks -------------------------------------------------------------
# The system-task runner (executions.system_tasks.runner) leases like a worker,
# across every namespace. Its lease is capped: a runner that dies mid-call is
# noticed within SYSTEM_LEASE_S even when the policy's startToCloseTimeout is
# an hour, and the attempt is offered again; every call is bounded below it.

def system_lease_seconds(task_lease_s: float) -> float:
    return min(task_lease_s, float(settings.NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS))


def lease_system_tasks(*, worker_id: str, count: int = 1, task_id=None) -> list[Task]:
    """Lease up to ``count`` ready system tasks of any namespace, highest
    priority first; with ``task_id``, that task only (if it is ready)."""
    now = clock.now()
    token = secrets.token_urlsafe(18)
    if connection.vendor == "postgresql":
        return _lease_system_postgres(worker_id, count, token, now, task_id)
    ready = Task.objects.filter(kind="system", status=TaskStatus.SCHEDULED, held=False, available_at__lte=now)
    if task_id is not None:
        ready = ready.filter(pk=task_id)
    with transaction.atomic():
        tasks = list(ready.order_by("-priority", "available_at").select_for_update(skip_locked=True)[:count])
        for task in tasks:
            task.status, task.started_at, task.worker_id = TaskStatus.IN_PROGRESS, now, worker_id
            task.lease_token, task.last_heartbeat_at, task.deliveries = token, now, task.deliveries + 1
            task.lease_expires_at = now + dt.timedelta(seconds=system_lease_seconds(task.lease_seconds))
            Task.objects.filter(pk=task.id, status=TaskStatus.SCHEDULED).update(
                status=task.status, started_at=now, worker_id=worker_id, lease_token=token,
                lease_expires_at=task.lease_expires_at, last_heartbeat_at=now, deliveries=task.deliveries,
            )
    return tasks


_LEASE_SYSTEM_SQL = """
UPDATE executions_task AS t
   SET status = 'IN_PROGRESS', started_at = %(now)s, worker_id = %(worker)s, lease_token = %(token)s,
       lease_expires_at = %(now)s + make_interval(secs => LEAST(t.lease_seconds, %(cap)s)),
       last_heartbeat_at = %(now)s, deliveries = t.deliveries + 1
 WHERE t.id IN (
       SELECT id FROM executions_task
        WHERE kind = 'system' AND status = 'SCHEDULED' AND NOT held AND available_at <= %(now)s {only}
        ORDER BY priority DESC, available_at
        LIMIT %(count)s
          FOR UPDATE SKIP LOCKED)
RETURNING t.*
"""


def _lease_system_postgres(worker_id: str, count: int, token: str, now: dt.datetime, task_id) -> list[Task]:
    sql = _LEASE_SYSTEM_SQL.format(only="AND id = %(task)s" if task_id is not None else "")
    params = {"now": now, "worker": worker_id, "token": token, "count": count, "task": task_id,
              "cap": float(settings.NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS)}
    return list(Task.objects.raw(sql, params))
