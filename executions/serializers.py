"""Request and response shapes for executions and the worker API (SPEC §6–§7)."""

from __future__ import annotations

import datetime as dt
import functools

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from drf_spectacular.utils import extend_schema_field
from rest_framework import ISO_8601, serializers
from rest_framework.settings import api_settings

from executions.blocked import blocked_by, execution_blocked_by
from executions.models import Execution, ExecutionStatus, Task, TaskStatus
from nodeflow.fields import (
    EnumField,
    NameField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
)

MAX_POLL_COUNT = 100
MAX_POLL_WAIT_S = 30
MAX_BATCH_RESULTS = 100
MAX_PRIORITY = 99


@extend_schema_field({"type": "object", "additionalProperties": {}})
class JSONObjectField(serializers.JSONField):
    default_error_messages = {"invalid": "must be a JSON object"}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("invalid")
        return super().to_internal_value(data)


_DATETIME = serializers.DateTimeField()  # stateless when rendering; one, not one per call


def iso(value) -> str | None:
    """A datetime as DRF renders it (ISO 8601, in the current time zone, "Z"
    for UTC). The database and the clock give UTC datetimes, which, with
    the UTC time zone, are formatted directly: DRF's own path costs several
    times as much, and a poll answer holds two per task."""
    if not value:
        return None
    if value.tzinfo is dt.UTC and _renders_utc():
        return value.isoformat()[:-6] + "Z"
    return _DATETIME.to_representation(value)


@functools.cache
def _renders_utc() -> bool:
    """Whether DRF renders datetimes in UTC, as ISO 8601 (read once: each
    read of a setting goes through the lazy settings object)."""
    return settings.TIME_ZONE == "UTC" and api_settings.DATETIME_FORMAT == ISO_8601


@receiver(setting_changed)
def _settings_changed(**kwargs) -> None:
    _renders_utc.cache_clear()


class StartExecutionSerializer(StrictSerializer):
    name = NameField()
    version = StrictIntegerField(min_value=1, required=False, allow_null=True)
    input = JSONObjectField(required=False, default=dict)
    correlationId = StrictCharField(max_length=256, required=False, allow_null=True)
    idempotencyKey = StrictCharField(max_length=256, required=False, allow_null=True)
    priority = StrictIntegerField(min_value=0, max_value=MAX_PRIORITY, required=False, default=0)


MAX_BATCH_STARTS = 100


class StartExecutionsSerializer(StrictSerializer):
    executions = StartExecutionSerializer(many=True, allow_empty=False, max_length=MAX_BATCH_STARTS)


class ListExecutionsSerializer(StrictSerializer):
    status = EnumField(choices=ExecutionStatus.choices, required=False)
    name = StrictCharField(max_length=128, required=False)
    correlationId = StrictCharField(max_length=256, required=False)
    cursor = StrictCharField(required=False)
    limit = serializers.IntegerField(min_value=1, max_value=500, required=False)


class ExecutionViewSerializer(StrictSerializer):
    includeTasks = serializers.BooleanField(required=False, default=True)


class ListTasksSerializer(StrictSerializer):
    status = EnumField(choices=TaskStatus.choices, required=False)
    path = StrictCharField(max_length=1000, required=False)
    pathPrefix = StrictCharField(max_length=1000, required=False)
    cursor = StrictCharField(required=False)
    limit = serializers.IntegerField(min_value=1, max_value=1000, required=False, default=100)


class ReasonSerializer(StrictSerializer):
    reason = StrictCharField(max_length=10_000, required=False, allow_blank=True, default="")


class PollSerializer(StrictSerializer):
    workerId = StrictCharField(max_length=256, required=False, default="")
    count = StrictIntegerField(min_value=1, max_value=MAX_POLL_COUNT, required=False, default=1)
    waitSeconds = StrictFloatField(min_value=0, max_value=MAX_POLL_WAIT_S, required=False, default=0)


class HeartbeatSerializer(StrictSerializer):
    leaseToken = StrictCharField(max_length=64)
    progress = serializers.JSONField(required=False, allow_null=True)


RESULT_STATUSES = (
    TaskStatus.COMPLETED,
    TaskStatus.FAILED,
    TaskStatus.FAILED_WITH_TERMINAL_ERROR,
    TaskStatus.IN_PROGRESS,
)


class NextSerializer(StrictSerializer):
    """Eager dispatch: the worker's next tasks, leased with the result."""

    workerId = StrictCharField(max_length=256, required=False, default="")
    count = StrictIntegerField(min_value=1, max_value=MAX_POLL_COUNT, required=False, default=1)
    taskType = StrictCharField(max_length=256, required=False)


class _ResultFields(StrictSerializer):
    leaseToken = StrictCharField(max_length=64, required=False, allow_null=True)
    status = EnumField(choices=[(s, s) for s in RESULT_STATUSES])
    outputData = JSONObjectField(required=False, default=dict)
    reasonForIncompletion = StrictCharField(max_length=10_000, required=False, allow_blank=True, default="")
    callbackAfterSeconds = StrictFloatField(min_value=0, max_value=31_536_000, required=False, default=0)
    logs = serializers.ListField(child=serializers.JSONField(), max_length=100, required=False, default=list)


class ResultSerializer(_ResultFields):
    next = NextSerializer(required=False)


class StrictUUIDField(serializers.UUIDField):
    """A UUID given as a string: DRF's own takes an integer (and ``false``,
    an integer to Python) as ``UUID(int=…)``, which the schema does not
    allow (found by tests/test_fuzz_schema.py)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class BatchResultSerializer(_ResultFields):
    taskId = StrictUUIDField()


class BatchResultsSerializer(StrictSerializer):
    results = BatchResultSerializer(many=True, allow_empty=False, max_length=MAX_BATCH_RESULTS)
    next = NextSerializer(required=False)


def task_view(task: Task, *, now=None, context: dict | None = None) -> dict:
    return {
        "taskId": str(task.id),
        "executionId": str(task.execution_id),
        "referenceTaskName": task.ref,
        "path": task.path,
        "type": task.type,
        "taskDefName": task.task_def_name,
        "status": task.status,
        "attempt": task.attempt,
        "optional": task.optional,
        "scheduledAt": iso(task.scheduled_at),
        "availableAt": iso(task.available_at),
        "startedAt": iso(task.started_at),
        "endedAt": iso(task.ended_at),
        "workerId": task.worker_id or None,
        "leaseExpiresAt": iso(task.lease_expires_at),
        "inputData": task.input,
        "outputData": task.output,
        "reasonForIncompletion": task.reason_for_incompletion or None,
        "idempotencyKey": task.idempotency_key,
        "subWorkflowId": str(task.child_execution_id) if task.child_execution_id else None,
        "retryCount": task.policy.get("retryCount"),
        "logs": task.logs,
        "blockedBy": blocked_by(task, now=now, context=context),
    }


def leased_view(task: Task) -> dict:
    return {
        "taskId": str(task.id),
        "executionId": str(task.execution_id),
        "taskType": task.task_def_name,
        "referenceTaskName": task.ref,
        "path": task.path,
        "inputData": task.input,
        "attempt": task.attempt,
        "idempotencyKey": task.idempotency_key,
        "leaseToken": task.lease_token,
        "leaseExpiresAt": iso(task.lease_expires_at),
        "scheduledAt": iso(task.scheduled_at),
    }


def execution_view(execution: Execution, *, tasks: list[Task] | None = None) -> dict:
    body = {
        "id": str(execution.id),
        "name": execution.name,
        "version": execution.version,
        "status": execution.status,
        "awaitingAdmission": execution.awaiting_admission,
        "input": execution.input,
        "output": execution.output,
        "variables": execution.variables,
        "reasonForIncompletion": execution.reason_for_incompletion or None,
        "failedTaskNames": execution.failed_task_names,
        "correlationId": execution.correlation_id,
        "idempotencyKey": execution.idempotency_key,
        "priority": execution.priority,
        "parentExecutionId": str(execution.parent_execution_id) if execution.parent_execution_id else None,
        "depth": execution.depth,
        "run": execution.run,
        "createdAt": iso(execution.created_at),
        "startedAt": iso(execution.started_at),
        "endedAt": iso(execution.ended_at),
        "deadline": iso(execution.deadline),
        "blockedBy": execution_blocked_by(execution, tasks=tasks),
    }
    if tasks is not None:
        body["tasks"] = task_views(tasks)
    return body


def task_views(tasks: list[Task]) -> list[dict]:
    """``task_view`` of each, sharing one look per queue (blockedBy)."""
    context: dict = {}
    return [task_view(task, context=context) for task in tasks]
