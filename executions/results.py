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

from executions import attempts, dispatch, executor, runs, sql
from executions.models import Execution, ExecutionStatus, Task, TaskStatus
from nodeflow import clock, metrics, transactions
from nodeflow.errors import ApiError, Conflict, InvalidField, NotFound
from nodeflow.models import Namespace


@dataclass
class Result:
    task_id: uuid.UUID
    status: str
    lease_token: str | None = None
    output: dict = field(default_factory=dict)
    reason: str = ""
    callback_after_s: float = 0.0
    logs: list = field(default_factory=list)


def _stale(task: Task, lease_token: str | None = None, route: str = "result") -> Conflict:
    metrics.conflict(task, lease_token, route)
    if task.status == TaskStatus.CANCELED:
        return Conflict("the task was canceled", taskStatus=task.status)
    if task.status != TaskStatus.IN_PROGRESS:
        return Conflict(f"the task is {task.status}; this lease is no longer valid", taskStatus=task.status)
    if lease_token is not None and task.lease_token == lease_token and task.lease_expires_at is not None:
        return Conflict(
            f"this lease expired at {task.lease_expires_at.isoformat().replace('+00:00', 'Z')}; "
            "the task will be timed out or offered again",
            taskStatus=task.status,
        )
    if lease_token is not None:
        # Says nothing of whether another lease exists: an ended lease and a
        # token never given for this task get the same answer.
        return Conflict(
            "this lease token is not the task's current one (a lease that ended, or a token never given for it)",
            taskStatus=task.status,
        )
    return Conflict("this lease is no longer valid", taskStatus=task.status)


def completed_by_api(task: Task) -> bool:
    """Whether ``task`` waits to be completed through the API, without a
    lease: a HUMAN task, or a WAIT with neither duration nor until."""
    if task.type == "HUMAN":
        return True
    return task.type == "WAIT" and not ({"duration", "until"} & set(task.input or {}))


def waits_for_api(*, namespace: Namespace, task_id: uuid.UUID) -> bool:
    """Whether the namespace's task ``task_id`` is one completed through the
    API (``completed_by_api``): a result without a lease for it needs a role
    that completes HUMAN tasks, not a lease token."""
    task = Task.objects.filter(pk=task_id, namespace=namespace).only("type", "input").first()
    return task is not None and completed_by_api(task)


def _check(task: Task, result: Result, *, human: bool, now: dt.datetime) -> None:
    if human:
        if not completed_by_api(task):
            raise InvalidField(
                "leaseToken",
                "required: only HUMAN tasks and WAIT tasks without a duration take a result without a lease",
            )
        if task.status != TaskStatus.IN_PROGRESS:
            raise _stale(task)
        return
    if not attempts.lease_is_live(task, lease_token=result.lease_token, now=now):
        raise _stale(task, result.lease_token)


def _values(task: Task, result: Result, now: dt.datetime, *, paused: bool) -> dict[str, Any]:
    return attempts.result_values(
        task,
        status=result.status,
        output=result.output,
        reason=result.reason,
        callback_after_s=result.callback_after_s,
        logs=result.logs,
        now=now,
        paused=paused,
    )


def _ends(result: Result) -> bool:
    """Whether the result, if it stands, takes its task out of IN_PROGRESS
    for good, so its execution is decided."""
    return result.status != TaskStatus.IN_PROGRESS


@dataclass(frozen=True)
class Next:
    """A worker's ask, on a result, for its next tasks (eager dispatch):
    leased in the result's own transaction, through the same gate as a poll,
    so a sequential step is one round trip and one commit. ``queue`` None:
    the reported task's own."""

    worker_id: str
    count: int
    queue: str | None = None


def report_result(*, namespace: Namespace, result: Result, human: bool = False) -> Task:
    """Apply one result (and the decision it causes)."""
    with transactions.outermost():
        return _report(namespace, result, human=human)


def complete_by_api(*, namespace: Namespace, result: Result) -> Task:
    """The engine's entry point for completing a waiting task from outside,
    without a lease: a HUMAN task, or a WAIT with no duration (Conductor's
    task update completes one this way). ``result.status`` COMPLETED, FAILED
    or FAILED_WITH_TERMINAL_ERROR; 409 when the task no longer waits, 400
    for any other task."""
    return report_result(namespace=namespace, result=result, human=True)


def report_and_lease(*, namespace: Namespace, result: Result, then: Next) -> tuple[Task, list[Task]]:
    """Apply one result, then lease the worker's next tasks, in one
    transaction: the task the decision just scheduled can be among them."""
    with transactions.outermost():
        task = _report(namespace, result, human=False)
        return task, _lease(namespace, then, task.queue)


def _lease(namespace: Namespace, then: Next, queue: str | None) -> list[Task]:
    queue = then.queue or queue
    if queue is None or queue.startswith("@"):
        return []  # a system task's queue is the runner's, not a worker's
    return dispatch.poll(namespace=namespace, queue=queue, worker_id=then.worker_id, count=then.count, wait_s=0)


def _report(namespace: Namespace, result: Result, *, human: bool) -> Task:
    execution = runs.lock_of_task(result.task_id, namespace_id=namespace.id)
    if execution is None:
        raise NotFound(f"task '{result.task_id}' does not exist")
    # Read under the lock. A result that will be decided reads the whole
    # run once: the decider gets these rows, with the write applied.
    run = executor.read_run(execution) if _decides(result, execution) else []
    task = next((t for t in run if t.id == result.task_id), None) or _read_task(result.task_id)
    if task is None:  # deleted (a purge) since the lock query found it
        raise NotFound(f"task '{result.task_id}' does not exist")
    now = clock.now()
    _check(task, result, human=human, now=now)
    values = _values(task, result, now, paused=execution.status == ExecutionStatus.PAUSED)
    if not attempts.record_result(task, values, lease_token=None if human else result.lease_token, now=now):
        raise _stale(task)
    if _ends(result) and execution.status == ExecutionStatus.RUNNING:
        executor.decide_or_defer(execution, tasks=run or None)
    return task


def _decides(result: Result, execution: Execution) -> bool:
    """Whether this result, if it stands, has its execution decided."""
    return _ends(result) and executor.decidable(execution)


def _read_task(task_id: uuid.UUID) -> Task | None:
    found = sql.rows(
        Task, f"SELECT {sql.columns(Task)} FROM {sql.table(Task)} WHERE id = %s", [sql.prep(Task, "id", task_id)]
    )
    return found[0] if found else None


def report_results(
    *, namespace: Namespace, results: list[Result], then: Next | None = None
) -> tuple[list[dict], list[Task]]:
    """Apply a batch; one answer per result, in order. One bad item never
    spoils the others. Results that set the same columns under the same lease
    token (a worker finishing what one poll gave it) are written by one
    statement. ``then``: lease the worker's next tasks in the same
    transaction (by default from the queue of the first task reported)."""
    with transactions.outermost():
        answers, queues = _report_batch(namespace, results)
        return answers, ([] if then is None else _lease(namespace, then, next(iter(queues), None)))


def _report_batch(namespace: Namespace, results: list[Result]) -> tuple[list[dict], list[str]]:
    answers: list[dict] = []
    locked = runs.lock_of_tasks(
        [r.task_id for r in results], namespace_id=namespace.id, fields=executor.DECIDING_EXECUTION_FIELDS
    )
    # Read under the locks. When any result may be decided, the runs of
    # the executions that can be are read whole, once: the decider gets
    # these rows, with the writes applied.
    run_rows: dict = {}
    if any(r.status != TaskStatus.IN_PROGRESS for r in results):
        run_rows = executor.read_runs(
            [e for e in locked.values() if executor.decidable(e)], fields=executor.DECIDING_TASK_FIELDS
        )
    tasks = {t.id: t for run in run_rows.values() for t in run}
    tasks.update(_read_tasks([r.task_id for r in results if r.task_id not in tasks], namespace_id=namespace.id))
    # Only tasks whose execution this transaction holds (one that appeared
    # after the lock statement is answered 404, as it was then).
    tasks = {pk: t for pk, t in tasks.items() if t.execution_id in locked}
    planned: list[tuple[Task, dict, str]] = []
    touched: dict[uuid.UUID, Execution] = {}
    now = clock.now()
    for result in results:
        answers.append(_plan_one(result, tasks.get(result.task_id), locked, planned, touched, now))
    attempts.record_results(planned, now=now)
    executor.decide_many(list(touched.values()), tasks=run_rows)
    return answers, [task.queue for task, _, _ in planned if task.queue]


def _read_tasks(task_ids: list[uuid.UUID], *, namespace_id: int) -> dict[uuid.UUID, Task]:
    if not task_ids:
        return {}
    condition, params = sql.any_of(Task, "id", set(task_ids))
    statement = f"SELECT {sql.columns(Task)} FROM {sql.table(Task)} WHERE {condition} AND namespace_id = %s"
    return {t.id: t for t in sql.rows(Task, statement, [*params, namespace_id])}


def _plan_one(result, task, locked, planned, touched, now) -> dict:
    if task is None:
        return {"taskId": str(result.task_id), "status": 404, "error": "NOT_FOUND"}
    try:
        _check(task, result, human=False, now=now)
    except ApiError as exc:
        return {"taskId": str(result.task_id), "status": exc.status_code, "error": exc.error, "message": exc.message}
    execution = locked[task.execution_id]
    values = _values(task, result, now, paused=execution.status == ExecutionStatus.PAUSED)
    # The same task twice in one batch gets 409 the second time: the first
    # is checked against the row as it will be written.
    planned.append((task, values, result.lease_token))
    if _ends(result):
        touched[execution.id] = execution
    task.status, task.lease_token = values.get("status", task.status), values.get("lease_token", task.lease_token)
    return {"taskId": str(result.task_id), "status": 200}


def heartbeat(*, namespace: Namespace, task_id: uuid.UUID, lease_token: str, progress: Any = None) -> Task:
    """Extend a lease. 409 when it is no longer this worker's."""
    task = Task.objects.filter(pk=task_id, namespace=namespace).first()
    if task is None:
        raise NotFound(f"task '{task_id}' does not exist")
    now = clock.now()
    if not attempts.lease_is_live(task, lease_token=lease_token, now=now):
        raise _stale(task, lease_token, route="heartbeat")
    if not attempts.renew(task, lease_token=lease_token, now=now, progress=progress):
        raise _stale(Task.objects.get(pk=task_id), lease_token, route="heartbeat")
    return task
