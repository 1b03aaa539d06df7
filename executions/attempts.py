"""Task attempts: the one module that writes ``executions_task`` rows.

Every change to a task row is a verb here: insert the rows a decision
creates, lease ready ones (through the gate), record a result, renew a
lease, put an attempt back, time it out, re-deliver it, cancel it, complete
a waiting task, hold and release a paused run's tasks, reopen an operator on
a manual retry, link a SUB_WORKFLOW child, purge. Each UPDATE names the
state it moves from and its row count is returned or checked, so a row that
changed under the caller is never overwritten.

A task that leaves IN_PROGRESS, by whatever verb, frees its slot and its
permits here (``_left_in_flight``): a control attached to this module holds
on every path that reaches the row. A test fails when any other module
writes the table (tests/test_row_owners.py).
"""

from __future__ import annotations

import collections
import datetime as dt
import functools
import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Max, Min

from executions import notify, sql
from executions.leases import capped_seconds, lease_expiry, new_token
from executions.models import OPEN_TASK, Task, TaskStatus
from nodeflow import clock, metrics, transactions
from quotas import controls, gate
from quotas.gate import Gate, charge, open_gate

Group = tuple[int, str]  # (namespace id, task definition name): the system tasks one gate governs

MAX_LOG_ENTRIES = 200


class StaleDecision(Exception):
    """A row changed under a decision (it should not, under the execution's
    lock): the transaction rolls back and the decision is made again."""


def _left_in_flight(task: Task) -> None:
    """``task`` was IN_PROGRESS and is not any more (in the caller's
    transaction): its permits go, and whoever waits for its slot or permits
    is woken when this commits (worker and system tasks alike: gate.task_left)."""
    gate.task_left(task)


def _set(task: Task, values: dict[str, Any]) -> None:
    for name, value in values.items():
        setattr(task, name, value)


# --- insert -------------------------------------------------------------------


# The tasks this service transaction inserted, by id (``lease_own``).
INSERTED = "attempts.inserted"


def insert(tasks: Iterable[Task]) -> None:
    """New task rows (a decision's, or a manual retry's attempts), one statement."""
    tasks = list(tasks)
    sql.insert(tasks)
    inserted = transactions.pending(INSERTED, _forget)
    if inserted is not None:
        inserted.update((task.id, task) for task in tasks)


def _forget(inserted: dict) -> None:
    """Nothing is sent for them at the transaction's end: the rows are ``sql``'s."""


# --- leases -------------------------------------------------------------------------
# A lease is a random token plus an expiry (executions/leases.py). Every lease
# of a task whose definition has controls, a worker's or a system task, is
# taken here through the gate (quotas.gate: under the definition's lock, no
# more than its controls allow, booked before the lock goes); one without
# controls takes one statement on PostgreSQL. The PostgreSQL statement and
# the SQLite path of each lease sit side by side.


@dataclass(frozen=True)
class Lease:
    tasks: list[Task]
    gate: Gate | None = None  # the definition's controls as the lease found them


@dataclass(frozen=True)
class Pick:
    """Which ready tasks a gated lease takes: a worker queue's, or
    (``system``) the system tasks naming one task definition, or one task of
    them (``task_id``). ``name`` is the gate's key: the definition's name,
    which a worker queue is named after."""

    namespace_id: int
    name: str
    system: bool = False
    task_id: uuid.UUID | None = None


def lease_queue(
    namespace_id: int, queue: str, worker_id: str, count: int, *, park: str = "", leave: str = "", gated: bool = True
) -> Lease:
    """Lease up to ``count`` ready tasks of a worker queue, highest priority
    first, and no more than its definition's controls allow. On PostgreSQL a
    queue this process has not seen controlled tries the one statement that
    leases only if it has none (``lease_fast``); the rest go through the gate.
    ``park``/``leave``: the long-poll's notice (``notify.Parked``), sent in
    the lease's own transaction: ``park`` if it leases nothing, ``leave`` if
    it leases something. In a transaction that made tasks of the queue
    ready, what it leases is taken off their ready notice (``notify.leased``).
    ``gated=False`` (PostgreSQL): a queue with controls is not leased here at
    all (a sync match, which takes no gate's locks in another's transaction)."""
    token = new_token()
    lease = None
    if connection.vendor == "postgresql" and not controls.is_controlled(namespace_id, queue):
        if gated and not (park or leave):  # a result's eager next (a sync match leases in the start's pipeline)
            own = lease_own(namespace_id, queue, worker_id, count, token, clock.now())
            if own:
                notify.leased(namespace_id, queue, len(own))
                return Lease(own)
        tasks, controlled = lease_fast(namespace_id, queue, worker_id, count, token, clock.now(), park, leave)
        lease = None if controlled else Lease(tasks)
    if lease is None and not gated and connection.vendor == "postgresql":
        return Lease([])
    if lease is None:
        lease = lease_gated(Pick(namespace_id, queue), worker_id, count, token, park=park, leave=leave)
    if lease.tasks:
        notify.leased(namespace_id, queue, len(lease.tasks))
    return lease


# What a lease sets on a task row (``_lease_set``), and what ``lease_own`` restores.
_LEASED_BY = ("status", "started_at", "worker_id", "lease_token", "lease_expires_at", "last_heartbeat_at", "deliveries")


def lease_own(namespace_id: int, queue: str, worker_id: str, count: int, token: str, now: dt.datetime) -> list[Task]:
    """Lease the queue's tasks that this service transaction made ready, if
    they are the only ready tasks of the queue, without leasing them after
    their insert: their rows, still held (``sql.holds``), are inserted
    already leased, in one statement with a look at the queue (PostgreSQL,
    outside a pipeline). A result whose ``next`` asks for the step its
    decision just made (eager dispatch) takes no lease statement, and its
    row is written once. The look, which does not see the rows it inserts,
    finds whether the queue's definition has controls and whether any
    other task of the queue is ready; if either, the rows are put back as
    they were (in the same transaction, unseen by any other) and []: the
    caller leases as before, through the gate or in order. So the order of
    the queue and every control hold as for any lease."""
    inserted = transactions.pending(INSERTED, _forget)
    if not inserted or transactions.pipelined():
        return []
    own = sorted(
        (
            task
            for task in inserted.values()
            if task.namespace_id == namespace_id
            and task.queue == queue
            and task.kind != "system"
            and task.status == TaskStatus.SCHEDULED
            and not task.held
            and task.available_at <= now
        ),
        key=lambda task: (-task.priority, task.available_at, task.seq),
    )[:count]
    if not own or not sql.holds(own):
        return []
    before = [{name: getattr(task, name) for name in _LEASED_BY} for task in own]
    for task in own:
        _mark_leased(task, worker_id, token, now, task.lease_seconds)
    look = (_own_look_sql(), [namespace_id, queue, namespace_id, queue, now])
    controlled, others = sql.send_held_reading(look, own)
    for task in own:
        del inserted[task.id]
    if not controlled and not others:
        return own
    for task, values in zip(own, before, strict=True):
        for name, value in values.items():
            setattr(task, name, value)
        sql.update(Task, values=values, where={"id": task.id})
    return []


def _mark_leased(task: Task, worker_id: str, token: str, now: dt.datetime, seconds: float) -> None:
    """What a lease writes (``_LEASED_BY``), on the instance."""
    task.status, task.started_at, task.worker_id = TaskStatus.IN_PROGRESS, now, worker_id
    task.lease_token, task.last_heartbeat_at = token, now
    task.lease_expires_at = now + dt.timedelta(seconds=seconds)
    task.deliveries += 1


@functools.cache
def _own_look_sql() -> str:
    """``lease_own``'s look, a select list after the rows it inserts: the
    queue's controls (as ``_lease_fast_sql`` counts them) and whether any
    other task of it is ready (``_READY``'s condition, locked or not)."""
    return f"""
       (SELECT count(*) FROM metadata_taskdefinition AS d
         WHERE d.namespace_id = %s AND d.name = %s AND {_has_controls("d")}) AS controlled,
       EXISTS (SELECT 1 FROM executions_task
                WHERE namespace_id = %s AND queue = %s AND status = 'SCHEDULED' AND NOT held
                  AND available_at <= %s) AS others"""


def lease_gated(pick: Pick, worker_id: str, count: int, token: str, *, park: str = "", leave: str = "") -> Lease:
    """The controlled dequeue: under the definition's lock (quotas.gate),
    lease no more than the gate allows and book them before the lock is
    released. The same for a worker queue and for system tasks; on SQLite
    every lease comes here: the transaction is the lock."""
    with transaction.atomic():
        gate = open_gate(namespace_id=pick.namespace_id, queue=pick.name, want=count)
        tasks = _lease_rows(pick, worker_id, gate.allowance, token, gate.now) if gate.allowance else []
        charge(gate, namespace_id=pick.namespace_id, queue=pick.name, tasks=tasks, worker_id=worker_id, now=gate.now)
        notice = leave if tasks else park
        if notice:
            notify.announce(notice)
    return Lease(tasks, gate)


def _lease_rows(pick: Pick, worker_id: str, count: int, token: str, now: dt.datetime) -> list[Task]:
    """Lease up to ``count`` of the ready tasks ``pick`` names (the caller
    holds the gate)."""
    if connection.vendor == "postgresql":
        return sql.rows(
            Task,
            _lease_sql(pick.system, pick.task_id is not None),
            _lease_params(worker_id, count, token, now, ns=pick.namespace_id, queue=pick.name, task=pick.task_id),
        )
    # SQLite: inside the gate's transaction, which holds the write lock.
    tasks = list(_ready(pick, now).order_by("-priority", "available_at")[:count])
    cap_s = system_cap_s() if pick.system else math.inf
    by_length: dict[float, list] = {}
    for task in tasks:
        seconds = capped_seconds(task.lease_seconds, cap_s)
        by_length.setdefault(seconds, []).append(task.id)
        _mark_leased(task, worker_id, token, now, seconds)
    # One UPDATE per distinct lease length (almost always one).
    for seconds, ids in by_length.items():
        Task.objects.filter(pk__in=ids).update(
            status=TaskStatus.IN_PROGRESS,
            started_at=now,
            worker_id=worker_id,
            lease_token=token,
            lease_expires_at=now + dt.timedelta(seconds=seconds),
            last_heartbeat_at=now,
            deliveries=F("deliveries") + 1,
        )
    return tasks


def _ready(pick: Pick, now: dt.datetime):
    """The ready tasks ``pick`` names, as the statements of ``_lease_sql`` select them."""
    which: dict[str, Any] = {"kind": "system", "task_def_name": pick.name} if pick.system else {"queue": pick.name}
    if pick.task_id is not None:
        which["pk"] = pick.task_id
    return Task.objects.filter(
        namespace_id=pick.namespace_id, status=TaskStatus.SCHEDULED, held=False, available_at__lte=now, **which
    )


def _lease_params(worker_id: str, count: int, token: str, now: dt.datetime, **which) -> dict:
    return {"now": now, "worker": worker_id, "token": token, "count": count, "cap": system_cap_s(), **which}


def _lease_set(system: bool) -> str:
    """The lease's columns; a system task's length is capped (``system_lease_seconds``)."""
    length = "LEAST(t.lease_seconds, %(cap)s)" if system else "t.lease_seconds"
    return f"""
   SET status = 'IN_PROGRESS', started_at = %(now)s, worker_id = %(worker)s, lease_token = %(token)s,
       lease_expires_at = %(now)s + make_interval(secs => {length}),
       last_heartbeat_at = %(now)s, deliveries = t.deliveries + 1
"""


# Which ready rows a statement leases ({which}; %(queue)s is the gate's key).
_OF_QUEUE = "namespace_id = %(ns)s AND queue = %(queue)s"
_OF_DEFINITION = "namespace_id = %(ns)s AND kind = 'system' AND task_def_name = %(queue)s"
_OF_ANY_SYSTEM = "kind = 'system'"
_ONLY_TASK = "AND id = %(task)s"
_READY = """
       SELECT id FROM executions_task
        WHERE {which} AND status = 'SCHEDULED' AND NOT held
          AND available_at <= %(now)s {extra}
        ORDER BY priority DESC, available_at
        LIMIT %(count)s
          FOR UPDATE SKIP LOCKED
"""


def _has_controls(alias: str) -> str:
    """A task definition row with any control (those go through the gate)."""
    return (
        f"({alias}.concurrent_exec_limit > 0 OR {alias}.rate_limit_per_frequency > 0"
        f" OR {alias}.semaphores <> '[]'::jsonb)"
    )


@functools.cache
def _lease_sql(system: bool = False, one: bool = False) -> str:
    """The dequeue on PostgreSQL: one statement, one round trip, one commit.
    For a worker queue the inner SELECT walks the partial index task_ready
    in (priority, availability) order; for the system tasks of one
    definition (``system``), task_system_ready, with the lease capped;
    ``one``: only the task %(task)s. Either skips rows another poller holds."""
    ready = _READY.format(which=_OF_DEFINITION if system else _OF_QUEUE, extra=_ONLY_TASK if one else "")
    return (
        f"UPDATE executions_task AS t {_lease_set(system)} WHERE t.id IN ({ready}) RETURNING {sql.columns(Task, 't')}"
    )


# What a lease answer and its metrics read of the leased rows (the rest is
# deferred, as with QuerySet.only: fewer columns to send and convert).
LEASED_FIELDS = (
    "id",
    "execution",
    "namespace",
    "type",
    "kind",
    "task_def_name",
    "queue",
    "status",
    "ref",
    "path",
    "attempt",
    "input",
    "idempotency_key",
    "scheduled_at",
    "available_at",
    "started_at",
    "lease_token",
    "lease_expires_at",
)


@functools.cache
def _lease_fast_sql() -> str:
    """The same for a queue that may have controls, still one statement: it
    leases only if the queue's task definition has none, and says whether it
    has (a queue with controls goes through the gate instead). The LEFT JOIN
    returns one all-NULL task row when nothing was leased, to carry the answer;
    a long-poll's park or leave notice rides along (``lease_queue``)."""
    return f"""
WITH ctl AS (
    SELECT count(*) AS n FROM metadata_taskdefinition AS d
     WHERE d.namespace_id = %(ns)s AND d.name = %(queue)s AND {_has_controls("d")}
), leased AS (
    UPDATE executions_task AS t {_lease_set(False)}
     WHERE t.id IN ({_READY.format(which=_OF_QUEUE, extra="AND (SELECT n FROM ctl) = 0")})
    RETURNING {sql.columns(Task, "t", LEASED_FIELDS)}
)
SELECT {sql.columns(Task, "leased", LEASED_FIELDS)}, ctl.n AS controlled,
       CASE WHEN ctl.n > 0 THEN NULL
            WHEN leased.id IS NULL AND %(park)s <> '' THEN pg_notify(%(channel)s, %(park)s)
            WHEN leased.id IS NOT NULL AND %(leave)s <> '' THEN pg_notify(%(channel)s, %(leave)s)
       END AS announced
  FROM ctl LEFT JOIN leased ON true
"""


def lease_fast(
    namespace_id: int,
    queue: str,
    worker_id: str,
    count: int,
    token: str,
    now: dt.datetime,
    park: str = "",
    leave: str = "",
) -> tuple[list[Task], bool]:
    params = {"now": now, "worker": worker_id, "token": token, "ns": namespace_id, "queue": queue, "count": count}
    params.update(channel=notify.TASKS_CHANNEL, park=park, leave=leave)
    # A sync match in a start: the lease goes with the start's rows, its task among them.
    with transactions.in_pipeline():
        found = sql.rows(Task, _lease_fast_sql(), params, extra=2, fields=LEASED_FIELDS)
    return [task for task, _ in found if task is not None], bool(found and found[0][1][0])


# Controlled groups one look names (PostgreSQL); on SQLite every group is
# gated, so one look names more.
SYSTEM_GROUPS = 16
SYSTEM_GROUPS_SQLITE = 100


def system_cap_s() -> float:
    """The lease a system task's runner holds, and renews while its call runs."""
    return float(settings.NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS)


def lease_ungated_system(
    worker_id: str, count: int, token: str, now: dt.datetime, task_id: uuid.UUID | None = None
) -> tuple[list[Task], list[Group]]:
    """What can be leased without a gate, and the groups that need theirs,
    highest priority first. On PostgreSQL one statement leases up to
    ``count`` ready system tasks whose definitions have no controls and
    names the groups of those whose definitions have; on SQLite nothing is
    leased here and every group of ready system tasks is named."""
    if connection.vendor == "postgresql":
        params = _lease_params(worker_id, count, token, now, task=task_id, groups=SYSTEM_GROUPS)
        found = sql.rows(Task, _lease_system_sql(task_id is not None), params, extra=2)
        namespaces, names = found[0][1] if found else (None, None)
        return [task for task, _ in found if task is not None], list(zip(namespaces or (), names or (), strict=True))
    ready = Task.objects.filter(kind="system", status=TaskStatus.SCHEDULED, held=False, available_at__lte=now)
    if task_id is not None:
        ready = ready.filter(pk=task_id)
    groups = (
        ready.values_list("namespace_id", "task_def_name")
        .annotate(top=Max("priority"), since=Min("available_at"))
        .order_by("-top", "since")[:SYSTEM_GROUPS_SQLITE]
    )
    return [], [(namespace_id, name) for namespace_id, name, _, _ in groups]


@functools.cache
def _lease_system_sql(one: bool) -> str:
    """The system tasks' one statement (``lease_ungated_system``). The groups come
    back as two arrays beside every leased row, or beside one all-NULL row
    when nothing was leased (the LEFT JOIN), as in ``_lease_fast_sql``."""
    only = _ONLY_TASK if one else ""
    uncontrolled = f"{only} AND NOT EXISTS ({_definition_of('executions_task')} AND {_has_controls('d')})"
    return f"""
WITH leased AS (
    UPDATE executions_task AS t {_lease_set(True)}
     WHERE t.id IN ({_READY.format(which=_OF_ANY_SYSTEM, extra=uncontrolled)})
    RETURNING {sql.columns(Task, "t")}
), gated AS (
    SELECT r.namespace_id, r.task_def_name, max(r.priority) AS top, min(r.available_at) AS since
      FROM executions_task AS r
     WHERE r.kind = 'system' AND r.status = 'SCHEDULED' AND NOT r.held AND r.available_at <= %(now)s {only}
       AND EXISTS ({_definition_of("r")} AND {_has_controls("d")})
     GROUP BY r.namespace_id, r.task_def_name
     ORDER BY top DESC, since
     LIMIT %(groups)s
)
SELECT {sql.columns(Task, "leased")}, g.namespaces, g.names
  FROM (SELECT array_agg(namespace_id ORDER BY top DESC, since) AS namespaces,
               array_agg(task_def_name ORDER BY top DESC, since) AS names FROM gated) AS g
  LEFT JOIN leased ON true
"""


def _definition_of(alias: str) -> str:
    return (
        f"SELECT 1 FROM metadata_taskdefinition AS d"
        f" WHERE d.namespace_id = {alias}.namespace_id AND d.name = {alias}.task_def_name"
    )


# --- results and heartbeats -------------------------------------------------------


def result_values(
    task: Task,
    *,
    status: str,
    output: dict,
    reason: str,
    callback_after_s: float,
    logs: list,
    now: dt.datetime,
    paused: bool,
) -> dict[str, Any]:
    """The columns a result sets on an IN_PROGRESS ``task``: an end, a put-back
    (IN_PROGRESS with ``callback_after_s``: offered again later, held when
    the run is ``paused``) or a renewal (IN_PROGRESS, still working)."""
    # A result's outputData replaces the task's output (heartbeat progress included).
    values: dict[str, Any] = {"output": output}
    if logs:
        values["logs"] = (task.logs + [{"at": now.isoformat(), "log": str(line)} for line in logs])[-MAX_LOG_ENTRIES:]
    if status != TaskStatus.IN_PROGRESS:
        values.update(
            status=status, reason_for_incompletion=reason, ended_at=now, lease_token=None, lease_expires_at=None
        )
    elif callback_after_s > 0:
        values.update(
            status=TaskStatus.SCHEDULED,
            lease_token=None,
            lease_expires_at=None,
            available_at=now + dt.timedelta(seconds=callback_after_s),
            held=paused,
        )
    else:
        values.update(lease_expires_at=_renewed_expiry(task, now), last_heartbeat_at=now)
    return values


def record_result(task: Task, values: dict[str, Any], *, lease_token: str | None, now: dt.datetime) -> bool:
    """Write one result's ``values`` if ``task`` is still IN_PROGRESS under
    ``lease_token`` and that lease has not expired at ``now`` (None: a HUMAN
    task, completed without a lease). False, and nothing written, when not."""
    where: dict[str, Any] = {"id": task.id, "status": TaskStatus.IN_PROGRESS}
    if lease_token is not None:
        where.update(lease_token=lease_token, lease_expires_at__gt=now)
    if not sql.update(Task, values=values, where=where):
        return False
    _after_result(task, values)
    metrics.record_task_end(task, values.get("status"))
    return True


def record_results(planned: list[tuple[Task, dict[str, Any], str]], *, now: dt.datetime) -> None:
    """Write a batch of checked results, each (task, values, lease token),
    the caller holding every task's execution locked and every lease checked
    live at ``now`` (``lease_is_live``). Results that set the
    same columns under the same token (a worker finishing what one poll gave
    it) are written by one statement."""
    writes: dict[tuple[str, tuple], tuple[dict, dict[uuid.UUID, None]]] = {}
    for task, values, token in planned:
        # A dict keeps the order and writes the same renewal twice in one batch once.
        writes.setdefault((token, sql.same_values_key(values)), (values, {}))[1][task.id] = None
    for (token, _), (values, ids) in writes.items():
        # Nothing changes an IN_PROGRESS row's status or token without its
        # execution's lock, which the caller holds.
        where = {"id": list(ids), "status": TaskStatus.IN_PROGRESS, "lease_token": token, "lease_expires_at__gt": now}
        if sql.update(Task, values=values, where=where) != len(ids):
            raise RuntimeError("task rows changed under their executions' locks")
    for task, values, _ in planned:
        _after_result(task, values)
    metrics.record_task_ends((task, values.get("status")) for task, values, _ in planned)


def _after_result(task: Task, values: dict[str, Any]) -> None:
    if values.get("status", TaskStatus.IN_PROGRESS) != TaskStatus.IN_PROGRESS:
        _left_in_flight(task)
    _set(task, values)


def lease_is_live(task: Task, *, lease_token: str | None, now: dt.datetime) -> bool:
    """Whether ``lease_token`` is ``task``'s lease and has not expired at
    ``now``. A lease is fenced by time as well as by token: once it expires,
    its worker may no longer report, whatever the sweeper has done since, so
    a control that stops counting an expired lease (a semaphore) agrees with
    what may still report."""
    return (
        task.status == TaskStatus.IN_PROGRESS
        and lease_token is not None
        and task.lease_token == lease_token
        and task.lease_expires_at is not None
        and task.lease_expires_at > now
    )


def renew(task: Task, *, lease_token: str, now: dt.datetime, progress: Any = None) -> bool:
    """A heartbeat: extend the lease ``lease_token`` names (never past
    startedAt + startToClose; a system task's by the runner's short lease
    only) if it is still live at ``now``. False, and nothing written, when
    it is not."""
    values: dict[str, Any] = {"lease_expires_at": _renewed_expiry(task, now), "last_heartbeat_at": now}
    if progress is not None:
        values["output"] = {**task.output, "progress": progress}
    where = {"id": task.id, "status": TaskStatus.IN_PROGRESS, "lease_token": lease_token, "lease_expires_at__gt": now}
    if not sql.update(Task, values=values, where=where):
        return False
    _set(task, values)
    return True


def _renewed_expiry(task: Task, now: dt.datetime) -> dt.datetime:
    """A system task's runner renews the short lease it took (``system_cap_s``)
    while its call runs; a worker's heartbeat extends by the policy's own."""
    cap_s = system_cap_s() if task.kind == "system" else math.inf
    return lease_expiry(task.policy, started_at=task.started_at or now, now=now, cap_s=cap_s)


# --- timeouts and lease expiry -------------------------------------------------


def time_out(task: Task, *, reason: str, now: dt.datetime) -> bool:
    """End an open attempt TIMED_OUT (a timer or an expired lease fired)."""
    ended = sql.update(
        Task,
        values={
            "status": TaskStatus.TIMED_OUT,
            "reason_for_incompletion": reason,
            "ended_at": now,
            "lease_token": None,
        },
        where={"id": task.id, "status": task.status if task.status in OPEN_TASK else list(OPEN_TASK)},
    )
    if ended and task.status == TaskStatus.IN_PROGRESS:
        _left_in_flight(task)
    metrics.record_task_end(task, TaskStatus.TIMED_OUT, ended)
    return bool(ended)


def extend_alerting(task: Task, *, until: dt.datetime) -> bool:
    """An ALERT_ONLY attempt past its deadline runs on: its lease is renewed
    to ``until`` so the alert repeats once per period, not at every sweep."""
    return bool(
        sql.update(Task, values={"lease_expires_at": until}, where={"id": task.id, "status": TaskStatus.IN_PROGRESS})
    )


def redeliver(task: Task, *, now: dt.datetime, held: bool) -> bool:
    """The worker went silent and no timeout applies: the same attempt goes
    back to its queue (same idempotency key; the old lease token is void),
    held if the run is paused."""
    moved = sql.update(
        Task,
        values={
            "status": TaskStatus.SCHEDULED,
            "lease_token": None,
            "lease_expires_at": None,
            "available_at": now,
            "held": held,
        },
        where={"id": task.id, "status": TaskStatus.IN_PROGRESS},
    )
    if moved:
        _left_in_flight(task)
        notify.task_ready(task.namespace_id, task.queue, task.kind)
    return bool(moved)


# --- waiting tasks -----------------------------------------------------------------


def complete_waiting(task_id: uuid.UUID, *, type_: str, now: dt.datetime, output: dict | None = None) -> bool:
    """Complete a waiting task (a WAIT's timer, a matching webhook) if it still waits."""
    values: dict[str, Any] = {"status": TaskStatus.COMPLETED, "ended_at": now}
    if output is not None:
        values["output"] = output
    updated = sql.update(Task, values=values, where={"id": task_id, "status": TaskStatus.IN_PROGRESS})
    metrics.record_type_end(type_, TaskStatus.COMPLETED, updated, task_id=task_id)
    return bool(updated)


def fail_unstarted_child(task_id: uuid.UUID, *, reason: str, now: dt.datetime) -> bool:
    """A SUB_WORKFLOW task whose child, named at run time, could not be
    started (no such workflow): it fails terminally, still IN_PROGRESS."""
    values = {"status": TaskStatus.FAILED_WITH_TERMINAL_ERROR, "reason_for_incompletion": reason, "ended_at": now}
    return bool(sql.update(Task, values=values, where={"id": task_id, "status": TaskStatus.IN_PROGRESS}))


def link_child(task_id: uuid.UUID, *, child_id: uuid.UUID) -> None:
    """A SUB_WORKFLOW task's child execution was started."""
    sql.update(Task, values={"child_execution_id": child_id}, where={"id": task_id})


# --- decisions ----------------------------------------------------------------------


def apply_decided(rows: list, now: dt.datetime) -> None:
    """Write the rows a decision changed (``executions.decider.snapshot.Row``), each only
    if it is still in the status the decider read. A cancel applies to an
    open task whatever it became meanwhile (a poll may have leased it)."""
    for row in rows:
        values = {
            "status": row.status,
            "output": row.output,
            "reason_for_incompletion": row.reason,
            "started_at": row.started_at,
            "ended_at": row.ended_at,
            "lease_token": None,
        }
        if row.status == TaskStatus.CANCELED:
            _cancel_rows(Task.objects.filter(pk=row.id), values)
            continue
        if not sql.update(Task, values=values, where={"id": row.id, "status": row.read_status}):
            raise StaleDecision(f"task {row.id} changed under the decision")


def settle(settled: dict[uuid.UUID, list[uuid.UUID]]) -> None:
    """Mark rows of finished dynamic-fork branches as settled by their fork
    row (``Decision.settle``): deciding stops reading them."""
    for fork_id, ids in settled.items():
        if ids:
            Task.objects.filter(pk__in=ids).update(settled_by=fork_id)


def unsettle(*, execution_id: uuid.UUID, run: int, forks: list[uuid.UUID]) -> None:
    """The forks ended: their settled rows are read again."""
    if forks:
        Task.objects.filter(execution_id=execution_id, run=run, settled_by__in=forks).update(settled_by=None)


# --- cancel, pause, resume, retry -------------------------------------------------


def cancel_open(*, execution_id: uuid.UUID, run: int, reason: str, now: dt.datetime) -> int:
    """Cancel every open task of a run (terminate, a workflow timeout)."""
    open_tasks = Task.objects.filter(execution_id=execution_id, run=run, status__in=OPEN_TASK)
    metrics.record_canceled(open_tasks)  # the execution is locked: the same rows are updated next
    values = {"status": TaskStatus.CANCELED, "reason_for_incompletion": reason, "ended_at": now, "lease_token": None}
    return _cancel_rows(open_tasks, values)


def _cancel_rows(rows, values: dict[str, Any]) -> int:
    """Cancel the open tasks among ``rows``; those that were in flight free
    their slots and permits."""
    in_flight = list(
        rows.filter(status=TaskStatus.IN_PROGRESS, kind__in=("worker", "system")).only(
            "id", "namespace_id", "queue", "kind", "task_def_name"
        )
    )
    canceled = rows.filter(status__in=OPEN_TASK).update(**values)
    for task in in_flight:
        _left_in_flight(task)
    return canceled


def hold_scheduled(*, execution_id: uuid.UUID) -> int:
    """A paused run: its SCHEDULED tasks are not dispatched until released."""
    return Task.objects.filter(execution_id=execution_id, status=TaskStatus.SCHEDULED, held=False).update(held=True)


def release_held(*, execution_id: uuid.UUID) -> int:
    """A resumed (or admitted) run: its held tasks may be dispatched again;
    their queues are woken when this commits."""
    held = Task.objects.filter(execution_id=execution_id, held=True)
    queues = collections.Counter(held.exclude(queue=None).values_list("namespace_id", "queue", "kind"))
    released = held.update(held=False)
    for (namespace_id, queue, kind), count in queues.items():
        notify.task_ready(namespace_id, queue, kind, count)
    return released


def reopen(task_id: uuid.UUID) -> bool:
    """A manual retry reopens a fork or loop that failed because of a task inside it."""
    return bool(
        sql.update(
            Task,
            values={"status": TaskStatus.IN_PROGRESS, "ended_at": None, "reason_for_incompletion": ""},
            where={"id": task_id, "status": [TaskStatus.FAILED, TaskStatus.TIMED_OUT, TaskStatus.CANCELED]},
        )
    )


def new_attempt(row: Task, *, seq: int, now: dt.datetime, held: bool = False) -> Task:
    """A manual retry's attempt of ``row``'s task: a fresh task budget (its
    timers are the caller's), inserted SCHEDULED (``held``: not dispatched yet)."""
    task = sql.new(
        Task,
        execution_id=row.execution_id,
        namespace_id=row.namespace_id,
        run=row.run,
        seq=seq,
        ref=row.ref,
        path=row.path,
        type=row.type,
        kind=row.kind,
        task_def_name=row.task_def_name,
        queue=row.queue,
        status=TaskStatus.SCHEDULED,
        held=held,
        optional=row.optional,
        attempt=row.attempt + 1,
        priority=row.priority,
        policy=row.policy,
        input=row.input,
        idempotency_key=row.idempotency_key,
        lease_seconds=row.lease_seconds,
        scheduled_at=now,
        available_at=now,
        first_scheduled_at=now,
    )
    insert([task])
    return task


# --- purge ----------------------------------------------------------------------------


def purge(*, execution_ids: list[uuid.UUID]) -> int:
    """Delete every attempt of these (finished) executions."""
    deleted, _ = Task.objects.filter(execution_id__in=execution_ids).only("pk").delete()
    return deleted
