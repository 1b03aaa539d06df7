"""Waiting tasks completed from outside: inbound webhooks (WAIT_FOR_WEBHOOK)
and messages posted to an execution (PULL_WORKFLOW_MESSAGES).

HUMAN tasks complete through the result route without a lease (see
``executions.results``); WAIT through its timer.
"""

from __future__ import annotations

import uuid
from typing import Any

from executions import attempts, executor, runs
from executions.models import ExecutionStatus, Message, Task, TaskStatus
from metadata.expressions import ExpressionError, parse_path
from nodeflow import clock, transactions
from nodeflow.errors import NotFound
from nodeflow.models import Namespace

_ABSENT = object()


def matches(criteria: dict, body: dict) -> bool:
    """``{"$.order.id": 42}``: every path in the body holds the given value."""
    for path, expected in criteria.items():
        text = path[2:] if path.startswith("$.") else path.lstrip("$")
        try:
            found = _at(body, parse_path(text)) if text else body
        except ExpressionError:
            return False
        if not _same(found, expected):
            return False
    return True


def _at(value: Any, path: tuple) -> Any:
    """The value at ``path``, or _ABSENT. (``lookup`` gives None for a missing
    step, so ``{"$.id": null}`` would match every body without an id.)"""
    for part in path:
        if isinstance(part, int):
            if not isinstance(value, list) or not -len(value) <= part < len(value):
                return _ABSENT
        elif not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _same(found: Any, expected: Any) -> bool:
    # Python has True == 1; JSON does not.
    return found is not _ABSENT and isinstance(found, bool) == isinstance(expected, bool) and found == expected


def deliver_webhook(*, namespace: Namespace, name: str, body: dict[str, Any]) -> list[uuid.UUID]:
    """Complete every waiting WAIT_FOR_WEBHOOK task named ``name`` whose
    ``matches`` the body satisfies; returns their ids."""
    candidates = Task.objects.filter(
        namespace=namespace, type="WAIT_FOR_WEBHOOK", task_def_name=name, status=TaskStatus.IN_PROGRESS
    ).values_list("id", "execution_id", "input")
    completed = []
    for task_id, execution_id, inputs in candidates:
        if matches(inputs.get("matches") or {}, body) and _complete(task_id, execution_id, body):
            completed.append(task_id)
    return completed


def _complete(task_id: uuid.UUID, execution_id: uuid.UUID, body: dict) -> bool:
    with transactions.outermost():
        execution = runs.lock(execution_id)
        if execution is None:
            return False  # deleted since its task was read, and the task with it
        updated = attempts.complete_waiting(task_id, type_="WAIT_FOR_WEBHOOK", now=clock.now(), output=body)
        if updated and execution.status == ExecutionStatus.RUNNING:
            executor.decide_or_defer(execution)
        return updated


def post_message(*, execution_id: uuid.UUID, payload: Any) -> Message:
    """Store a message for the execution's PULL_WORKFLOW_MESSAGES tasks and
    decide it (a waiting pull may complete)."""
    with transactions.outermost():
        execution = runs.lock(execution_id)
        if execution is None:
            raise NotFound(f"execution '{execution_id}' does not exist")
        message = Message.objects.create(execution=execution, payload=payload, created_at=clock.now())
        if execution.status == ExecutionStatus.RUNNING:
            executor.decide_or_defer(execution)
    return message
