"""The executor: load an execution's state under its row lock, ask the pure
decider what to do, and apply the decision in the same transaction.

Lock order, everywhere: an execution before its tasks, a parent before its
children. A child never locks its parent: when it ends it only queues a
decide request for the parent. That order is what keeps deciders, result
handlers, sweepers and terminate free of deadlocks.
"""
from __future__ import annotations

import datetime as dt
import functools
import logging
import uuid

from django.conf import settings
from django.db import transaction

from executions import attempts, lifecycle, notify, runs, sql
from executions.decider import decide
from executions.leases import lease_seconds
from executions.snapshots import snapshot_body, workflow_of
from executions.models import DecideRequest, Execution, ExecutionStatus, Message, Task
from executions.retry import BUDGET_WINDOW_S
from executions.state import FAILURE, Child, Decision, Row, Snapshot
from metadata import taskdefs
from metadata.tree import walk_tasks
from nodeflow import clock, metrics

log = logging.getLogger(__name__)

# A decide request whose decision keeps failing is pushed back this far, not retried hot.
FAILED_REQUEST_BACKOFF_S = 5.0


# What deciding reads of an execution's row and of its run's task rows (and
# what a result checks and writes). A batch of results reads only these; the
# other columns are deferred (see sql.to_model), saving their transfer and
# conversion on the hot path.
DECIDING_EXECUTION_FIELDS = (
    "id", "namespace", "name", "version", "snapshot", "workflow_key", "status", "awaiting_admission",
    "admission_key", "input", "variables", "correlation_id", "priority", "parent_execution", "parent_task_id",
    "path_prefix", "depth", "run", "evaluated_at", "deadline",
)
DECIDING_TASK_FIELDS = (
    "id", "execution", "namespace", "run", "seq", "ref", "path", "type", "kind", "task_def_name", "queue", "status",
    "optional", "attempt", "policy", "input", "output", "reason_for_incompletion", "scheduled_at", "available_at",
    "started_at", "ended_at", "first_scheduled_at", "lease_token", "child_execution_id", "logs",
)


def read_run(execution: Execution, *, fields: tuple[str, ...] | None = None) -> list[Task]:
    """The current run's task rows, in seq order (what the decider reads)."""
    return sql.rows(
        Task,
        f"SELECT {sql.columns(Task, fields=fields)} FROM {sql.table(Task)} WHERE execution_id = %s AND run = %s ORDER BY seq",
        [sql.prep(Task, "execution", execution.id), execution.run], fields=fields,
    )


def read_runs(executions: list[Execution], *, fields: tuple[str, ...] | None = None) -> dict[uuid.UUID, list[Task]]:
    """``read_run`` of several executions, in one query."""
    if not executions:
        return {}
    if len(executions) == 1:
        return {executions[0].id: read_run(executions[0], fields=fields)}
    run_of = {e.id: e.run for e in executions}
    found: dict[uuid.UUID, list[Task]] = {e.id: [] for e in executions}
    condition, params = sql.any_of(Task, "execution", run_of)
    statement = f"SELECT {sql.columns(Task, fields=fields)} FROM {sql.table(Task)} WHERE {condition} ORDER BY seq"
    for task in sql.rows(Task, statement, params, fields=fields):
        if task.run == run_of[task.execution_id]:
            found[task.execution_id].append(task)
    return found


def to_row(task: Task) -> Row:
    return Row(
        id=task.id, path=task.path, ref=task.ref, type=task.type, kind=task.kind,
        task_def_name=task.task_def_name, status=task.status, attempt=task.attempt, seq=task.seq,
        scheduled_at=task.scheduled_at, available_at=task.available_at,
        first_scheduled_at=task.first_scheduled_at, input=task.input, output=task.output,
        reason=task.reason_for_incompletion, optional=task.optional, policy=task.policy, queue=task.queue,
        started_at=task.started_at, ended_at=task.ended_at, child_execution_id=task.child_execution_id,
    )


def load_snapshot(execution: Execution, now: dt.datetime, tasks: list[Task] | None = None) -> Snapshot:
    """Everything the decider may know about ``execution``; ``tasks`` are its
    current run's rows when the caller has read them already."""
    if tasks is None:
        tasks = read_run(execution)
    rows = [to_row(task) for task in tasks]
    return Snapshot(
        execution_id=execution.id, status=execution.status, workflow=workflow_of(execution),
        workflows=snapshot_body(execution.snapshot_id)["workflows"], input=execution.input,
        variables=execution.variables, rows=rows, now=now,
        task_defs=taskdefs.policies(execution.namespace_id), children=_children(rows), messages=_messages(execution, rows),
        depth=execution.depth, path_prefix=execution.path_prefix, run=execution.run,
        next_seq=max((task.seq for task in tasks), default=-1) + 1,
        evaluated_at=execution.evaluated_at, deadline=execution.deadline,
        correlation_id=execution.correlation_id, name=execution.name, version=execution.version,
        parent_execution_id=execution.parent_execution_id, max_fork_items=settings.NODE_FLOW_MAX_FORK_ITEMS,
        budgets=_budgets(execution, rows, now),
    )


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
            namespace_id=execution.namespace_id, task_def_name=name, kind__in=("worker", "system"),
            started_at__gte=since,
        )
        budgets[name] = (window.count(), window.filter(attempt__gt=1).count())
    return budgets


# --- deciding -------------------------------------------------------------

def decide_locked(execution: Execution) -> Decision | None:
    """Decide an execution whose row the caller holds locked (and apply)."""
    if execution.status != ExecutionStatus.RUNNING or execution.awaiting_admission:
        return None
    now = clock.now()
    decision = decide(load_snapshot(execution, now))
    apply(execution, decision, now)
    return decision


def decide_new(execution: Execution) -> Decision:
    """Insert a new execution with its first decision already applied: the
    decision is made before the row exists (there are no tasks to read), so
    the row goes in once, with its sequence and deadline set. With an
    idempotency key the insert runs in a savepoint: a concurrent start with
    the same key raises IntegrityError and leaves the transaction usable."""
    now = clock.now()
    decision = decide(_new_snapshot(execution, now))
    for name, value in _execution_fields(execution, decision, now).items():
        setattr(execution, name, value)
    runs.insert(execution)
    apply(execution, decision, now, execution_fields=False)
    return decision


def _new_snapshot(execution: Execution, now: dt.datetime) -> Snapshot:
    return Snapshot(
        execution_id=execution.id, status=execution.status, workflow=workflow_of(execution),
        workflows=snapshot_body(execution.snapshot_id)["workflows"], input=execution.input,
        variables=execution.variables, rows=[], now=now, task_defs=taskdefs.policies(execution.namespace_id),
        depth=execution.depth, path_prefix=execution.path_prefix, deadline=execution.deadline,
        correlation_id=execution.correlation_id, name=execution.name, version=execution.version,
        parent_execution_id=execution.parent_execution_id, max_fork_items=settings.NODE_FLOW_MAX_FORK_ITEMS,
    )


def decide_now(execution_id: uuid.UUID) -> Decision | None:
    """Lock, decide and apply, in a transaction of its own (or the caller's)."""
    with transaction.atomic():
        execution = runs.lock(execution_id)
        if execution is None:
            return None
        DecideRequest.objects.filter(execution_id=execution_id).delete()
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
            decisions.append((execution, decide(load_snapshot(execution, now, tasks[execution.id]))))
        except Exception:  # noqa: BLE001 - a task result must not be lost to a decider bug
            log.exception("decision for %s failed; deferred to the decider role", execution.id)
            request_decision(execution.id)
    apply_many(decisions, now)


def request_decision(execution_id: uuid.UUID) -> None:
    """Queue "decide this execution" durably (idempotent), and decide it in
    this process right after the caller commits. The request row is the
    durable fallback: a decider role picks it up if this process dies first
    or the decision fails. (No NOTIFY: every listening session in the
    database would pay a transaction for each one.)"""
    DecideRequest.objects.bulk_create(
        [DecideRequest(execution_id=execution_id, due_at=clock.now())],
        update_conflicts=True, unique_fields=["execution"], update_fields=["due_at"],
    )
    transaction.on_commit(functools.partial(decide_now, execution_id), robust=True)
    notify.decider_wakeup()


def decide_next_request() -> bool:
    """Claim one due decide request (SKIP LOCKED), decide its execution and
    delete the request in the same transaction; False when none is due. A
    decision that raises pushes its request back FAILED_REQUEST_BACKOFF_S
    (logged), instead of retrying it hot."""
    now = clock.now()
    execution_id = None
    try:
        with transaction.atomic():
            request = DecideRequest.objects.filter(due_at__lte=now).order_by("due_at").select_for_update(
                skip_locked=True).first()
            if request is None:
                return False
            execution_id = request.execution_id
            execution = runs.lock(execution_id)
            DecideRequest.objects.filter(pk=execution_id).delete()
            if execution is not None:
                decide_locked(execution)
    except Exception:
        if execution_id is None:
            raise
        log.exception("deciding %s failed; retrying in %s s", execution_id, FAILED_REQUEST_BACKOFF_S)
        DecideRequest.objects.filter(execution_id=execution_id).update(
            due_at=clock.now() + dt.timedelta(seconds=FAILED_REQUEST_BACKOFF_S))
    return True


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
    ready = {(e.namespace_id, row.queue, row.kind) for e, d in decisions for row in d.created if row.queue}
    for namespace_id, queue, kind in ready:
        notify.task_ready(namespace_id, queue, kind)


def apply(execution: Execution, decision: Decision, now: dt.datetime, *, execution_fields: bool = True) -> None:
    attempts.insert(_task_of(execution, row) for row in decision.created)
    attempts.apply_decided(decision.updated, now)
    runs.arm(execution.id, decision.timers)
    fields = _execution_fields(execution, decision, now) if execution_fields else {}
    if fields:
        runs.update(execution, fields, now=now)
    _follow_up(execution, decision)
    _notify_ready([(execution, decision)])


def _follow_up(execution: Execution, decision: Decision) -> None:
    """The parts of a decision that reach beyond the execution's own rows."""
    metrics.record_decision(decision)
    for task_id, message_ids in decision.consumed_messages.items():
        Message.objects.filter(pk__in=message_ids, consumed_by__isnull=True).update(consumed_by=task_id)
    for child in decision.children:
        lifecycle.start_child(parent=execution, request=child)
    for child_id in decision.cancel_children:
        lifecycle.terminate_execution(execution_id=child_id, reason="parent task canceled", cascade_from_parent=True)
    if decision.ending is not None:
        lifecycle.after_end(execution, decision.ending)


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
        fields.update(status=ending.status, output=ending.output, reason_for_incompletion=ending.reason,
                      failed_task_names=list(ending.failed_tasks), ended_at=now)
    return fields


def _task_of(execution: Execution, row: Row) -> Task:
    return Task(
        id=row.id, execution_id=execution.id, namespace_id=execution.namespace_id, run=execution.run,
        seq=row.seq, ref=row.ref, path=row.path, type=row.type, kind=row.kind,
        task_def_name=row.task_def_name, queue=row.queue, status=row.status, optional=row.optional,
        attempt=row.attempt, priority=execution.priority, policy=row.policy, input=row.input,
        output=row.output, reason_for_incompletion=row.reason,
        idempotency_key=idempotency_key(execution, row.path), lease_seconds=lease_seconds(row.policy),
        scheduled_at=row.scheduled_at, available_at=row.available_at, first_scheduled_at=row.first_scheduled_at,
        started_at=row.started_at, ended_at=row.ended_at, child_execution_id=row.child_execution_id,
    )


def idempotency_key(execution: Execution, path: str) -> str:
    """One key per logical task: the same for every attempt and re-delivery."""
    run = f"/{execution.run}" if execution.run > 1 else ""
    return f"{execution.id}{run}:{path}"
