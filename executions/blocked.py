"""``blockedBy``: why a task that is not yet IN_PROGRESS is not running.

Answers from committed state only, with the control that holds the task,
its limit and current use, since when, and until when if that is known.
"""
from __future__ import annotations

import datetime as dt

from executions.models import Task, TaskStatus
from nodeflow import clock


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def _reason(control: str, *, since: dt.datetime, until: dt.datetime | None = None,
            limit: int | None = None, current: int | None = None) -> dict:
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
        return _reason("retryBackoff", since=task.scheduled_at, until=task.available_at)
    return None
