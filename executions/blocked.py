"""``blockedBy``: why a task that is not yet IN_PROGRESS is not running.

Answers from committed state only, with the control that holds the task,
its limit and current use, since when, and until when if that is known.
"""

from __future__ import annotations

import datetime as dt

from executions import executor
from executions.models import OPEN_TASK, Execution, ExecutionStatus, Task, TaskStatus
from nodeflow import clock
from quotas import admission, diagnostics, starts
from quotas.gate import open_gate


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def _reason(
    control: str,
    *,
    since: dt.datetime,
    until: dt.datetime | None = None,
    limit: int | None = None,
    current: int | None = None,
) -> dict:
    body = {"control": control, "limit": limit, "current": current, "since": _iso(since)}
    if until is not None:
        body["until"] = _iso(until)
    return body


def blocked_by(task: Task, *, now: dt.datetime | None = None, context: dict | None = None) -> dict | None:
    """None when the task is running, finished, or free to be dispatched now."""
    if task.status != TaskStatus.SCHEDULED:
        return None
    now = now or clock.now()
    if task.held:
        return _reason("paused", since=task.scheduled_at)
    if task.available_at > now:
        return _circuit_open(task) or _reason("retryBackoff", since=task.scheduled_at, until=task.available_at)
    if task.kind in ("worker", "system") and task.queue:
        return _queue_blocker(task, now, {} if context is None else context)
    return None


def _queue_blocker(task: Task, now: dt.datetime, context: dict) -> dict | None:
    """A ready worker or system task waits on its task definition's controls,
    then for a worker polling its queue, or a system-task runner with a free
    thread (docs/controls.md). ``context`` shares one look per definition,
    and one at the runners, among the tasks of one view."""
    key = ("controls", task.namespace_id, task.task_def_name)
    if key not in context:
        context[key] = open_gate(
            namespace_id=task.namespace_id, queue=task.task_def_name, want=1, now=now, lock=False
        ).blocker
    blocker, since = context[key], max(task.scheduled_at, task.available_at)
    if blocker is not None:
        return _reason(blocker.control, since=since, until=blocker.until, limit=blocker.limit, current=blocker.current)
    if task.kind == "system":
        return _runner_blocker(task, since, now, context)
    key = ("queue", task.namespace_id, task.queue)
    if key not in context:
        context[key] = diagnostics.recent_poll(namespace_id=task.namespace_id, queue=task.queue, now=now)
    return _no_pollers(since, context[key], now)


def _runner_blocker(task: Task, since: dt.datetime, now: dt.datetime, context: dict) -> dict | None:
    """A ready system task its controls let through waits for a runner:
    none polled lately (noPollers), or every thread of those that did is
    busy (runnerCapacity)."""
    key = ("runners", task.namespace_id)
    if key not in context:
        context[key] = diagnostics.runner_use(namespace_id=task.namespace_id, now=now)
    runners = context[key]
    if not runners.threads:
        return _no_pollers(since, runners.last_poll, now)
    if runners.full:
        return _reason("runnerCapacity", since=since, limit=runners.threads, current=runners.in_flight)
    return None


def _no_pollers(since: dt.datetime, last_poll: dt.datetime | None, now: dt.datetime) -> dict | None:
    if last_poll is None or last_poll < now - dt.timedelta(seconds=diagnostics.NO_POLLERS_S):
        return _reason("noPollers", since=max(since, last_poll) if last_poll else since, current=0)
    return None


def execution_blocked_by(
    execution: Execution, *, tasks: list[Task] | None = None, now: dt.datetime | None = None
) -> dict | None:
    """Why a running execution schedules nothing more: it awaits admission
    (``_admission_blocker``), or its open tasks fill ``maxConcurrentTasks``
    while more are ready to start (tasks past the cap have no rows to carry
    it)."""
    if execution.status != ExecutionStatus.RUNNING:
        return None
    if execution.awaiting_admission:
        return _admission_blocker(execution, now or clock.now())
    if tasks is not None:
        return _task_cap(execution, tasks, now or clock.now())
    return None


def _admission_blocker(execution: Execution, now: dt.datetime) -> dict | None:
    """The line an execution awaiting admission stands in, from committed
    state (no locks): its admission key's bucket (``admission:<key>``), or,
    for a start the engine held (a failure workflow), the start control it
    waits on (``quota:<name>``, ``maxConcurrentExecutions``). ``since``:
    when it took its place (a retry or restart lines up anew)."""
    since = admission.waiting_since(execution) or execution.created_at
    if execution.admission_key is not None:
        limit, current = admission.use_of(execution)
        return _reason(f"admission:{execution.admission_key}", since=since, limit=limit, current=current)
    holder = starts.held_by(execution=execution, now=now)
    if holder is None:
        return None
    return _reason(holder.control, since=since, until=holder.until, limit=holder.limit, current=holder.current)


def _task_cap(execution: Execution, tasks: list[Task], now: dt.datetime) -> dict | None:
    cap = int(executor.workflow_of(execution).get("maxConcurrentTasks") or 0)
    open_tasks = [t for t in tasks if t.kind in ("worker", "system") and t.status in OPEN_TASK]
    if not cap or len(open_tasks) < cap:
        return None
    # The decider is pure: ask it, without applying anything, whether it
    # holds a task back for the cap.
    try:
        capped = executor.decision_for(executor.load_snapshot(execution, now, tasks)).capped
    except Exception:  # noqa: BLE001 - a diagnostic must not break the view; the decider role logs it
        return None
    if not capped:
        return None
    since = _full_since([t for t in tasks if t.kind in ("worker", "system")], cap) or min(
        t.scheduled_at for t in open_tasks
    )
    return _reason("maxConcurrentTasks", since=since, limit=cap, current=len(open_tasks))


# A task that ends frees its slot for the next held one, which the decision
# its result causes schedules a few milliseconds later (or the decider role
# soon after): a gap this short does not end a block.
CAP_REFILL_S = 1.0


def _full_since(tasks: list[Task], cap: int) -> dt.datetime | None:
    """When the run's open worker and system tasks last reached ``cap`` and
    have stayed there (the block's start: it does not move with each
    dispatch), from the rows' scheduledAt and endedAt. None if they are
    not at the cap."""
    events = [(t.scheduled_at, 1) for t in tasks] + [(t.ended_at, -1) for t in tasks if t.ended_at is not None]
    events.sort(key=lambda event: (event[0], -event[1]))  # at one instant, openings first
    count, since, dipped_at = 0, None, None
    for at, step in events:
        count += step
        if count >= cap:
            if since is None or (dipped_at is not None and (at - dipped_at).total_seconds() > CAP_REFILL_S):
                since = at
            dipped_at = None
        elif since is not None and dipped_at is None:
            dipped_at = at
    return since if dipped_at is None else None


def _circuit_open(task: Task) -> dict | None:
    """A retry held back by an open circuit breaker: the attempt before it
    failed fast with ``circuitOpen`` in its output (executions.system_tasks.runner)."""
    if task.kind != "system" or task.attempt < 2:
        return None
    previous = (
        Task.objects.filter(execution_id=task.execution_id, run=task.run, path=task.path, attempt=task.attempt - 1)
        .values_list("output", "ended_at")
        .first()
    )
    key = previous[0].get("circuitOpen") if previous and isinstance(previous[0], dict) else None
    if not key:
        return None
    return _reason(f"circuitOpen:{key}", since=previous[1] or task.scheduled_at, until=task.available_at)
