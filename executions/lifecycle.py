"""Execution lifecycle services: start, end, terminate, pause, resume, retry,
restart, and starting a SUB_WORKFLOW child. Each takes the execution's row
lock before changing it (parent before child, always)."""
from __future__ import annotations

import datetime as dt
import logging
import uuid

from django.db import IntegrityError, transaction

from executions import attempts, executor, runs, snapshots
from executions.decider import task_timers
from executions.models import ACTIVE_EXECUTION, Execution, ExecutionStatus, Task, TaskStatus, Timer, TimerKind
from executions.state import FAILURE, Ending, StartChild
from nodeflow import clock
from nodeflow.errors import Conflict, NotFound
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
    *, namespace: Namespace, name: str, version: int | None = None, input: dict | None = None,
    correlation_id: str | None = None, idempotency_key: str | None = None, priority: int = 0,
    hold: bool = False,
) -> tuple[Execution, bool]:
    """Start an execution and make its first decision, in one transaction.
    The controls on starts come first (quotas.starts): a namespace quota or
    maxConcurrentExecutions refuses it (429) before any row exists; a start
    past its admission key's limit is inserted awaiting admission, with no
    decision. ``hold``: a start the engine makes itself (a failure
    workflow), which is never refused: where a control would refuse it, it
    is inserted awaiting admission, held in line. Returns (execution,
    created); the same idempotency key gives the same one."""
    with transaction.atomic():
        if idempotency_key:
            existing = Execution.objects.filter(namespace=namespace, idempotency_key=idempotency_key).first()
            if existing is not None:
                return existing, False
        snapshot = snapshots.snapshot_for(namespace=namespace, name=name, version=version)
        key = snapshot.body["root"]
        workflow = snapshot.body["workflows"][key]
        now = clock.now()
        execution = Execution(
            namespace=namespace, name=name, version=snapshot.version, snapshot_id=snapshot.id, workflow_key=key,
            input=input or {}, variables=dict(workflow.get("variables") or {}),
            correlation_id=correlation_id, idempotency_key=idempotency_key, priority=priority,
            created_at=now, started_at=now,
        )
        admitted = starts.check_start(execution=execution, workflow=workflow, now=now, hold=hold)
        try:
            if admitted is False:
                _insert_undecided(execution)
            else:
                executor.decide_new(execution)
        except IntegrityError:
            if not idempotency_key:
                raise
            # A concurrent start with the same idempotency key won.
            return Execution.objects.get(namespace=namespace, idempotency_key=idempotency_key), False
        if admitted is not None:
            admission.take_ticket(execution=execution, admitted=admitted)
        return execution, True


def _insert_undecided(execution: Execution) -> None:
    """Insert an execution that awaits admission: its first decision (which
    arms its timeout) waits until it is admitted. In a savepoint when it has
    an idempotency key, like executor.decide_new."""
    runs.insert(execution)


def start_child(*, parent: Execution, request: StartChild) -> Execution:
    """Start the child of a SUB_WORKFLOW task (inside the parent's decision).
    It shares the parent's snapshot and inherits its deadline."""
    name, _, version = request.workflow_key.rpartition("@")
    workflow = executor.snapshot_body(parent.snapshot_id)["workflows"][request.workflow_key]
    now = clock.now()
    child = Execution(
        namespace_id=parent.namespace_id, name=name, version=int(version), snapshot_id=parent.snapshot_id,
        workflow_key=request.workflow_key, input=request.input, variables=dict(workflow.get("variables") or {}),
        correlation_id=parent.correlation_id, priority=parent.priority, parent_execution_id=parent.id,
        parent_task_id=request.task_id, path_prefix=request.path_prefix, depth=parent.depth + 1,
        deadline=parent.deadline, created_at=now, started_at=now,
    )
    executor.decide_new(child)
    attempts.link_child(request.task_id, child_id=child.id)
    return child


def after_end(execution: Execution, ending: Ending) -> None:
    """What follows an execution's end: its parent re-decides; a root's end
    may make room for held starts, which go first (quotas.starts); a failed
    or timed-out run starts its failureWorkflow; and a run holding an
    admission slot hands it to the next in line. In that order: the lock
    order of every start (quota row, definition, bucket)."""
    if execution.parent_execution_id:
        executor.request_decision(execution.parent_execution_id)
    else:
        starts.after_root_end(execution, now=clock.now())
    if ending.status in (ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT):
        _start_failure_workflow(execution, ending)
    admission.release(execution)


def _start_failure_workflow(execution: Execution, ending: Ending) -> None:
    """Start the failed run's failureWorkflow, as a root run. It is never
    refused: a control that would refuse it holds it in line instead
    (``hold``), so the failed run's end commits and the start still
    happens, once the control allows it."""
    name = snapshots.workflow_of(execution).get("failureWorkflow")
    if not name:
        return
    namespace = Namespace.objects.get(pk=execution.namespace_id)
    payload = {
        "workflowId": str(execution.id), "executionId": str(execution.id), "workflowName": execution.name,
        "status": ending.status, "reason": ending.reason, "failedTaskNames": list(ending.failed_tasks),
        "input": execution.input,
    }
    try:
        with transaction.atomic():
            start_execution(namespace=namespace, name=name, input=payload, correlation_id=execution.correlation_id,
                            idempotency_key=f"failure:{execution.id}:{execution.run}", hold=True)
    except NotFound:
        log.warning("failureWorkflow %s of execution %s does not exist", name, execution.id)


def end_execution(execution: Execution, *, status: str, reason: str) -> None:
    """End a locked, active execution from outside the decider (terminate, the
    workflow timeout): cancel its open tasks and its children, then follow up."""
    now = clock.now()
    runs.end(execution, status=status, reason=reason, now=now)
    cancel_open_tasks(execution, reason=f"execution {status.lower()}: {reason}")
    children = Execution.objects.filter(parent_execution_id=execution.id, status__in=ACTIVE_EXECUTION)
    for child_id in children.values_list("id", flat=True):
        terminate_execution(execution_id=child_id, reason=f"parent {status.lower()}", cascade_from_parent=True)
    after_end(execution, Ending(status, execution.output, reason, tuple(execution.failed_task_names)))


def cancel_open_tasks(execution: Execution, *, reason: str) -> int:
    return attempts.cancel_open(execution_id=execution.id, run=execution.run, reason=reason, now=clock.now())


def terminate_execution(*, execution_id: uuid.UUID, reason: str = "", cascade_from_parent: bool = False) -> Execution:
    """Terminate: cancel every open task and every child. A worker holding a
    canceled task learns it from the 409 on its next heartbeat or result."""
    with transaction.atomic():
        execution = runs.lock(execution_id)
        if execution is None:
            raise NotFound(f"execution '{execution_id}' does not exist")
        if execution.status not in ACTIVE_EXECUTION:
            if cascade_from_parent:
                return execution
            raise Conflict(f"execution is already {execution.status}")
        end_execution(execution, status=ExecutionStatus.TERMINATED, reason=reason or "terminated")
        return execution


def pause_execution(*, execution_id: uuid.UUID) -> Execution:
    """No new task is scheduled or dispatched until resume; running ones finish."""
    with transaction.atomic():
        execution = _locked_in(execution_id, (ExecutionStatus.RUNNING,), "pause")
        runs.set_status(execution, status=ExecutionStatus.PAUSED, was=ExecutionStatus.RUNNING, now=clock.now())
        attempts.hold_scheduled(execution_id=execution.id)
        return execution


def resume_execution(*, execution_id: uuid.UUID) -> Execution:
    with transaction.atomic():
        execution = _locked_in(execution_id, (ExecutionStatus.PAUSED,), "resume")
        runs.set_status(execution, status=ExecutionStatus.RUNNING, was=ExecutionStatus.PAUSED, now=clock.now())
        attempts.release_held(execution_id=execution.id)
        executor.decide_locked(execution)
        return execution


def retry_execution(*, execution_id: uuid.UUID) -> Execution:
    """Resume a failed, timed-out or terminated run from where it failed: every
    failed or canceled task gets a new attempt; forks and loops reopen. A
    root takes admission as a start does, before anything changes
    (quotas.starts): refused with the start's 429, or reopened awaiting
    admission, its new attempts held until it is admitted."""
    with transaction.atomic():
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
            _new_attempt(row, seq, now)
            seq += 1
        _reopen(execution, now=now)
        _rearm_workflow_timeout(execution)
        admission.place_reopened(execution=execution, admitted=admitted, now=now)
        executor.decide_locked(execution)
        return execution


def _new_attempt(row: Task, seq: int, now: dt.datetime) -> Task:
    """A manual retry's attempt: a fresh task budget, with its timers."""
    task = Task.objects.create(
        execution_id=row.execution_id, namespace_id=row.namespace_id, run=row.run, seq=seq, ref=row.ref,
        path=row.path, type=row.type, kind=row.kind, task_def_name=row.task_def_name, queue=row.queue,
        status=TaskStatus.SCHEDULED, optional=row.optional, attempt=row.attempt + 1, priority=row.priority,
        policy=row.policy, input=row.input, idempotency_key=row.idempotency_key,
        lease_seconds=row.lease_seconds, scheduled_at=now,
        available_at=now, first_scheduled_at=now,
    )
    Timer.objects.bulk_create([
        Timer(kind=t.kind, execution_id=task.execution_id, task_id=t.task_id, due_at=t.due_at)
        for t in task_timers(executor.to_row(task), starts_budget=True)
    ])
    return task


def _rearm_workflow_timeout(execution: Execution) -> None:
    """A retried or restarted run gets its workflow timeout armed afresh on
    its next (first) evaluation: a root's from now, a child's from its
    active parent's deadline, which its own timeout can only shorten. The
    old timer is deleted, unless a sweeper holds it right now (waiting for
    this lock: deleting it would deadlock); its handler then finds that the
    deadline it was armed for is not this run's, and does nothing."""
    old = Timer.objects.filter(execution_id=execution.id, kind=TimerKind.WORKFLOW_TIMEOUT)
    Timer.objects.filter(pk__in=list(old.select_for_update(skip_locked=True).values_list("id", flat=True))).delete()
    deadline = None
    if execution.parent_execution_id is not None:
        deadline = (
            Execution.objects.filter(pk=execution.parent_execution_id, status__in=ACTIVE_EXECUTION)
            .values_list("deadline", flat=True).first()
        )
    Execution.objects.filter(pk=execution.id).update(evaluated_at=None, deadline=deadline)
    execution.evaluated_at, execution.deadline = None, deadline


def _reopen(execution: Execution, *, now: dt.datetime) -> None:
    fields = dict(status=ExecutionStatus.RUNNING, ended_at=None, reason_for_incompletion="", output={},
                  failed_task_names=[], updated_at=now)
    Execution.objects.filter(pk=execution.id).update(**fields)
    for name, value in fields.items():
        setattr(execution, name, value)


def restart_execution(*, execution_id: uuid.UUID) -> Execution:
    """Run an ended execution again from the start, under the same id. The old
    run's tasks stay as history; the new run's idempotency keys differ. A
    root takes admission as a start does, before anything changes
    (quotas.starts): refused with the start's 429, or reopened awaiting
    admission and decided once admitted."""
    with transaction.atomic():
        execution = _locked_in(execution_id, ENDED, "restart")
        workflow = snapshots.workflow_of(execution)
        now = clock.now()
        variables = dict(workflow.get("variables") or {})
        execution.variables = variables  # what the new run's admission key resolves against
        admitted = starts.check_start(execution=execution, workflow=workflow, now=now)
        runs.update(execution, {"run": execution.run + 1, "variables": variables, "started_at": now}, now=now)
        _reopen(execution, now=now)
        _rearm_workflow_timeout(execution)
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
