"""Task results and heartbeats from workers (and HUMAN task completions).

A result is written by one conditional UPDATE that names the lease token it
answers, under the execution's row lock; the decision it causes runs in the
same transaction. A stale token, a canceled task or a finished one: 409 and
nothing changes. A batch locks its executions in id order first (no
deadlocks between batches), applies each result on its own terms, and
decides each touched execution once.
"""
from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from executions import executor, sql
from executions.dispatch import lease_expiry
from executions.models import Execution, ExecutionStatus, Task, TaskStatus
from nodeflow import clock, metrics
from nodeflow.errors import ApiError, Conflict, InvalidField, NotFound
from nodeflow.models import Namespace
from quotas import gate

MAX_LOG_ENTRIES = 200
FINAL = (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.FAILED_WITH_TERMINAL_ERROR)


@dataclass
class Result:
    task_id: uuid.UUID
    status: str
    lease_token: str | None = None
    output: dict = field(default_factory=dict)
    reason: str = ""
    callback_after_s: float = 0.0
    logs: list = field(default_factory=list)


def _stale(task: Task) -> Conflict:
    if task.status == TaskStatus.CANCELED:
        return Conflict("the task was canceled", taskStatus=task.status)
    if task.status != TaskStatus.IN_PROGRESS:
        return Conflict(f"the task is {task.status}; this lease is no longer valid", taskStatus=task.status)
    return Conflict("this lease is no longer valid (it expired and the task was re-delivered)", taskStatus=task.status)


def _check(task: Task, result: Result, *, human: bool) -> None:
    if human:
        if task.type != "HUMAN":
            raise InvalidField("leaseToken", "required: only HUMAN tasks take a result without a lease")
        if task.status != TaskStatus.IN_PROGRESS:
            raise _stale(task)
        return
    if task.status != TaskStatus.IN_PROGRESS or task.lease_token != result.lease_token:
        raise _stale(task)


def _fields(task: Task, result: Result, now: dt.datetime, *, paused: bool) -> tuple[dict[str, Any], bool]:
    """The columns a checked result sets, and whether the execution should be
    decided. ``paused``: the execution is paused, so a task put back is held."""
    # A result's outputData replaces the task's output (heartbeat progress included).
    fields: dict[str, Any] = {"output": result.output}
    if result.logs:
        fields["logs"] = (task.logs + [{"at": now.isoformat(), "log": str(line)} for line in result.logs])[-MAX_LOG_ENTRIES:]
    if result.status != TaskStatus.IN_PROGRESS:
        fields.update(status=result.status, reason_for_incompletion=result.reason, ended_at=now,
                      lease_token=None, lease_expires_at=None)
        return fields, True
    if result.callback_after_s > 0:
        # "Not done; offer it again later": back to the queue, same attempt.
        fields.update(status=TaskStatus.SCHEDULED, lease_token=None, lease_expires_at=None,
                      available_at=now + dt.timedelta(seconds=result.callback_after_s), held=paused)
    else:
        fields.update(lease_expires_at=lease_expiry(task.policy, started_at=task.started_at or now, now=now),
                      last_heartbeat_at=now)
    return fields, False


def _write(task: Task, result: Result, now: dt.datetime, *, human: bool, paused: bool = False) -> bool:
    """Apply one checked result; True if the execution should be decided."""
    fields, decide = _fields(task, result, now, paused=paused)
    where = {"id": task.id, "status": TaskStatus.IN_PROGRESS}
    if not human:
        where["lease_token"] = result.lease_token
    if not sql.update(Task, values=fields, where=where):
        raise _stale(task)
    _wake_if_freed(task, fields)
    metrics.record_task_end(task, fields.get("status"))
    for name, value in fields.items():
        setattr(task, name, value)
    return decide


def _wake_if_freed(task: Task, fields: dict[str, Any]) -> None:
    """A worker task leaving IN_PROGRESS frees a slot or permits of its queue:
    drop its permits and wake that queue's waiting pollers when this commits."""
    if task.kind == "worker" and fields.get("status", TaskStatus.IN_PROGRESS) != TaskStatus.IN_PROGRESS:
        gate.task_left(namespace_id=task.namespace_id, queue=task.queue, task_id=task.id)


def report_result(*, namespace: Namespace, result: Result, human: bool = False) -> Task:
    """Apply one result (and the decision it causes)."""
    with transaction.atomic():
        execution = executor.lock_execution_of_task(result.task_id, namespace_id=namespace.id)
        if execution is None:
            raise NotFound(f"task '{result.task_id}' does not exist")
        # Read under the lock. A result that will be decided reads the whole
        # run once: the decider gets these rows, with the write applied.
        run = executor.read_run(execution) if _decides(result, execution) else []
        task = next((t for t in run if t.id == result.task_id), None) or _read_task(result.task_id)
        if task is None:  # deleted (a purge) since the lock query found it
            raise NotFound(f"task '{result.task_id}' does not exist")
        _check(task, result, human=human)
        paused = execution.status == ExecutionStatus.PAUSED
        if _write(task, result, clock.now(), human=human, paused=paused) and execution.status == ExecutionStatus.RUNNING:
            executor.decide_or_defer(execution, tasks=run or None)
        return task


def _decides(result: Result, execution: Execution) -> bool:
    """Whether this result, if it stands, has its execution decided."""
    return result.status != TaskStatus.IN_PROGRESS and executor.decidable(execution)


def _read_task(task_id: uuid.UUID) -> Task | None:
    found = sql.rows(Task, f"SELECT {sql.columns(Task)} FROM {sql.table(Task)} WHERE id = %s",
                     [sql.prep(Task, "id", task_id)])
    return found[0] if found else None


def report_results(*, namespace: Namespace, results: list[Result]) -> list[dict]:
    """Apply a batch; one answer per result, in order. One bad item never
    spoils the others. Results that set the same columns under the same lease
    token (a worker finishing what one poll gave it) are written by one
    statement."""
    answers: list[dict] = []
    with transaction.atomic():
        locked = executor.lock_executions_of_tasks(
            [r.task_id for r in results], namespace_id=namespace.id, fields=executor.DECIDING_EXECUTION_FIELDS,
        )
        # Read under the locks. When any result may be decided, the runs of
        # the executions that can be are read whole, once: the decider gets
        # these rows, with the writes applied.
        runs = {}
        if any(r.status != TaskStatus.IN_PROGRESS for r in results):
            runs = executor.read_runs(
                [e for e in locked.values() if executor.decidable(e)], fields=executor.DECIDING_TASK_FIELDS,
            )
        tasks = {t.id: t for run in runs.values() for t in run}
        tasks.update(_read_tasks([r.task_id for r in results if r.task_id not in tasks], namespace_id=namespace.id))
        # Only tasks whose execution this transaction holds (one that appeared
        # after the lock statement is answered 404, as it was then).
        tasks = {pk: t for pk, t in tasks.items() if t.execution_id in locked}
        owners = {t.id: t.execution_id for t in tasks.values()}
        writes: dict[tuple[str, tuple], tuple[dict, list[uuid.UUID]]] = {}
        touched: dict[uuid.UUID, Execution] = {}
        ended: list[tuple[Task, str | None]] = []  # (task, status), counted once for the batch
        now = clock.now()
        for result in results:
            answers.append(_plan_one(result, tasks.get(result.task_id), locked, owners, writes, touched, ended, now))
        metrics.record_task_ends(ended)
        for (token, _), (fields, ids) in writes.items():
            # Every row was checked under its execution's lock, and nothing
            # changes an IN_PROGRESS row's status or token without that lock.
            if sql.update(Task, values=fields, where={"id": ids, "status": TaskStatus.IN_PROGRESS, "lease_token": token}) != len(ids):
                raise RuntimeError("task rows changed under their executions' locks")
        executor.decide_many(list(touched.values()), tasks=runs)
    return answers


def _read_tasks(task_ids: list[uuid.UUID], *, namespace_id: int) -> dict[uuid.UUID, Task]:
    if not task_ids:
        return {}
    condition, params = sql.any_of(Task, "id", set(task_ids))
    statement = f"SELECT {sql.columns(Task)} FROM {sql.table(Task)} WHERE {condition} AND namespace_id = %s"
    return {t.id: t for t in sql.rows(Task, statement, [*params, namespace_id])}


def _plan_one(result, task, locked, owners, writes, touched, ended, now) -> dict:
    if task is None:
        return {"taskId": str(result.task_id), "status": 404, "error": "NOT_FOUND"}
    try:
        _check(task, result, human=False)
    except ApiError as exc:
        return {"taskId": str(result.task_id), "status": exc.status_code, "error": exc.error, "message": exc.message}
    execution = locked[owners[task.id]]
    fields, decide = _fields(task, result, now, paused=execution.status == ExecutionStatus.PAUSED)
    key = (result.lease_token, sql.same_values_key(fields))
    writes.setdefault(key, (fields, []))[1].append(task.id)
    _wake_if_freed(task, fields)
    ended.append((task, fields.get("status")))
    if decide:
        touched[execution.id] = execution
    # As written: the decider reads these rows, and the same task twice in
    # one batch gets 409 the second time.
    for name, value in fields.items():
        setattr(task, name, value)
    return {"taskId": str(result.task_id), "status": 200}


def heartbeat(*, namespace: Namespace, task_id: uuid.UUID, lease_token: str, progress: Any = None) -> Task:
    """Extend a lease. 409 when it is no longer this worker's."""
    task = Task.objects.filter(pk=task_id, namespace=namespace).first()
    if task is None:
        raise NotFound(f"task '{task_id}' does not exist")
    if task.status != TaskStatus.IN_PROGRESS or task.lease_token != lease_token:
        raise _stale(task)
    now = clock.now()
    fields: dict[str, Any] = {
        "lease_expires_at": lease_expiry(task.policy, started_at=task.started_at or now, now=now),
        "last_heartbeat_at": now,
    }
    if progress is not None:
        fields["output"] = {**task.output, "progress": progress}
    if not Task.objects.filter(pk=task_id, status=TaskStatus.IN_PROGRESS, lease_token=lease_token).update(**fields):
        raise _stale(Task.objects.get(pk=task_id))
    task.lease_expires_at = fields["lease_expires_at"]
    return task
