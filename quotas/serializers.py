"""Request and response shapes for controls, quotas, schedules and queues."""

from __future__ import annotations

from rest_framework import serializers

from executions.serializers import JSONObjectField, iso
from nodeflow.fields import NameField, StrictBooleanField, StrictCharField, StrictIntegerField, StrictSerializer
from quotas.models import Schedule, SemaphoreHolder
from quotas.semaphores import SemaphoreUse

MAX_PERMITS = 1_000_000
MAX_QUOTA = 1_000_000_000


class SemaphoreHolderSerializer(serializers.Serializer):
    """A task holding a permit (``holder_view``; the schema's shape only)."""

    holderId = serializers.IntegerField()
    taskId = serializers.UUIDField()
    executionId = serializers.UUIDField()
    taskType = serializers.CharField()
    workerId = serializers.CharField(allow_null=True)
    acquiredAt = serializers.DateTimeField()
    leaseExpiresAt = serializers.DateTimeField(allow_null=True, help_text="The permit goes with the lease")


class SemaphoreSerializer(StrictSerializer):
    """A semaphore: PUT takes permits; GET one adds its holders."""

    name = serializers.CharField(read_only=True)
    permits = StrictIntegerField(min_value=0, max_value=MAX_PERMITS)
    held = serializers.IntegerField(read_only=True)
    holders = SemaphoreHolderSerializer(many=True, read_only=True)


class SemaphoreUseSerializer(serializers.Serializer):
    """``semaphore_view`` (the schema's shape only)."""

    name = serializers.CharField()
    permits = serializers.IntegerField()
    held = serializers.IntegerField(help_text="Permits held now")


class QueueSerializer(serializers.Serializer):
    """``QueueUse.view`` (the schema's shape only)."""

    taskType = serializers.CharField()
    depth = serializers.IntegerField(help_text="Tasks waiting: ready, in a retry delay, or held by a control")
    inFlight = serializers.IntegerField(help_text="Tasks leased to a worker")


class QueuePollSerializer(serializers.Serializer):
    taskType = serializers.CharField()
    lastPollAt = serializers.DateTimeField()


class QueueWorkerSerializer(serializers.Serializer):
    """``workers_view`` (the schema's shape only)."""

    workerId = serializers.CharField()
    lastPollAt = serializers.DateTimeField()
    queues = QueuePollSerializer(many=True)


def semaphore_view(use: SemaphoreUse) -> dict:
    return {"name": use.name, "permits": use.permits, "held": use.held}


def holder_view(holder: SemaphoreHolder) -> dict:
    task = holder.task
    return {
        "holderId": holder.id,
        "taskId": str(task.id),
        "executionId": str(task.execution_id),
        "taskType": task.task_def_name,
        "workerId": holder.worker_id or None,
        "acquiredAt": iso(holder.acquired_at),
        "leaseExpiresAt": iso(task.lease_expires_at),
    }


def _quota_field() -> StrictIntegerField:
    return StrictIntegerField(min_value=0, max_value=MAX_QUOTA, required=False, allow_null=True, default=None)


class QuotasSerializer(StrictSerializer):
    maxConcurrentExecutions = _quota_field()
    maxExecutionsPerMinute = _quota_field()
    maxWorkflowDefinitions = _quota_field()
    maxSchedules = _quota_field()


class ScheduleSerializer(StrictSerializer):
    name = NameField(required=False)
    cron = StrictCharField(max_length=200)
    timezone = StrictCharField(max_length=64, required=False, default="UTC")
    workflowName = NameField(source="workflow_name")
    version = StrictIntegerField(min_value=1, required=False, allow_null=True, default=None)
    input = JSONObjectField(required=False, default=dict)
    paused = StrictBooleanField(required=False, default=False)
    # Returned by GET; accepted and ignored so a fetched body can be sent back.
    nextFireAt = serializers.DateTimeField(read_only=True, allow_null=True)  # null while paused
    lastFiredAt = serializers.DateTimeField(read_only=True, allow_null=True)
    lastExecutionId = serializers.UUIDField(read_only=True, allow_null=True)
    lastError = serializers.CharField(read_only=True, allow_null=True)
    lastRefusal = serializers.JSONField(read_only=True, allow_null=True)
    createdAt = serializers.DateTimeField(read_only=True)
    updatedAt = serializers.DateTimeField(read_only=True)


def schedule_view(schedule: Schedule) -> dict:
    return {
        "name": schedule.name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "workflowName": schedule.workflow_name,
        "version": schedule.version,
        "input": schedule.input,
        "paused": schedule.paused,
        "nextFireAt": None if schedule.paused else iso(schedule.next_fire_at),
        "lastFiredAt": iso(schedule.last_fired_at),
        "lastExecutionId": str(schedule.last_execution_id) if schedule.last_execution_id else None,
        "lastError": schedule.last_error or None,
        "lastRefusal": schedule.last_refusal,
        "createdAt": iso(schedule.created_at),
        "updatedAt": iso(schedule.updated_at),
    }


def workers_view(rows: list[dict]) -> list[dict]:
    return [
        {
            "workerId": row["workerId"],
            "lastPollAt": iso(row["lastPollAt"]),
            "queues": [{"taskType": q["taskType"], "lastPollAt": iso(q["lastPollAt"])} for q in row["queues"]],
        }
        for row in rows
    ]
