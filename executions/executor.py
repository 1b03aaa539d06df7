"""The executor: load an execution's state under its row lock, ask the pure
decider what to do, and apply the decision in the same transaction; and
start and end runs, which decisions do too (a start, a SUB_WORKFLOW child,
an end and what follows it: the parent's decision, held starts, the failure
workflow, the next in an admission line). Every start of a root run passes
the one admission check (quotas.starts). The rows are written by their
owners: executions.attempts (tasks) and executions.runs (executions, their
timers and decide requests).

Lock order, everywhere: an execution before its tasks, a parent before its
children. A child never locks its parent: when it ends it only queues a
decide request for the parent. That order is what keeps deciders, result
handlers, sweepers and terminate free of deadlocks.
"""

from __future__ import annotations

import collections
import datetime as dt
import functools
import logging
import random
import time
import uuid
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from executions import attempts, notify, runs, snapshots, sql
from executions.decider import decide
from executions.decider.decision import Decision, Ending, StartChild
from executions.decider.snapshot import FAILURE, Child, Row, Snapshot
from executions.leases import lease_seconds
from executions.models import ACTIVE_EXECUTION, DecideRequest, Execution, ExecutionStatus, Message, Task
from executions.retry import BUDGET_WINDOW_S
from executions.snapshots import snapshot_body, workflow_of
from metadata import taskdefs
from metadata.expressions import resolve
from metadata.tree import walk_tasks
from nodeflow import claims, clock, metrics, transactions
from nodeflow.errors import ApiError, Conflict, NotFound
from nodeflow.ids import new_id
from nodeflow.models import Namespace
from quotas import admission, namespace_quotas, starts

log = logging.getLogger(__name__)

# A decide request whose decision keeps failing is pushed back this far, not retried hot.
FAILED_REQUEST_BACKOFF_S = 5.0


# What deciding reads of an execution's row and of its run's task rows (and
# what a result checks and writes). A batch of results reads only these; the
# other columns are deferred (see sql.to_model), saving their transfer and
# conversion on the hot path.
DECIDING_EXECUTION_FIELDS = (
    "id",
    "namespace",
    "name",
    "version",
    "snapshot",
    "workflow_key",
    "status",
    "awaiting_admission",
    "admission_key",
    "input",
    "variables",
    "correlation_id",
    "priority",
    "parent_execution",
    "parent_task_id",
    "path_prefix",
    "depth",
    "run",
    "evaluated_at",
    "deadline",
    "started_at",  # the workflow-duration metric, read when it ends (nodeflow.metrics)
)
DECIDING_TASK_FIELDS = (
    "id",
    "execution",
    "namespace",
    "run",
    "seq",
    "ref",
    "path",
    "type",
    "kind",
    "task_def_name",
    "queue",
    "status",
    "optional",
    "attempt",
    "policy",
    "input",
    "output",
    "reason_for_incompletion",
    "scheduled_at",
    "available_at",
    "started_at",
    "ended_at",
    "first_scheduled_at",
    "lease_token",
    "lease_expires_at",
    "child_execution_id",
    "logs",
)


def read_run(execution: Execution, *, fields: tuple[str, ...] | None = None, settled: bool = False) -> list[Task]:
    """The current run's task rows, in seq order: what the decider reads,
    which leaves out the rows of settled fork branches unless ``settled``
    (``executions.decider.fork_join``)."""
    return read_runs([execution], fields=fields, settled=settled)[execution.id]


def read_runs(
    executions: list[Execution], *, fields: tuple[str, ...] | None = None, settled: bool = False
) -> dict[uuid.UUID, list[Task]]:
    """``read_run`` of several executions, in one query."""
    if not executions:
        return {}
    unsettled = "" if settled else " AND settled_by IS NULL"
    columns = sql.columns(Task, fields=fields)
    if len(executions) == 1:
        execution = executions[0]
        statement = (
            f"SELECT {columns} FROM {sql.table(Task)} WHERE execution_id = %s AND run = %s{unsettled} ORDER BY seq"
        )
        params = [sql.prep(Task, "execution", execution.id), execution.run]
        return {execution.id: sql.rows(Task, statement, params, fields=fields)}
    run_of = {e.id: e.run for e in executions}
    found: dict[uuid.UUID, list[Task]] = {e.id: [] for e in executions}
    condition, params = sql.any_of(Task, "execution", run_of)
    statement = f"SELECT {columns} FROM {sql.table(Task)} WHERE {condition}{unsettled} ORDER BY seq"
    for task in sql.rows(Task, statement, params, fields=fields):
        if task.run == run_of[task.execution_id]:
            found[task.execution_id].append(task)
    return found


def to_row(task: Task) -> Row:
    return Row(
        id=task.id,
        path=task.path,
        ref=task.ref,
        type=task.type,
        kind=task.kind,
        task_def_name=task.task_def_name,
        status=task.status,
        attempt=task.attempt,
        seq=task.seq,
        scheduled_at=task.scheduled_at,
        available_at=task.available_at,
        first_scheduled_at=task.first_scheduled_at,
        input=task.input,
        output=task.output,
        reason=task.reason_for_incompletion,
        optional=task.optional,
        policy=task.policy,
        queue=task.queue,
        started_at=task.started_at,
        ended_at=task.ended_at,
        child_execution_id=task.child_execution_id,
    )


def load_snapshot(execution: Execution, now: dt.datetime, tasks: list[Task] | None = None) -> Snapshot:
    """Everything the decider may know about ``execution``; ``tasks`` are its
    current run's rows when the caller has read them already."""
    if tasks is None:
        tasks = read_run(execution)
    rows = [to_row(task) for task in tasks]
    return _snapshot(
        execution,
        now,
        rows,
        children=_children(rows),
        messages=_messages(execution, rows),
        run=execution.run,
        next_seq=max((task.seq for task in tasks), default=-1) + 1,
        evaluated_at=execution.evaluated_at,
        budgets=_budgets(execution, rows, now),
    )


def _snapshot(execution: Execution, now: dt.datetime, rows: list[Row], **known: Any) -> Snapshot:
    """The snapshot's fields every decision reads from the execution row and
    the settings; ``known``: what the caller knows of its tasks."""
    return Snapshot(
        execution_id=execution.id,
        status=execution.status,
        workflow=workflow_of(execution),
        workflows=snapshot_body(execution.snapshot_id)["workflows"],
        input=execution.input,
        variables=execution.variables,
        rows=rows,
        now=now,
        task_defs=taskdefs.policies(execution.namespace_id),
        depth=execution.depth,
        path_prefix=execution.path_prefix,
        deadline=execution.deadline,
        correlation_id=execution.correlation_id,
        name=execution.name,
        version=execution.version,
        parent_execution_id=execution.parent_execution_id,
        **_limits(),
        **known,
    )


def _limits() -> dict:
    """The snapshot's share of the settings: the decider reads none itself."""
    return {
        "max_fork_items": settings.NODE_FLOW_MAX_FORK_ITEMS,
        "max_loop_iterations": settings.NODE_FLOW_LOOP_ITERATIONS_PER_DECISION,
        "max_output_bytes": settings.NODE_FLOW_MAX_BODY_BYTES,
        "max_json_depth": settings.NODE_FLOW_MAX_JSON_DEPTH,
    }


def _children(rows: list[Row]) -> dict[uuid.UUID, Child]:
    ids = [row.child_execution_id for row in rows if row.child_execution_id and row.status == "IN_PROGRESS"]
    if not ids:
        return {}
    found = Execution.objects.filter(pk__in=ids).values_list("id", "status", "output", "reason_for_incompletion")
    return {pk: Child(pk, status, output, reason) for pk, status, output, reason in found}


@functools.lru_cache(maxsize=1024)
def _pulls_messages(snapshot_id: int, workflow_key: str) -> bool:
    workflow = snapshot_body(snapshot_id)["workflows"][workflow_key]
    return any(task["type"] == "PULL_WORKFLOW_MESSAGES" for task, _ in walk_tasks(workflow["tasks"]))


def _messages(execution: Execution, rows: list[Row]) -> list:
    """Unread messages, for workflows that can read them (a PULL task may
    begin in this very decision, so waiting ones are not enough to ask)."""
    if not _pulls_messages(execution.snapshot_id, execution.workflow_key):
        return []
    found = Message.objects.filter(execution_id=execution.id, consumed_by__isnull=True).order_by("id")
    return list(found.values_list("id", "payload")[:1000])


def _budgets(execution: Execution, rows: list[Row], now: dt.datetime) -> dict[str, tuple[int, int]]:
    """Retry-budget counters, read only for task definitions that have a
    failed attempt waiting for a retry verdict and a budget switched on."""
    names = {row.task_def_name for row in rows if row.status in FAILURE and float(row.policy.get("retryBudget", 1)) < 1}
    if not names:
        return {}
    since = now - dt.timedelta(seconds=BUDGET_WINDOW_S)
    budgets = {}
    for name in names:
        window = Task.objects.filter(
            namespace_id=execution.namespace_id,
            task_def_name=name,
            kind__in=("worker", "system"),
            started_at__gte=since,
        )
        budgets[name] = (window.count(), window.filter(attempt__gt=1).count())
    return budgets


# --- deciding -------------------------------------------------------------

# What the decider draws retry jitter from, and names new task rows with.
draw = random.random
make_id = new_id


def decision_for(snapshot: Snapshot) -> Decision:
    """The decider on ``snapshot``, with this decision's draw, ids and time budget."""
    until = time.monotonic() + settings.NODE_FLOW_DECISION_SECONDS
    return decide(snapshot, rand=draw, make_id=make_id, in_time=lambda: time.monotonic() < until)


def decide_run(execution: Execution, now: dt.datetime, tasks: list[Task] | None = None) -> Decision:
    """The decision on ``execution``'s current run (``tasks``: as read by
    ``read_run``, if the caller has). Deciding reads no settled fork
    branch; a decision that needs them (a fork joining) is made again on
    every row of the run."""
    decision = decision_for(load_snapshot(execution, now, tasks))
    if decision.needs_all_rows:
        decision = decision_for(load_snapshot(execution, now, read_run(execution, settled=True)))
    return decision


def decide_locked(execution: Execution) -> Decision | None:
    """Decide an execution whose row the caller holds locked (and apply)."""
    if execution.status != ExecutionStatus.RUNNING or execution.awaiting_admission:
        return None
    now = clock.now()
    decision = decide_run(execution, now)
    apply(execution, decision, now)
    return decision


def decide_new(execution: Execution) -> Decision:
    """Insert a new execution with its first decision already applied: the
    decision is made before the row exists (there are no tasks to read), so
    the row goes in once, with its sequence and deadline set. With an
    idempotency key the insert runs in a savepoint: a concurrent start with
    the same key raises IntegrityError and leaves the transaction usable."""
    now = clock.now()
    decision = decision_for(_new_snapshot(execution, now))
    for name, value in _execution_fields(execution, decision, now).items():
        setattr(execution, name, value)
    runs.insert(execution)
    inserted = apply(execution, decision, now, execution_fields=False)
    if not decision.children:  # a child's start links its parent's row after the insert
        execution._started_rows = inserted  # see started_rows
    return decision


def started_rows(execution: Execution) -> list[Task] | None:
    """The rows of a run this process just started, as inserted (the whole
    run: a new execution has no others), so a start can answer without
    reading them back; None for an execution read from the database."""
    return getattr(execution, "_started_rows", None)


def _new_snapshot(execution: Execution, now: dt.datetime) -> Snapshot:
    return _snapshot(execution, now, [])


def decide_now(execution_id: uuid.UUID) -> Decision | None:
    """Lock, decide and apply, in a transaction of its own (or the caller's)."""
    with transaction.atomic():
        execution = runs.lock(execution_id)
        if execution is None:
            return None
        runs.drop_decide_request(execution_id)
        return decide_locked(execution)


def decide_or_defer(execution: Execution, *, tasks: list[Task] | None = None) -> None:
    """Decide inline; if the decider fails, keep what the caller wrote and
    leave a decide request for the decider role to retry and log. ``tasks``:
    the current run, as ``decide_many`` takes it."""
    decide_many([execution], tasks=None if tasks is None else {execution.id: tasks})


def decidable(execution: Execution) -> bool:
    return execution.status == ExecutionStatus.RUNNING and not execution.awaiting_admission


def decide_many(executions: list[Execution], *, tasks: dict[uuid.UUID, list[Task]] | None = None) -> None:
    """Decide executions the caller holds locked, together: one query for all
    their tasks (none when the caller passes ``tasks``, each execution's
    current run as read under the lock and as written since), one insert for
    every new task, one update for their changed fields. A decider that
    raises for one execution leaves a decide request for it (logged, retried
    by the decider role) and spoils no other; what the caller wrote stays."""
    running = [e for e in executions if decidable(e)]
    if not running:
        return
    now = clock.now()
    if tasks is None or any(e.id not in tasks for e in running):
        tasks = read_runs(running)
    decisions = []
    for execution in running:
        try:
            decisions.append((execution, decide_run(execution, now, tasks[execution.id])))
        except Exception:
            log.exception("decision for %s failed; deferred to the decider role", execution.id)
            request_decision(execution.id)
    apply_many(decisions, now)


def request_decision(execution_id: uuid.UUID) -> None:
    """Queue a decision of ``execution_id`` (runs.request_decision): made in
    this process right after the caller commits, or by a decider role."""
    runs.request_decision(execution_id, now=clock.now())


def decide_next_request() -> bool:
    """Claim one due decide request (SKIP LOCKED), decide its execution and
    delete the request in the same transaction; False when none is due. A
    decision that raises pushes its request back FAILED_REQUEST_BACKOFF_S
    (logged), instead of retrying it hot (``nodeflow.claims``)."""
    return claims.claim_one(
        claim=lambda: runs.claim_decide_request(clock.now()),
        work=_decide_requested,
        what=_deciding,
        back_off=lambda request, _: runs.postpone_decide_request(
            request.execution_id, due_at=clock.now() + dt.timedelta(seconds=FAILED_REQUEST_BACKOFF_S)
        ),
    )


def _decide_requested(request: DecideRequest) -> None:
    """Decide the execution the claim locked and read (``runs.claim_decide_request``)."""
    runs.drop_decide_request(request.execution_id)
    decide_locked(request.execution)


def _deciding(request: DecideRequest) -> str:
    return f"deciding {request.execution_id}"


# --- starting and ending runs ------------------------------------------------


def start(
    *,
    namespace: Namespace,
    name: str,
    version: int | None = None,
    input: dict | None = None,
    correlation_id: str | None = None,
    idempotency_key: str | None = None,
    priority: int = 0,
    hold: bool = False,
) -> tuple[Execution, bool]:
    """Start an execution and make its first decision, in one transaction.
    The controls on starts come first (quotas.starts): a namespace quota or
    maxConcurrentExecutions refuses it (429) before any row exists; a start
    past its admission key's limit is inserted awaiting admission, with no
    decision. ``hold``: a start the engine makes itself (a failure
    workflow), which is never refused: where a control would refuse it, it
    is inserted awaiting admission, held in line. A refusal (those 429s, an
    unknown workflow's 404) is raised before anything is written and once
    this start's block has ended, so it leaves the caller's transaction
    usable: a caller that catches it and goes on (a batch of starts) needs
    no savepoint per start, and the start opens none of its own (a keyed
    start's insert has one, for a concurrent start with the same key:
    ``runs.insert``). Returns (execution, created); the same idempotency
    key gives the same one."""
    with transaction.atomic(savepoint=False):
        if idempotency_key:
            existing = runs.by_idempotency_key(namespace.id, idempotency_key)
            if existing is not None:
                return existing, False
        try:
            # Placed by the controls on starts (reads and locks only: nothing is written here).
            if version is None:
                _read_first(namespace.id, name)
            snapshot = snapshots.snapshot_for(namespace=namespace, name=name, version=version)
            key = snapshot.body["root"]
            workflow = snapshot.body["workflows"][key]
            now = clock.now()
            execution = sql.new(
                Execution,
                namespace=namespace,
                name=name,
                version=snapshot.version,
                snapshot_id=snapshot.id,
                workflow_key=key,
                input=input or {},
                variables=dict(workflow.get("variables") or {}),
                correlation_id=correlation_id,
                idempotency_key=idempotency_key,
                priority=priority,
                created_at=now,
                started_at=now,
            )
            admitted = starts.check_start(execution=execution, workflow=workflow, now=now, hold=hold)
        except ApiError as exc:
            refusal = exc  # raised below, once the block has ended cleanly: nothing was written
        else:
            return _inserted(execution, admitted)
    raise refusal


def _inserted(execution: Execution, admitted: bool | None) -> tuple[Execution, bool]:
    """Write a placed execution: its row with its first decision applied,
    or (waiting for admission) the row alone; its admission ticket."""
    try:
        if admitted is False:
            # Its first decision (which arms its timeout) waits until it is admitted.
            runs.insert(execution)
        else:
            decide_new(execution)
    except IntegrityError:
        if not execution.idempotency_key:
            raise
        # A concurrent start with the same idempotency key won.
        found = runs.by_idempotency_key(execution.namespace_id, execution.idempotency_key)
        if found is None:  # the key's holder is gone again (purged): the error stands
            raise
        return found, False
    if admitted is not None:
        admission.take_ticket(execution=execution, admitted=admitted)
    metrics.record_workflow_start(execution)
    return execution, True


def _read_first(namespace_id: int, name: str) -> None:
    """What a start reads first, in one statement: the published snapshot
    of its workflow (``snapshots.snapshot_for``) and the namespace's quotas
    (``quotas.starts``), which find them read (``transactions.once``).
    Both unlocked, and the first statement of a start's transaction, so
    the read goes with its ``BEGIN`` (``transactions.with_begin``): a start
    that then locks nothing sends its held rows with its ``COMMIT``, two
    round trips in all."""

    def read() -> tuple:
        quota, (snapshot_id, version) = namespace_quotas.read_with(
            namespace_id, snapshots.published_snapshot_sql(), [namespace_id, name], 2
        )
        return (None if snapshot_id is None else (snapshot_id, version)), quota

    with transactions.with_begin():
        transactions.once_together(
            (snapshots.published_key(namespace_id, name), namespace_quotas.quota_key(namespace_id)), read
        )


def start_child(*, parent: Execution, request: StartChild) -> Execution | None:
    """Start the child of a SUB_WORKFLOW task (inside the parent's decision).
    It shares the parent's snapshot and inherits its deadline. None when a
    name resolved at run time names no workflow: the task fails instead."""
    snapshot_id, key = parent.snapshot_id, request.workflow_key
    if key not in snapshot_body(snapshot_id)["workflows"]:
        # A name given as an expression (metadata.conductor): not baked, so
        # the named workflow's published (or given) version, resolved now.
        found = _run_time_child(parent, request)
        if found is None:
            return None
        snapshot_id, key = found
    name, _, version = key.rpartition("@")
    workflow = snapshot_body(snapshot_id)["workflows"][key]
    now = clock.now()
    child = sql.new(
        Execution,
        namespace_id=parent.namespace_id,
        name=name,
        version=int(version),
        snapshot_id=snapshot_id,
        workflow_key=key,
        input=request.input,
        variables=dict(workflow.get("variables") or {}),
        correlation_id=parent.correlation_id,
        priority=parent.priority,
        parent_execution_id=parent.id,
        parent_task_id=request.task_id,
        path_prefix=request.path_prefix,
        depth=parent.depth + 1,
        deadline=parent.deadline,
        created_at=now,
        started_at=now,
    )
    decide_new(child)
    attempts.link_child(request.task_id, child_id=child.id)
    metrics.record_workflow_start(child)
    return child


def _run_time_child(parent: Execution, request: StartChild) -> tuple[int, str] | None:
    """(snapshot id, root key) of a child named at run time; None, and its
    SUB_WORKFLOW task failed terminally, when there is no such workflow."""
    name, _, version = request.workflow_key.rpartition("@")
    namespace = Namespace.objects.get(pk=parent.namespace_id)
    try:
        snapshot = snapshots.snapshot_for(
            namespace=namespace, name=name, version=int(version) if version.isdigit() else None
        )
    except NotFound as exc:
        attempts.fail_unstarted_child(request.task_id, reason=f"SUB_WORKFLOW: {exc.message}", now=clock.now())
        request_decision(parent.id)
        return None
    return snapshot.id, snapshot.body["root"]


def after_end(execution: Execution, ending: Ending) -> None:
    """What follows an execution's end: its parent re-decides; a root's end
    may make room for held starts, which go first (quotas.starts); a failed
    or timed-out run starts its failureWorkflow; and a run holding an
    admission slot hands it to the next in line. In that order: the lock
    order of every start (quota row, definition, bucket)."""
    metrics.record_workflow_end(execution, ending.status)
    if execution.parent_execution_id:
        request_decision(execution.parent_execution_id)
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
    if name and "${" in name:  # given as an expression (Conductor's): resolved against the run
        name = str(resolve(name, {"workflow": _failed_run_context(execution)}) or "")
    if not name:
        return
    namespace = Namespace.objects.get(pk=execution.namespace_id)
    payload = {
        "workflowId": str(execution.id),
        "executionId": str(execution.id),
        "workflowName": execution.name,
        "status": ending.status,
        "reason": ending.reason,
        "failedTaskNames": list(ending.failed_tasks),
        "input": execution.input,
    }
    try:
        with transaction.atomic():
            start(
                namespace=namespace,
                name=name,
                input=payload,
                correlation_id=execution.correlation_id,
                idempotency_key=f"failure:{execution.id}:{execution.run}",
                hold=True,
            )
    except NotFound:
        log.warning("failureWorkflow %s of execution %s does not exist", name, execution.id)


def _failed_run_context(execution: Execution) -> dict:
    return {
        "input": execution.input,
        "variables": execution.variables,
        "workflowId": str(execution.id),
        "executionId": str(execution.id),
        "correlationId": execution.correlation_id,
        "name": execution.name,
        "workflowType": execution.name,
        "version": execution.version,
    }


def end(execution: Execution, *, status: str, reason: str) -> None:
    """End a locked, active execution from outside the decider (terminate, the
    workflow timeout): cancel its open tasks and its children, then follow up."""
    now = clock.now()
    runs.end(execution, status=status, reason=reason, now=now)
    attempts.cancel_open(
        execution_id=execution.id, run=execution.run, reason=f"execution {status.lower()}: {reason}", now=now
    )
    children = Execution.objects.filter(parent_execution_id=execution.id, status__in=ACTIVE_EXECUTION)
    for child_id in children.values_list("id", flat=True):
        terminate(execution_id=child_id, reason=f"parent {status.lower()}", cascade_from_parent=True)
    after_end(execution, Ending(status, execution.output, reason, tuple(execution.failed_task_names)))


def terminate(*, execution_id: uuid.UUID, reason: str = "", cascade_from_parent: bool = False) -> Execution:
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
        end(execution, status=ExecutionStatus.TERMINATED, reason=reason or "terminated")
        return execution


# --- applying -------------------------------------------------------------


def apply_many(decisions: list[tuple[Execution, Decision]], now: dt.datetime) -> None:
    """Apply several decisions with as few statements as the common case
    allows; the rarer parts (children, endings) go one by one."""
    if len(decisions) == 1:
        apply(*decisions[0], now)
        return
    _insert_rows_of(decisions)
    # Executions whose changes are the same (many runs completing alike) are
    # updated by one statement per distinct change.
    groups: dict[tuple, tuple[dict, list[uuid.UUID]]] = {}
    for execution, decision in decisions:
        attempts.apply_decided(decision.updated, now)
        _settle(execution, decision)
        updates = _execution_fields(execution, decision, now)
        for name, value in updates.items():
            setattr(execution, name, value)
        if updates:
            key = sql.same_values_key(updates)
            groups.setdefault(key, (updates, []))[1].append(execution.id)
    runs.arm_many((e.id, t) for e, d in decisions for t in d.timers)
    for updates, ids in groups.values():
        runs.update_many(ids, updates, now=now)
    for execution, decision in decisions:
        _follow_up(execution, decision)
    _notify_ready(decisions)


def _insert_rows_of(decisions: list[tuple[Execution, Decision]]) -> None:
    attempts.insert(_task_of(e, row) for e, d in decisions for row in d.created)


def _notify_ready(decisions: list[tuple[Execution, Decision]]) -> None:
    """One notice per queue, with how many of its tasks are available now
    (as many pollers wake; a worker task's delayed retry is found by the
    pollers' periodic look when its delay ends). A system task's notice is
    sent delayed or not: the Celery hand-off sends its message for then."""
    ready = collections.Counter(
        (e.namespace_id, row.queue, row.kind)
        for e, d in decisions
        for row in d.created
        if row.queue and (row.kind == "system" or row.available_at <= row.scheduled_at)
    )
    for (namespace_id, queue, kind), count in ready.items():
        notify.task_ready(namespace_id, queue, kind, count)


def apply(execution: Execution, decision: Decision, now: dt.datetime, *, execution_fields: bool = True) -> list[Task]:
    """Apply one decision; the rows it inserted."""
    inserted = [_task_of(execution, row) for row in decision.created]
    attempts.insert(inserted)
    attempts.apply_decided(decision.updated, now)
    _settle(execution, decision)
    runs.arm(execution.id, decision.timers)
    fields = _execution_fields(execution, decision, now) if execution_fields else {}
    if fields:
        runs.update(execution, fields, now=now)
    _follow_up(execution, decision)
    _notify_ready([(execution, decision)])
    return inserted


def _settle(execution: Execution, decision: Decision) -> None:
    """Settled fork branches, after the rows are inserted (a branch may
    start and finish within the decision)."""
    attempts.settle(decision.settle)
    attempts.unsettle(execution_id=execution.id, run=execution.run, forks=decision.unsettle)


def _follow_up(execution: Execution, decision: Decision) -> None:
    """The parts of a decision that reach beyond the execution's own rows."""
    metrics.record_decision(decision, execution)
    for task_id, message_ids in decision.consumed_messages.items():
        Message.objects.filter(pk__in=message_ids, consumed_by__isnull=True).update(consumed_by=task_id)
    for child in decision.children:
        start_child(parent=execution, request=child)
    for child_id in decision.cancel_children:
        terminate(execution_id=child_id, reason="parent task canceled", cascade_from_parent=True)
    if decision.ending is not None:
        after_end(execution, decision.ending)
    elif decision.again:
        # Handed to the decider role, not decided after this commit here: the
        # request that caused this decision has had its share.
        runs.request_decision(execution.id, now=clock.now(), here=False)


def _execution_fields(execution: Execution, decision: Decision, now: dt.datetime) -> dict:
    fields: dict = {}
    if decision.evaluated:
        fields["evaluated_at"] = now
        if decision.deadline is not None:
            fields["deadline"] = decision.deadline
    if decision.variables is not None:
        fields["variables"] = decision.variables
    if decision.ending is not None:
        ending = decision.ending
        fields.update(
            status=ending.status,
            output=ending.output,
            reason_for_incompletion=ending.reason,
            failed_task_names=list(ending.failed_tasks),
            ended_at=now,
        )
    return fields


def _task_of(execution: Execution, row: Row) -> Task:
    return sql.new(
        Task,
        id=row.id,
        execution_id=execution.id,
        namespace_id=execution.namespace_id,
        run=execution.run,
        seq=row.seq,
        ref=row.ref,
        path=row.path,
        type=row.type,
        kind=row.kind,
        task_def_name=row.task_def_name,
        queue=row.queue,
        status=row.status,
        optional=row.optional,
        attempt=row.attempt,
        priority=execution.priority,
        policy=row.policy,
        input=row.input,
        output=row.output,
        reason_for_incompletion=row.reason,
        idempotency_key=idempotency_key(execution, row.path),
        lease_seconds=lease_seconds(row.policy),
        scheduled_at=row.scheduled_at,
        available_at=row.available_at,
        first_scheduled_at=row.first_scheduled_at,
        started_at=row.started_at,
        ended_at=row.ended_at,
        child_execution_id=row.child_execution_id,
    )


def idempotency_key(execution: Execution, path: str) -> str:
    """One key per logical task: the same for every attempt and re-delivery."""
    run = f"/{execution.run}" if execution.run > 1 else ""
    return f"{execution.id}{run}:{path}"


# Decisions requested in this process are made right after the commit that
# asked (runs.request_decision), with the request row as the fallback.
runs.on_decision_requested(decide_now)
