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

from executions import attempts, executor, runs
from executions.decider import deadline_reason
from executions.models import (
    ACTIVE_EXECUTION,
    OPEN_TASK,
    Execution,
    ExecutionStatus,
    Task,
    TaskStatus,
    Timer,
    TimerKind,
)
from nodeflow import claims, clock, metrics, transactions

log = logging.getLogger(__name__)

LEASE_CANDIDATES = 20
# A timer whose handler raised is tried again this much later, not hot.
FAILED_TIMER_BACKOFF_S = 5.0


def fire_next_timer() -> bool:
    """Fire one due timer; False when none is due. A handler that raises
    leaves its timer due again FAILED_TIMER_BACKOFF_S later (``nodeflow.claims``)."""
    now = clock.now()
    return claims.claim_one(
        claim=lambda: runs.claim_due_timer(now),
        work=lambda timer: _fire(timer, now),
        back_off=lambda timer, _: runs.postpone_timer(timer, due_at=now + dt.timedelta(seconds=FAILED_TIMER_BACKOFF_S)),
        what=lambda timer: f"timer {timer.id} ({timer.kind}) of {timer.execution_id}",
    )


def _fire(timer: Timer, now: dt.datetime) -> None:
    execution = runs.lock(timer.execution_id)
    if execution is not None and execution.status in ACTIVE_EXECUTION:
        HANDLERS[timer.kind](execution, timer, now)
    runs.drop_timer(timer)


def _timed_out(execution: Execution, task: Task, reason: str, now: dt.datetime, *, timeout: str) -> None:
    policy = task.policy.get("timeoutPolicy") or "RETRY"
    metrics.record_timeout(timeout, policy, execution.namespace_id)
    if policy == "ALERT_ONLY":
        log.warning("ALERT_ONLY: task %s of %s: %s", task.path, execution.id, reason)
        return
    attempts.time_out(task, reason=reason, now=now)
    if task.child_execution_id:
        executor.terminate(execution_id=task.child_execution_id, reason=reason, cascade_from_parent=True)
    if execution.status == ExecutionStatus.RUNNING:
        executor.decide_or_defer(execution)


def _workflow_timeout(execution: Execution, timer: Timer, now: dt.datetime) -> None:
    """The deadline (the hard budget, own or inherited) ends the execution
    TIMED_OUT; an ALERT_ONLY workflow's own timeout, which sets no deadline,
    only alerts. A timer armed for an earlier run (before a retry or a
    restart re-armed) finds its deadline gone and does nothing."""
    if execution.deadline is not None and execution.deadline <= now:
        metrics.record_timeout("workflow", "TIME_OUT_WF", execution.namespace_id)
        executor.end(execution, status=ExecutionStatus.TIMED_OUT, reason=deadline_reason(execution.deadline))
        return
    workflow = executor.workflow_of(execution)
    if workflow.get("timeoutPolicy") == "ALERT_ONLY" and _armed_by_this_run(execution, workflow, timer):
        metrics.record_timeout("workflow", "ALERT_ONLY", execution.namespace_id)
        log.warning(
            "ALERT_ONLY: execution %s passed its timeoutSeconds (%s s)", execution.id, workflow.get("timeoutSeconds")
        )


def _armed_by_this_run(execution: Execution, workflow: dict, timer: Timer) -> bool:
    """An ALERT_ONLY timer is due timeoutSeconds after the first evaluation
    of the run that armed it (a retry or restart evaluates afresh)."""
    if execution.evaluated_at is None:
        return False
    due = execution.evaluated_at + dt.timedelta(seconds=float(workflow.get("timeoutSeconds") or 0))
    return abs(timer.due_at - due) < dt.timedelta(milliseconds=1)


def _schedule_to_start(execution: Execution, timer: Timer, now: dt.datetime) -> None:
    task = Task.objects.filter(pk=timer.task_id, status=TaskStatus.SCHEDULED).first()
    if task is None:
        return  # picked up (or ended) in time
    seconds = float(task.policy.get("scheduleToStartTimeout") or 0)
    if task.available_at + dt.timedelta(seconds=seconds) > now:
        return  # a worker took it and put it back for later (callbackAfterSeconds)
    if task.held:
        # Paused: no worker could take it. Count again from now instead of
        # timing out a task the operator held back.
        runs.arm_one(
            kind=TimerKind.SCHEDULE_TO_START,
            execution_id=execution.id,
            task_id=task.id,
            due_at=now + dt.timedelta(seconds=seconds),
        )
        return
    _timed_out(
        execution,
        task,
        f"scheduleToStartTimeout ({seconds:g} s): no worker picked the task up",
        now,
        timeout="scheduleToStart",
    )


def _task_total(execution: Execution, timer: Timer, now: dt.datetime) -> None:
    first = Task.objects.filter(pk=timer.task_id).first()
    if first is None:
        return
    latest = Task.objects.filter(execution_id=execution.id, run=first.run, path=first.path).order_by("-attempt").first()
    # A manual retry starts a new budget with a timer of its own.
    if latest is not None and latest.status in OPEN_TASK and latest.first_scheduled_at == first.first_scheduled_at:
        seconds = float(latest.policy.get("timeoutSeconds") or 0)
        _timed_out(
            execution, latest, f"timeoutSeconds ({seconds:g} s) over all attempts exceeded", now, timeout="total"
        )


def _wait(execution: Execution, timer: Timer, now: dt.datetime) -> None:
    # WAIT timers belong to WAIT tasks.
    if attempts.complete_waiting(timer.task_id, type_="WAIT", now=now) and execution.status == ExecutionStatus.RUNNING:
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
    with transactions.outermost():
        execution = runs.lock(execution_id)
        task = Task.objects.filter(pk=task_id, status=TaskStatus.IN_PROGRESS, lease_expires_at__lte=now).first()
        if execution is not None and task is not None:
            _expired(execution, task, now)
    return True


# An ALERT_ONLY attempt that has alerted runs on under a lease this long at
# least: its expiry only says the alert was raised, and is not raised again.
ALERTED_LEASE_S = 300.0


def _expired(execution: Execution, task: Task, now: dt.datetime) -> None:
    policy = task.policy
    start_to_close = float(policy.get("startToCloseTimeout") or 0)
    heartbeat = float(policy.get("heartbeatTimeout") or 0)
    started = task.started_at or now
    alert_only = policy.get("timeoutPolicy") == "ALERT_ONLY"
    deadline = started + dt.timedelta(seconds=start_to_close) if start_to_close > 0 else None
    silent_since = (task.last_heartbeat_at or started) + dt.timedelta(seconds=heartbeat)
    if deadline is not None and now >= deadline and not (alert_only and _alerted(task, deadline)):
        timeout, reason = "startToClose", f"startToCloseTimeout ({start_to_close:g} s) exceeded"
    elif heartbeat > 0 and not (alert_only and _alerted(task, silent_since)):
        since = task.last_heartbeat_at.isoformat() if task.last_heartbeat_at else "the start"
        timeout, reason = "heartbeat", f"heartbeatTimeout ({heartbeat:g} s): no heartbeat since {since}"
    elif alert_only and (deadline is not None or heartbeat > 0):
        _run_on(task, now, heartbeat or start_to_close)  # alerted already: once per timeout
        return
    else:
        attempts.redeliver(task, now=now, held=execution.status == ExecutionStatus.PAUSED)
        return
    if alert_only:
        _run_on(task, now, heartbeat or start_to_close)
    _timed_out(execution, task, reason, now, timeout=timeout)


def _alerted(task: Task, due: dt.datetime) -> bool:
    """Whether the lease that expired is one the sweeper extended after the
    ALERT_ONLY alert for the timeout due at ``due``: a lease a poll or a
    heartbeat gives never runs past that timeout."""
    return task.lease_expires_at is not None and task.lease_expires_at > due


def _run_on(task: Task, now: dt.datetime, period_s: float) -> None:
    """An ALERT_ONLY attempt runs on past its timeout: its lease is extended
    (a heartbeat may shorten it again) and the alert is not repeated."""
    attempts.extend_alerting(task, until=now + dt.timedelta(seconds=max(period_s, ALERTED_LEASE_S)))
