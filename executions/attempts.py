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

import datetime as dt
import uuid
from collections.abc import Iterable
from typing import Any

from executions import notify, sql
from executions.leases import lease_expiry
from executions.models import OPEN_TASK, Task, TaskStatus
from nodeflow import metrics
from quotas import gate

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

def insert(tasks: Iterable[Task]) -> None:
    """New task rows (a decision's, or a manual retry's attempts), one statement."""
    sql.insert(tasks)


# --- results and heartbeats -------------------------------------------------------

def result_values(task: Task, *, status: str, output: dict, reason: str, callback_after_s: float,
                  logs: list, now: dt.datetime, paused: bool) -> dict[str, Any]:
    """The columns a result sets on an IN_PROGRESS ``task``: an end, a put-back
    (IN_PROGRESS with ``callback_after_s``: offered again later, held when
    the run is ``paused``) or a renewal (IN_PROGRESS, still working)."""
    # A result's outputData replaces the task's output (heartbeat progress included).
    values: dict[str, Any] = {"output": output}
    if logs:
        values["logs"] = (task.logs + [{"at": now.isoformat(), "log": str(line)} for line in logs])[-MAX_LOG_ENTRIES:]
    if status != TaskStatus.IN_PROGRESS:
        values.update(status=status, reason_for_incompletion=reason, ended_at=now, lease_token=None,
                      lease_expires_at=None)
    elif callback_after_s > 0:
        values.update(status=TaskStatus.SCHEDULED, lease_token=None, lease_expires_at=None,
                      available_at=now + dt.timedelta(seconds=callback_after_s), held=paused)
    else:
        values.update(lease_expires_at=lease_expiry(task.policy, started_at=task.started_at or now, now=now),
                      last_heartbeat_at=now)
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
    writes: dict[tuple[str, tuple], tuple[dict, list[uuid.UUID]]] = {}
    for task, values, token in planned:
        ids = writes.setdefault((token, sql.same_values_key(values)), (values, []))[1]
        if task.id not in ids:  # the same renewal twice in one batch
            ids.append(task.id)
    for (token, _), (values, ids) in writes.items():
        # Nothing changes an IN_PROGRESS row's status or token without its
        # execution's lock, which the caller holds.
        where = {"id": ids, "status": TaskStatus.IN_PROGRESS, "lease_token": token, "lease_expires_at__gt": now}
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
    return (task.status == TaskStatus.IN_PROGRESS and lease_token is not None and task.lease_token == lease_token
            and task.lease_expires_at is not None and task.lease_expires_at > now)


def renew(task: Task, *, lease_token: str, now: dt.datetime, progress: Any = None) -> bool:
    """A heartbeat: extend the lease ``lease_token`` names (never past
    startedAt + startToClose) if it is still live at ``now``. False, and
    nothing written, when it is not."""
    values: dict[str, Any] = {
        "lease_expires_at": lease_expiry(task.policy, started_at=task.started_at or now, now=now),
        "last_heartbeat_at": now,
    }
    if progress is not None:
        values["output"] = {**task.output, "progress": progress}
    where = {"id": task.id, "status": TaskStatus.IN_PROGRESS, "lease_token": lease_token, "lease_expires_at__gt": now}
    if not sql.update(Task, values=values, where=where):
        return False
    _set(task, values)
    return True


# --- timeouts and lease expiry -------------------------------------------------

def time_out(task: Task, *, reason: str, now: dt.datetime) -> bool:
    """End an open attempt TIMED_OUT (a timer or an expired lease fired)."""
    ended = sql.update(
        Task, values={"status": TaskStatus.TIMED_OUT, "reason_for_incompletion": reason, "ended_at": now,
                      "lease_token": None},
        where={"id": task.id, "status": task.status if task.status in OPEN_TASK else list(OPEN_TASK)},
    )
    if ended and task.status == TaskStatus.IN_PROGRESS:
        _left_in_flight(task)
    metrics.record_task_end(task, TaskStatus.TIMED_OUT, ended)
    return bool(ended)


def extend_alerting(task: Task, *, until: dt.datetime) -> bool:
    """An ALERT_ONLY attempt past its deadline runs on: its lease is renewed
    to ``until`` so the alert repeats once per period, not at every sweep."""
    return bool(sql.update(Task, values={"lease_expires_at": until},
                           where={"id": task.id, "status": TaskStatus.IN_PROGRESS}))


def redeliver(task: Task, *, now: dt.datetime, held: bool) -> bool:
    """The worker went silent and no timeout applies: the same attempt goes
    back to its queue (same idempotency key; the old lease token is void),
    held if the run is paused."""
    moved = sql.update(
        Task, values={"status": TaskStatus.SCHEDULED, "lease_token": None, "lease_expires_at": None,
                      "available_at": now, "held": held},
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
    metrics.record_type_end(type_, TaskStatus.COMPLETED, updated)
    return bool(updated)


def link_child(task_id: uuid.UUID, *, child_id: uuid.UUID) -> None:
    """A SUB_WORKFLOW task's child execution was started."""
    sql.update(Task, values={"child_execution_id": child_id}, where={"id": task_id})


# --- decisions ----------------------------------------------------------------------

def apply_decided(rows: list, now: dt.datetime) -> None:
    """Write the rows a decision changed (``executions.state.Row``), each only
    if it is still in the status the decider read. A cancel applies to an
    open task whatever it became meanwhile (a poll may have leased it)."""
    for row in rows:
        values = dict(status=row.status, output=row.output, reason_for_incompletion=row.reason,
                      started_at=row.started_at, ended_at=row.ended_at, lease_token=None)
        if row.status == TaskStatus.CANCELED:
            _cancel_rows(Task.objects.filter(pk=row.id), values)
            continue
        if not sql.update(Task, values=values, where={"id": row.id, "status": row.read_status}):
            raise StaleDecision(f"task {row.id} changed under the decision")


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
    in_flight = list(rows.filter(status=TaskStatus.IN_PROGRESS, kind__in=("worker", "system"))
                     .only("id", "namespace_id", "queue", "kind", "task_def_name"))
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
    queues = set(held.exclude(queue=None).values_list("namespace_id", "queue", "kind"))
    released = held.update(held=False)
    for namespace_id, queue, kind in queues:
        notify.task_ready(namespace_id, queue, kind)
    return released


def reopen(task_id: uuid.UUID) -> bool:
    """A manual retry reopens a fork or loop that failed because of a task inside it."""
    return bool(sql.update(
        Task, values={"status": TaskStatus.IN_PROGRESS, "ended_at": None, "reason_for_incompletion": ""},
        where={"id": task_id, "status": [TaskStatus.FAILED, TaskStatus.TIMED_OUT, TaskStatus.CANCELED]},
    ))


def new_attempt(row: Task, *, seq: int, now: dt.datetime, held: bool = False) -> Task:
    """A manual retry's attempt of ``row``'s task: a fresh task budget (its
    timers are the caller's), inserted SCHEDULED (``held``: not dispatched yet)."""
    task = Task(
        execution_id=row.execution_id, namespace_id=row.namespace_id, run=row.run, seq=seq, ref=row.ref,
        path=row.path, type=row.type, kind=row.kind, task_def_name=row.task_def_name, queue=row.queue,
        status=TaskStatus.SCHEDULED, held=held, optional=row.optional, attempt=row.attempt + 1,
        priority=row.priority, policy=row.policy, input=row.input, idempotency_key=row.idempotency_key,
        lease_seconds=row.lease_seconds, scheduled_at=now, available_at=now, first_scheduled_at=now,
    )
    insert([task])
    return task


# --- purge ----------------------------------------------------------------------------

def purge(*, execution_ids: list[uuid.UUID]) -> int:
    """Delete every attempt of these (finished) executions."""
    deleted, _ = Task.objects.filter(execution_id__in=execution_ids).only("pk").delete()
    return deleted
