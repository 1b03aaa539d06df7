"""Executions: the one module that writes ``executions_execution`` rows, the
timers armed for them (``executions_timer``) and their entries in the
decide queue (``executions_deciderequest``).

Verbs: lock (the row lock every change of an execution is made under),
insert, set fields, end, pause and resume, reopen (retry, restart), admit;
arm, claim, postpone and drop timers; request a decision, claim and drop
requests; purge. Each UPDATE is conditional on the
state it moves from where another writer could race it, and returns its row
count. A test fails when any other module writes these tables
(tests/test_row_owners.py).

Lock order, everywhere: an execution before its tasks, a parent before its
children; batches lock in id order.
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from django.db import transaction

from executions import notify, sql
from executions.models import ACTIVE_EXECUTION, DecideRequest, Execution, ExecutionStatus, Task, Timer, TimerKind

# --- locks -------------------------------------------------------------------------


def lock(execution_id: uuid.UUID) -> Execution | None:
    """The execution, row-locked until the transaction ends (None: no such row)."""
    found = sql.rows(
        Execution,
        f"SELECT {sql.columns(Execution)} FROM {sql.table(Execution)} WHERE id = %s{sql.for_update()}",
        [sql.prep(Execution, "id", execution_id)],
    )
    return found[0] if found else None


def by_idempotency_key(namespace_id: int, key: str) -> Execution | None:
    """The namespace's execution started with idempotency key ``key``, if
    any: a fixed statement on the key's unique index."""
    found = sql.rows(
        Execution,
        f"SELECT {sql.columns(Execution)} FROM {sql.table(Execution)} WHERE namespace_id = %s AND idempotency_key = %s",
        [namespace_id, key],
    )
    return found[0] if found else None


def lock_of_task(task_id: uuid.UUID, *, namespace_id: int) -> Execution | None:
    """Lock the execution that task ``task_id`` of the namespace belongs to
    (None: no such task). One round trip: a task never changes execution."""
    found = sql.rows(
        Execution,
        f"SELECT {sql.columns(Execution)} FROM {sql.table(Execution)} WHERE id = "
        f"(SELECT execution_id FROM {sql.table(Task)} WHERE id = %s AND namespace_id = %s){sql.for_update()}",
        [sql.prep(Task, "id", task_id), namespace_id],
    )
    return found[0] if found else None


def lock_of_tasks(
    task_ids: list[uuid.UUID], *, namespace_id: int, fields: tuple[str, ...] | None = None
) -> dict[uuid.UUID, Execution]:
    """Lock, in id order (no deadlocks between batches), the executions the
    namespace's tasks ``task_ids`` belong to (reading ``fields`` of them)."""
    if not task_ids:
        return {}
    tasks, params = sql.any_of(Task, "id", set(task_ids))
    statement = (
        f"SELECT {sql.columns(Execution, fields=fields)} FROM {sql.table(Execution)} WHERE id IN "
        f"(SELECT execution_id FROM {sql.table(Task)} WHERE {tasks} AND namespace_id = %s) "
        f"ORDER BY id{sql.for_update()}"
    )
    return {e.id: e for e in sql.rows(Execution, statement, [*params, namespace_id], fields=fields)}


# --- insert and set ----------------------------------------------------------------


def insert(execution: Execution) -> None:
    """Insert a new execution. With an idempotency key, in a savepoint: a
    concurrent start with the same key raises IntegrityError and leaves the
    caller's transaction usable."""
    if execution.idempotency_key:
        with transaction.atomic():
            sql.insert([execution])
    else:
        sql.insert([execution])


def update(execution: Execution, values: dict[str, Any], *, now: dt.datetime) -> int:
    """Set ``values`` on a locked execution (and on the instance)."""
    for name, value in values.items():
        setattr(execution, name, value)
    return sql.update(Execution, values={**values, "updated_at": now}, where={"id": execution.id})


def update_many(execution_ids: list[uuid.UUID], values: dict[str, Any], *, now: dt.datetime) -> int:
    """The same ``values`` on several locked executions, one statement."""
    return sql.update(Execution, values={**values, "updated_at": now}, where={"id": execution_ids})


def end(execution: Execution, *, status: str, reason: str, now: dt.datetime) -> bool:
    """End a locked, active execution from outside the decider (terminate,
    the workflow timeout)."""
    values = {"status": status, "reason_for_incompletion": reason, "ended_at": now}
    ended = sql.update(
        Execution, values={**values, "updated_at": now}, where={"id": execution.id, "status": list(ACTIVE_EXECUTION)}
    )
    if ended:
        for name, value in values.items():
            setattr(execution, name, value)
    return bool(ended)


def set_status(execution: Execution, *, status: str, was: str, now: dt.datetime) -> bool:
    """Pause (RUNNING → PAUSED) or resume (PAUSED → RUNNING)."""
    changed = sql.update(
        Execution, values={"status": status, "updated_at": now}, where={"id": execution.id, "status": was}
    )
    if changed:
        execution.status = status
    return bool(changed)


def reopen(execution: Execution, *, now: dt.datetime, **values: Any) -> None:
    """Make an ended, locked execution RUNNING again (retry, restart), its
    outcome cleared; ``values`` are set with it (a restart's new run)."""
    update(
        execution,
        {
            "status": ExecutionStatus.RUNNING,
            "ended_at": None,
            "reason_for_incompletion": "",
            "output": {},
            "failed_task_names": [],
            **values,
        },
        now=now,
    )


def admit(execution_id: uuid.UUID) -> bool:
    """An execution awaiting admission is admitted (its first decision follows)."""
    return bool(
        sql.update(
            Execution, values={"awaiting_admission": False}, where={"id": execution_id, "awaiting_admission": True}
        )
    )


# --- timers --------------------------------------------------------------------------


def arm(execution_id: uuid.UUID, timers: Iterable) -> None:
    """Arm the timers of a decision (``executions.decider.decision.TimerSpec``: kind, task, due)."""
    rows = [Timer(kind=t.kind, execution_id=execution_id, task_id=t.task_id, due_at=t.due_at) for t in timers]
    if rows:
        Timer.objects.bulk_create(rows)


def arm_many(timers: Iterable[tuple[uuid.UUID, Any]]) -> None:
    """``arm`` for several executions at once: (execution id, timer) pairs."""
    rows = [Timer(kind=t.kind, execution_id=pk, task_id=t.task_id, due_at=t.due_at) for pk, t in timers]
    if rows:
        Timer.objects.bulk_create(rows)


def arm_one(*, kind: str, execution_id: uuid.UUID, task_id: uuid.UUID | None, due_at: dt.datetime) -> None:
    Timer.objects.create(kind=kind, execution_id=execution_id, task_id=task_id, due_at=due_at)


def claim_due_timer(now: dt.datetime) -> Timer | None:
    """The next due timer, locked (SKIP LOCKED: sweepers spread out)."""
    return Timer.objects.filter(due_at__lte=now).order_by("due_at").select_for_update(skip_locked=True).first()


def drop_timer(timer: Timer) -> None:
    """A fired timer is deleted in the transaction that acted on it."""
    Timer.objects.filter(pk=timer.pk).delete()


def postpone_timer(timer: Timer, *, due_at: dt.datetime) -> None:
    Timer.objects.filter(pk=timer.pk).update(due_at=due_at)


def disarm_workflow_timeout(execution: Execution) -> None:
    """Delete a run's workflow timeout before a retry or restart re-arms it,
    unless a sweeper holds it right now (waiting for this execution's lock:
    deleting it would deadlock); its handler then finds that the deadline it
    was armed for is not this run's, and does nothing."""
    old = Timer.objects.filter(execution_id=execution.id, kind=TimerKind.WORKFLOW_TIMEOUT)
    Timer.objects.filter(pk__in=list(old.select_for_update(skip_locked=True).values_list("id", flat=True))).delete()


# --- the decide queue ---------------------------------------------------------------

# How this process decides an execution right after the commit that asked
# for it: registered by the executor (which sits above this module).
_decide_after_commit: list[Callable[[uuid.UUID], object]] = []


def on_decision_requested(decide: Callable[[uuid.UUID], object]) -> None:
    if decide not in _decide_after_commit:
        _decide_after_commit.append(decide)


def request_decision(execution_id: uuid.UUID, *, now: dt.datetime, here: bool = True) -> None:
    """Queue "decide this execution" durably (idempotent), and (``here``)
    decide it in this process right after the caller commits. The request
    row is the durable fallback: a decider role picks it up if this process
    dies first or the decision fails; without ``here`` it is the decider
    role's alone. (No NOTIFY: every listening session in the database would
    pay a transaction for each one.)"""
    DecideRequest.objects.bulk_create(
        [DecideRequest(execution_id=execution_id, due_at=now)],
        update_conflicts=True,
        unique_fields=["execution"],
        update_fields=["due_at"],
    )
    if here:
        for decide in _decide_after_commit:
            transaction.on_commit(functools.partial(decide, execution_id), robust=True)
    notify.decider_wakeup()


def claim_decide_request(now: dt.datetime) -> DecideRequest | None:
    """The next due decide request whose execution no other transaction
    holds, claimed by locking that execution (SKIP LOCKED: deciders spread
    out, and pass over an execution being decided right now). The
    execution's lock, not the request's: whoever decides an execution locks
    it and then deletes its request (``executor.decide_now``), so a decider
    holding the request while it waited for the execution would deadlock
    with it. The request comes with its execution's row, read under that
    lock: the decision starts from it without reading it again."""
    return (
        DecideRequest.objects.filter(due_at__lte=now)
        .order_by("due_at")
        .select_related("execution")
        .select_for_update(skip_locked=True, of=("execution",))
        .first()
    )


def drop_decide_request(execution_id: uuid.UUID) -> None:
    """Deleted in the transaction that decides the execution."""
    DecideRequest.objects.filter(pk=execution_id).delete()


def postpone_decide_request(execution_id: uuid.UUID, *, due_at: dt.datetime) -> None:
    DecideRequest.objects.filter(pk=execution_id).update(due_at=due_at)


# --- purge ------------------------------------------------------------------------------


def purge(*, execution_ids: list[uuid.UUID]) -> int:
    """Delete these (finished) executions, their timers and decide requests;
    their tasks go first (attempts.purge)."""
    Timer.objects.filter(execution_id__in=execution_ids).delete()
    DecideRequest.objects.filter(execution_id__in=execution_ids).delete()
    deleted, _ = Execution.objects.filter(pk__in=execution_ids).only("pk").delete()
    return deleted
