"""Execution lifecycle services, what the API and the admin call: start,
terminate, pause, resume, retry, restart. Each takes the execution's row
lock before changing it (parent before child, always). Starting and ending
a run, which decisions do too, belong to the executor (executor.start,
executor.end, executor.terminate); the rows are written by their owners
(executions.runs, executions.attempts)."""

from __future__ import annotations

import datetime as dt
import logging
import uuid

from django.db import transaction

from executions import attempts, executor, runs, snapshots
from executions.decider import task_timers
from executions.decider.snapshot import FAILURE
from executions.models import ACTIVE_EXECUTION, Execution, ExecutionStatus, Task, TaskStatus
from nodeflow import clock, transactions
from nodeflow.errors import ApiError, Conflict, NotFound
from nodeflow.models import Namespace
from quotas import admission, starts

log = logging.getLogger(__name__)

ENDED = (ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT, ExecutionStatus.TERMINATED)


def get_execution(*, namespace: Namespace, execution_id: uuid.UUID | str) -> Execution:
    try:
        # Parsed here: the ORM answers a malformed id with a ValidationError (a 500).
        pk = execution_id if isinstance(execution_id, uuid.UUID) else uuid.UUID(str(execution_id))
    except ValueError:
        pk = None
    found = Execution.objects.filter(namespace=namespace, pk=pk).first() if pk else None
    if found is None:
        raise NotFound(f"execution '{execution_id}' does not exist")
    return found


def start_execution(
    *,
    namespace: Namespace,
    name: str,
    version: int | None = None,
    input: dict | None = None,
    correlation_id: str | None = None,
    idempotency_key: str | None = None,
    priority: int = 0,
) -> tuple[Execution, bool]:
    """Start an execution (executor.start): refused with a 429 by a namespace
    quota or maxConcurrentExecutions, queued by its admission key, or
    created with its first decision applied. Returns (execution, created);
    the same idempotency key gives the same one."""
    return executor.start(
        namespace=namespace,
        name=name,
        version=version,
        input=input,
        correlation_id=correlation_id,
        idempotency_key=idempotency_key,
        priority=priority,
    )


def start_requested(*, namespace: Namespace, start: dict) -> tuple[Execution, bool]:
    """``start_execution`` with the fields of a start request, as
    ``StartExecutionSerializer`` validates them."""
    return start_execution(
        namespace=namespace,
        name=start["name"],
        version=start.get("version"),
        input=start["input"],
        correlation_id=start.get("correlationId"),
        idempotency_key=start.get("idempotencyKey"),
        priority=start["priority"],
    )


def start_executions(*, namespace: Namespace, starts: list[dict]) -> list[dict]:
    """Start each of ``starts`` (a start's validated fields) through the one
    start path, in one transaction: one answer each, in order; one commit
    (one WAL flush) for the batch. Its rows are held and sent together
    (sql.insert): the batch waits for the database where a start does
    anything but an insert, not once a row. A refused start (a quota, an unknown workflow)
    has written nothing and leaves the transaction usable (executor.start),
    so it spoils none of the others without a savepoint per start. Each
    start sees those before it in the batch, as it would had they
    committed: a quota counts them, an idempotency key repeated in the
    batch gives the same execution. Should a start ever be refused after
    writing (the start path makes no such refusal), the transaction is
    marked for rollback and the refusal fails the whole batch: nothing of
    it is stored."""
    answers = []
    with transactions.outermost():
        for start in starts:
            try:
                execution, created = start_requested(namespace=namespace, start=start)
            except ApiError as exc:
                if transaction.get_rollback():
                    raise
                answers.append({"status": exc.status_code, **exc.body()})
            else:
                answers.append(
                    {"status": 201 if created else 200, "id": str(execution.id), "executionStatus": execution.status}
                )
    return answers


def terminate_execution(*, execution_id: uuid.UUID, reason: str = "") -> Execution:
    """Terminate: cancel every open task and every child (executor.terminate).
    A worker holding a canceled task learns it from the 409 on its next
    heartbeat or result."""
    return executor.terminate(execution_id=execution_id, reason=reason)


def pause_execution(*, execution_id: uuid.UUID) -> Execution:
    """No new task is scheduled or dispatched until resume; running ones finish."""
    with transactions.outermost():
        execution = _locked_in(execution_id, (ExecutionStatus.RUNNING,), "pause")
        runs.set_status(execution, status=ExecutionStatus.PAUSED, was=ExecutionStatus.RUNNING, now=clock.now())
        attempts.hold_scheduled(execution_id=execution.id)
        return execution


def resume_execution(*, execution_id: uuid.UUID) -> Execution:
    with transactions.outermost():
        execution = _locked_in(execution_id, (ExecutionStatus.PAUSED,), "resume")
        runs.set_status(execution, status=ExecutionStatus.RUNNING, was=ExecutionStatus.PAUSED, now=clock.now())
        if not execution.awaiting_admission:  # admission releases a waiting run's tasks
            attempts.release_held(execution_id=execution.id)
        executor.decide_locked(execution)
        return execution


def retry_execution(*, execution_id: uuid.UUID) -> Execution:
    """Resume a failed, timed-out or terminated run from where it failed: every
    failed or canceled task gets a new attempt; forks and loops reopen. A
    root takes admission as a start does, before anything changes
    (quotas.starts): refused with the start's 429, or reopened awaiting
    admission, its new attempts held until it is admitted."""
    with transactions.outermost():
        execution = _locked_in(execution_id, ENDED[1:], "retry")
        now = clock.now()
        admitted = starts.check_start(execution=execution, workflow=snapshots.workflow_of(execution), now=now)
        rows = list(Task.objects.filter(execution_id=execution.id, run=execution.run).order_by("seq"))
        latest = {row.path: row for row in rows}
        seq = max((row.seq for row in rows), default=-1) + 1
        for row in latest.values():
            if row.status not in FAILURE:
                continue
            if row.kind == "operator" and row.type != "SUB_WORKFLOW":
                # A fork or loop failed by a task inside it reopens. One that
                # failed evaluating itself (a SWITCH expression, a dynamic
                # fork's items) stays failed: reopened, it would run with no
                # case or no items; evaluated again, it fails the same way.
                if row.status != TaskStatus.FAILED_WITH_TERMINAL_ERROR:
                    attempts.reopen(row.id)
                continue
            _new_attempt(execution, row, seq, now)
            seq += 1
        runs.reopen(execution, now=now)
        _rearm_workflow_timeout(execution, now=now)
        admission.place_reopened(execution=execution, admitted=admitted, now=now)
        executor.decide_locked(execution)
        return execution


def _new_attempt(execution: Execution, row: Task, seq: int, now: dt.datetime) -> Task:
    """A manual retry's attempt: a fresh task budget, with its timers; held
    while the run waits for admission."""
    task = attempts.new_attempt(row, seq=seq, now=now, held=execution.awaiting_admission)
    runs.arm(execution.id, task_timers(executor.to_row(task), starts_budget=True))
    return task


def _rearm_workflow_timeout(execution: Execution, *, now: dt.datetime) -> None:
    """A retried or restarted run gets its workflow timeout armed afresh on
    its next (first) evaluation: a root's from now, a child's from its
    active parent's deadline, which its own timeout can only shorten."""
    runs.disarm_workflow_timeout(execution)
    deadline = None
    if execution.parent_execution_id is not None:
        deadline = (
            Execution.objects.filter(pk=execution.parent_execution_id, status__in=ACTIVE_EXECUTION)
            .values_list("deadline", flat=True)
            .first()
        )
    runs.update(execution, {"evaluated_at": None, "deadline": deadline}, now=now)


def restart_execution(*, execution_id: uuid.UUID) -> Execution:
    """Run an ended execution again from the start, under the same id. The old
    run's tasks stay as history; the new run's idempotency keys differ. A
    root takes admission as a start does, before anything changes
    (quotas.starts): refused with the start's 429, or reopened awaiting
    admission and decided once admitted."""
    with transactions.outermost():
        execution = _locked_in(execution_id, ENDED, "restart")
        workflow = snapshots.workflow_of(execution)
        if workflow.get("restartable") is False:  # Conductor's field (docs/conductor.md)
            raise Conflict("this workflow's definition says restartable: false")
        now = clock.now()
        variables = dict(workflow.get("variables") or {})
        execution.variables = variables  # what the new run's admission key resolves against
        admitted = starts.check_start(execution=execution, workflow=workflow, now=now)
        runs.reopen(execution, now=now, run=execution.run + 1, variables=variables, started_at=now)
        _rearm_workflow_timeout(execution, now=now)
        admission.place_reopened(execution=execution, admitted=admitted, now=now)
        executor.decide_locked(execution)
        return execution


def _locked_in(execution_id: uuid.UUID, statuses: tuple, verb: str) -> Execution:
    execution = runs.lock(execution_id)
    if execution is None:
        raise NotFound(f"execution '{execution_id}' does not exist")
    if execution.status not in statuses:
        raise Conflict(f"cannot {verb} an execution that is {execution.status}")
    return execution
