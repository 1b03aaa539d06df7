"""Dispatch: leasing ready tasks of a queue to a polling worker.

A lease is a random token plus an expiry. Results and heartbeats must present
the current token (fencing): a worker whose lease expired, whose task was
re-delivered or canceled, gets 409 and changes nothing. The expiry is the
start-to-close and heartbeat deadline of the attempt: each heartbeat moves it
to ``now + heartbeatTimeout``, never past ``startedAt + startToCloseTimeout``.

A queue whose task definition has controls (concurrentExecLimit, a rate
limit, semaphores) is leased through the gate (``quotas.gate``), under the
queue's lock, never more than the controls allow; one without them keeps
the one-statement path. See docs/controls.md.
"""
from __future__ import annotations

import datetime as dt
import functools
import math
import secrets
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from executions import notify, sql
from executions.leases import DEFAULT_LEASE_S, lease_expiry, lease_seconds  # noqa: F401 - re-exported
from executions.models import Task, TaskStatus
from nodeflow import clock, metrics
from nodeflow.models import Namespace
from quotas import controls, diagnostics
from quotas import metrics as quota_metrics
from quotas.gate import Gate, charge, open_gate

# Long-polls re-check the queue at least this often even without a wake-up
# (tasks whose retry delay ends do not notify).
LISTEN_RECHECK_S = 1.0
# Without LISTEN/NOTIFY (SQLite, across processes) the re-check is the wake-up.
POLL_RECHECK_S = 0.05


@dataclass(frozen=True)
class Lease:
    tasks: list[Task]
    gate: Gate | None = None  # the queue's controls as the lease found them


def _lease(namespace_id: int, queue: str, worker_id: str, count: int) -> Lease:
    """Lease up to ``count`` ready tasks of ``queue``, highest priority first,
    and no more than the queue's controls allow."""
    token = secrets.token_urlsafe(18)
    if connection.vendor == "postgresql" and not controls.is_controlled(namespace_id, queue):
        tasks, controlled = _lease_fast(namespace_id, queue, worker_id, count, token, clock.now())
        if not controlled:
            return Lease(tasks)
    return _lease_gated(namespace_id, queue, worker_id, count, token)


def _lease_gated(namespace_id: int, queue: str, worker_id: str, count: int, token: str) -> Lease:
    """The controlled dequeue: under the queue's lock (quotas.gate), lease no
    more than the gate allows and book them before the lock is released.
    On SQLite every lease comes here: the transaction is the lock."""
    with transaction.atomic():
        gate = open_gate(namespace_id=namespace_id, queue=queue, want=count)
        tasks = _lease_rows(namespace_id, queue, worker_id, gate.allowance, token, gate.now) if gate.allowance else []
        charge(gate, namespace_id=namespace_id, queue=queue, tasks=tasks, worker_id=worker_id, now=gate.now)
    return Lease(tasks, gate)


def _lease_rows(namespace_id: int, queue: str, worker_id: str, count: int, token: str, now: dt.datetime) -> list[Task]:
    if connection.vendor == "postgresql":
        params = {"now": now, "worker": worker_id, "token": token, "ns": namespace_id, "queue": queue, "count": count}
        return sql.rows(Task, _lease_sql(), params)
    # SQLite: inside the gate's transaction, which holds the write lock.
    tasks = list(
        Task.objects.filter(
            namespace_id=namespace_id, queue=queue, status=TaskStatus.SCHEDULED, held=False, available_at__lte=now
        )
        .order_by("-priority", "available_at")[:count]
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


_LEASE_SET = """
   SET status = 'IN_PROGRESS', started_at = %(now)s, worker_id = %(worker)s, lease_token = %(token)s,
       lease_expires_at = %(now)s + make_interval(secs => t.lease_seconds),
       last_heartbeat_at = %(now)s, deliveries = t.deliveries + 1
"""
_READY = """
       SELECT id FROM executions_task
        WHERE namespace_id = %(ns)s AND queue = %(queue)s AND status = 'SCHEDULED' AND NOT held
          AND available_at <= %(now)s {extra}
        ORDER BY priority DESC, available_at
        LIMIT %(count)s
          FOR UPDATE SKIP LOCKED
"""


@functools.cache
def _lease_sql() -> str:
    """The dequeue on PostgreSQL: one statement, one round trip, one commit.
    The inner SELECT walks the partial index task_ready in (priority,
    availability) order and skips rows another poller holds."""
    return f"UPDATE executions_task AS t {_LEASE_SET} WHERE t.id IN ({_READY.format(extra='')}) RETURNING {sql.columns(Task, 't')}"


# What a lease answer and its metrics read of the leased rows (the rest is
# deferred, as with QuerySet.only: fewer columns to send and convert).
LEASED_FIELDS = (
    "id", "execution", "namespace", "type", "kind", "task_def_name", "queue", "status", "ref", "path", "attempt",
    "input", "idempotency_key", "scheduled_at", "available_at", "started_at", "lease_token", "lease_expires_at",
)


@functools.cache
def _lease_fast_sql() -> str:
    """The same for a queue that may have controls, still one statement: it
    leases only if the queue's task definition has none, and says whether it
    has (a queue with controls goes through the gate instead). The LEFT JOIN
    returns one all-NULL task row when nothing was leased, to carry the answer."""
    return f"""
WITH ctl AS (
    SELECT count(*) AS n FROM metadata_taskdefinition
     WHERE namespace_id = %(ns)s AND name = %(queue)s
       AND (concurrent_exec_limit > 0 OR rate_limit_per_frequency > 0 OR semaphores <> '[]'::jsonb)
), leased AS (
    UPDATE executions_task AS t {_LEASE_SET}
     WHERE t.id IN ({_READY.format(extra="AND (SELECT n FROM ctl) = 0")})
    RETURNING {sql.columns(Task, 't', LEASED_FIELDS)}
)
SELECT {sql.columns(Task, 'leased', LEASED_FIELDS)}, ctl.n AS controlled FROM ctl LEFT JOIN leased ON true
"""


def _lease_fast(namespace_id: int, queue: str, worker_id: str, count: int, token: str, now: dt.datetime) -> tuple[list[Task], bool]:
    params = {"now": now, "worker": worker_id, "token": token, "ns": namespace_id, "queue": queue, "count": count}
    found = sql.rows(Task, _lease_fast_sql(), params, extra=1, fields=LEASED_FIELDS)
    return [task for task, _ in found if task is not None], bool(found and found[0][1][0])


def poll(*, namespace: Namespace, queue: str, worker_id: str, count: int, wait_s: float) -> list[Task]:
    """Lease at once if anything may be leased; otherwise wait up to
    ``wait_s`` for a wake-up (a task ready, a slot or a permit freed, a new
    rate window) and try again."""
    diagnostics.record_poll(namespace_id=namespace.id, queue=queue, worker_id=worker_id)
    keys = {notify.queue_key(namespace.id, queue)}
    recheck = LISTEN_RECHECK_S if wait_s > 0 and notify.ensure_listener() else POLL_RECHECK_S
    give_up = time.monotonic() + wait_s
    held_back: set[str] = set()  # controls counted for this poll: once each, not per re-check
    while True:
        # Registered before looking, so a wake-up between the look and the
        # wait is not lost.
        event = threading.Event()
        for key in keys:
            notify.hub.attach(key, event)
        try:
            lease = _lease(namespace.id, queue, worker_id, count)
            metrics.record_dispatch(lease.tasks)
            _count_held_back(lease, held_back)
            remaining = give_up - time.monotonic()
            if lease.tasks or remaining <= 0:
                return lease.tasks
            event.wait(min(remaining, recheck, _next_window_in(lease)))
        finally:
            for key in keys:
                notify.hub.unregister(key, event)
        if lease.gate is not None:
            # Permits freed by other queues sharing a semaphore wake this one too.
            keys |= {notify.semaphore_key(namespace.id, name) for name in lease.gate.controls.semaphores}


def _count_held_back(lease: Lease, counted: set[str]) -> None:
    blocker = lease.gate.blocker if lease.gate is not None else None
    if blocker is not None and blocker.control not in counted:
        counted.add(blocker.control)
        quota_metrics.record_refusal(blocker.control)


def _next_window_in(lease: Lease) -> float:
    """Seconds until a rate window that is used up gives way to a new one."""
    retry_at = lease.gate.retry_at if lease.gate is not None else None
    if retry_at is None:
        return math.inf
    return max(0.0, (retry_at - clock.now()).total_seconds()) + 0.001


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
        leased = _lease_system_postgres(worker_id, count, token, now, task_id)
        metrics.record_dispatch(leased)
        return leased
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
    metrics.record_dispatch(tasks)
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
RETURNING {columns}
"""


def _lease_system_postgres(worker_id: str, count: int, token: str, now: dt.datetime, task_id) -> list[Task]:
    statement = _LEASE_SYSTEM_SQL.format(
        only="AND id = %(task)s" if task_id is not None else "", columns=sql.columns(Task, "t"),
    )
    params = {"now": now, "worker": worker_id, "token": token, "count": count, "task": task_id,
              "cap": float(settings.NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS)}
    return sql.rows(Task, statement, params)
