"""Durable timers and lease expiry: what the sweeper fires.

Each timer is claimed with SKIP LOCKED, acted on under its execution's row
lock and deleted in the same transaction, so it fires exactly once however
many sweepers run; a sweeper killed mid-way leaves it committed and due. Each
handler re-checks that what it is about still holds (the task is still open,
the deadline has not moved) and otherwise does nothing.
"""
from __future__ import annotations

import datetime as dt
import logging
import random

from django.db import transaction

from executions import executor, lifecycle, notify
from executions.models import ACTIVE_EXECUTION, Execution, ExecutionStatus, Task, TaskStatus, Timer, TimerKind
from nodeflow import clock

log = logging.getLogger(__name__)

OPEN = (TaskStatus.SCHEDULED, TaskStatus.IN_PROGRESS)
LEASE_CANDIDATES = 20


def fire_next_timer() -> bool:
    """Fire one due timer; False when none is due."""
    now = clock.now()
    with transaction.atomic():
        timer = (
            Timer.objects.filter(due_at__lte=now).order_by("due_at").select_for_update(skip_locked=True).first()
        )
        if timer is None:
            return False
        execution = executor.lock_execution(timer.execution_id)
        if execution is not None and execution.status in ACTIVE_EXECUTION:
            HANDLERS[timer.kind](execution, timer, now)
        timer.delete()
    return True


def _timed_out(execution: Execution, task: Task, reason: str, now: dt.datetime) -> None:
    if task.policy.get("timeoutPolicy") == "ALERT_ONLY":
        log.warning("ALERT_ONLY: task %s of %s: %s", task.path, execution.id, reason)
        return
    Task.objects.filter(pk=task.id, status__in=OPEN).update(
        status=TaskStatus.TIMED_OUT, reason_for_incompletion=reason, ended_at=now, lease_token=None
    )
    if task.child_execution_id:
        lifecycle.terminate_execution(execution_id=task.child_execution_id, reason=reason, cascade_from_parent=True)
    if execution.status == ExecutionStatus.RUNNING:
        executor.decide_or_defer(execution)


def _workflow_timeout(execution: Execution, timer: Timer, now: dt.datetime) -> None:
    if execution.deadline is None or execution.deadline > now:
        return  # re-armed or cleared since (e.g. a restart)
    reason = f"workflow timed out: deadline {execution.deadline.isoformat()} passed"
    if executor.workflow_of(execution).get("timeoutPolicy") == "ALERT_ONLY":
        log.warning("ALERT_ONLY: execution %s %s", execution.id, reason)
        return
    lifecycle.end_execution(execution, status=ExecutionStatus.TIMED_OUT, reason=reason)


def _schedule_to_start(execution: Execution, timer: Timer, now: dt.datetime) -> None:
    task = Task.objects.filter(pk=timer.task_id, status=TaskStatus.SCHEDULED).first()
    if task is not None:
        seconds = task.policy.get("scheduleToStartTimeout")
        _timed_out(execution, task, f"scheduleToStartTimeout ({seconds} s): no worker picked the task up", now)


def _task_total(execution: Execution, timer: Timer, now: dt.datetime) -> None:
    first = Task.objects.filter(pk=timer.task_id).first()
    if first is None:
        return
    latest = Task.objects.filter(execution_id=execution.id, run=first.run, path=first.path).order_by("-attempt").first()
    if latest is not None and latest.status in OPEN:
        seconds = latest.policy.get("timeoutSeconds")
        _timed_out(execution, latest, f"timeoutSeconds ({seconds} s) over all attempts exceeded", now)


def _wait(execution: Execution, timer: Timer, now: dt.datetime) -> None:
    updated = Task.objects.filter(pk=timer.task_id, status=TaskStatus.IN_PROGRESS).update(
        status=TaskStatus.COMPLETED, ended_at=now
    )
    if updated and execution.status == ExecutionStatus.RUNNING:
        executor.decide_or_defer(execution)


def _decide(execution: Execution, timer: Timer, now: dt.datetime) -> None:
    if execution.status == ExecutionStatus.RUNNING:
        executor.decide_or_defer(execution)


HANDLERS = {
    TimerKind.WORKFLOW_TIMEOUT: _workflow_timeout,
    TimerKind.SCHEDULE_TO_START: _schedule_to_start,
    TimerKind.TASK_TOTAL: _task_total,
    TimerKind.WAIT: _wait,
    TimerKind.DECIDE: _decide,
}


# --- lease expiry -----------------------------------------------------------

def expire_next_lease() -> bool:
    """Handle one expired lease; False when none has expired."""
    now = clock.now()
    candidates = list(
        Task.objects.filter(status=TaskStatus.IN_PROGRESS, lease_expires_at__lte=now)
        .order_by("lease_expires_at")
        .values_list("id", "execution_id")[:LEASE_CANDIDATES]
    )
    if not candidates:
        return False
    # Several sweepers spread over the candidates instead of queueing on one.
    task_id, execution_id = random.choice(candidates)
    with transaction.atomic():
        execution = executor.lock_execution(execution_id)
        task = Task.objects.filter(pk=task_id, status=TaskStatus.IN_PROGRESS, lease_expires_at__lte=now).first()
        if execution is not None and task is not None:
            _expired(execution, task, now)
    return True


def _expired(execution: Execution, task: Task, now: dt.datetime) -> None:
    policy = task.policy
    start_to_close = float(policy.get("startToCloseTimeout") or 0)
    heartbeat = float(policy.get("heartbeatTimeout") or 0)
    started = task.started_at or now
    if start_to_close > 0 and now >= started + dt.timedelta(seconds=start_to_close):
        reason = f"startToCloseTimeout ({start_to_close:g} s) exceeded"
    elif heartbeat > 0:
        reason = f"heartbeatTimeout ({heartbeat:g} s): no heartbeat since {task.last_heartbeat_at.isoformat() if task.last_heartbeat_at else 'the start'}"
    else:
        _redeliver(execution, task)
        return
    if policy.get("timeoutPolicy") == "ALERT_ONLY":
        log.warning("ALERT_ONLY: task %s of %s: %s", task.path, execution.id, reason)
        Task.objects.filter(pk=task.id).update(
            lease_expires_at=now + dt.timedelta(seconds=heartbeat or start_to_close or 60)
        )
        return
    _timed_out(execution, task, reason, now)


def _redeliver(execution: Execution, task: Task) -> None:
    """The worker went silent and no timeout applies: offer the same attempt
    again (same idempotency key; the old lease token is void)."""
    Task.objects.filter(pk=task.id, status=TaskStatus.IN_PROGRESS).update(
        status=TaskStatus.SCHEDULED, lease_token=None, lease_expires_at=None, available_at=clock.now(),
        held=execution.status == ExecutionStatus.PAUSED,
    )
    notify.task_ready(execution.namespace_id, task.queue, task.kind)
