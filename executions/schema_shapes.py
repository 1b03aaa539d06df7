"""The answers of the execution and worker routes, as the OpenAPI schema
documents them (SPEC §6–§7).

The routes render plain dicts (``executions.serializers.task_view``,
``leased_view``, ``execution_view``); these serializers never render or
validate anything, they only describe those dicts, field for field, to
drf-spectacular. tests/test_openapi_contract.py holds each real answer
against them, so a field added to a view and not here fails it.
"""

from __future__ import annotations

from rest_framework import serializers

from executions.models import ExecutionStatus, TaskStatus
from executions.serializers import RESULT_STATUSES
from metadata import task_types

TASK_TYPE_CHOICES = sorted(task_types.ALL_TYPES)
RESULT_STATUS_CHOICES = [str(status) for status in RESULT_STATUSES]
BREAKER_STATE_CHOICES = ["CLOSED", "OPEN", "HALF_OPEN"]


class JSONObject(serializers.DictField):
    """A JSON object of any keys and values (inputs, outputs, variables)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("child", serializers.JSONField())
        super().__init__(**kwargs)


class BlockedBySerializer(serializers.Serializer):
    control = serializers.CharField(
        help_text="The control holding it back: concurrentExecLimit, rateLimit, semaphore:<name>, "
        "maxConcurrentTasks, retryBackoff, noPollers, circuitOpen:<key>, admission:<key>, quota:<name>, "
        "paused, runnerCapacity, maxConcurrentExecutions"
    )
    limit = serializers.IntegerField(allow_null=True, help_text="The control's limit, when it has one")
    current = serializers.IntegerField(allow_null=True, help_text="Its current use, when it counts one")
    since = serializers.DateTimeField(help_text="Since when it has been held back")
    until = serializers.DateTimeField(required=False, help_text="When it will be let through, when known")


class TaskLogSerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="When the server received it")
    log = serializers.CharField()


class TaskSerializer(serializers.Serializer):
    """One task attempt (every attempt is its own row)."""

    taskId = serializers.UUIDField()
    executionId = serializers.UUIDField()
    referenceTaskName = serializers.CharField()
    path = serializers.CharField(help_text="Where it sits: charge, fan[3].charge, sub.inner, loop[2].step")
    type = serializers.ChoiceField(choices=TASK_TYPE_CHOICES)
    taskDefName = serializers.CharField(help_text="The task definition it runs under (a worker task's queue)")
    status = serializers.ChoiceField(choices=TaskStatus.choices)
    attempt = serializers.IntegerField(min_value=1)
    optional = serializers.BooleanField()
    scheduledAt = serializers.DateTimeField()
    availableAt = serializers.DateTimeField(
        allow_null=True, help_text="When it may be dispatched: scheduledAt plus any retry delay"
    )
    startedAt = serializers.DateTimeField(allow_null=True)
    endedAt = serializers.DateTimeField(allow_null=True)
    workerId = serializers.CharField(allow_null=True)
    leaseExpiresAt = serializers.DateTimeField(allow_null=True)
    inputData = JSONObject()
    outputData = JSONObject()
    reasonForIncompletion = serializers.CharField(allow_null=True)
    idempotencyKey = serializers.CharField(help_text="The same for every attempt and re-delivery of one task")
    subWorkflowId = serializers.UUIDField(allow_null=True, help_text="A SUB_WORKFLOW task's child execution")
    retryCount = serializers.IntegerField(allow_null=True, help_text="Retries its policy allows after attempt 1")
    logs = TaskLogSerializer(many=True, help_text="What workers reported with their results (the last 200)")
    blockedBy = BlockedBySerializer(allow_null=True, help_text="Why it is not running; null when nothing holds it")


class LeasedTaskSerializer(serializers.Serializer):
    """A task leased to a worker: report its result with ``leaseToken``
    before ``leaseExpiresAt`` (heartbeats extend it)."""

    taskId = serializers.UUIDField()
    executionId = serializers.UUIDField()
    taskType = serializers.CharField()
    referenceTaskName = serializers.CharField()
    path = serializers.CharField()
    inputData = JSONObject()
    attempt = serializers.IntegerField(min_value=1)
    idempotencyKey = serializers.CharField()
    leaseToken = serializers.CharField()
    leaseExpiresAt = serializers.DateTimeField()
    scheduledAt = serializers.DateTimeField()


class TaskResultAnswerSerializer(TaskSerializer):
    """The task after its result, and, when the result asked for them
    (``next``), the tasks leased with it."""

    next = LeasedTaskSerializer(many=True, required=False, help_text="Present when the result carried next")


class HeartbeatAnswerSerializer(serializers.Serializer):
    taskId = serializers.UUIDField()
    status = serializers.ChoiceField(choices=TaskStatus.choices)
    leaseExpiresAt = serializers.DateTimeField(allow_null=True, help_text="The lease's new expiry")


class BatchResultAnswerSerializer(serializers.Serializer):
    taskId = serializers.UUIDField()
    status = serializers.IntegerField(help_text="200 applied, 404 no such task, 409 stale lease")
    error = serializers.CharField(required=False)
    message = serializers.CharField(required=False)


class BatchResultAnswersSerializer(serializers.Serializer):
    results = BatchResultAnswerSerializer(many=True)
    next = LeasedTaskSerializer(many=True, required=False, help_text="Present when the batch carried next")


class ExecutionSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    version = serializers.IntegerField()
    status = serializers.ChoiceField(choices=ExecutionStatus.choices)
    awaitingAdmission = serializers.BooleanField(help_text="RUNNING but waiting for its rateLimitConfig key")
    input = JSONObject()
    output = JSONObject()
    variables = JSONObject()
    reasonForIncompletion = serializers.CharField(allow_null=True)
    failedTaskNames = serializers.ListField(child=serializers.CharField())
    correlationId = serializers.CharField(allow_null=True)
    idempotencyKey = serializers.CharField(allow_null=True)
    priority = serializers.IntegerField()
    parentExecutionId = serializers.UUIDField(allow_null=True)
    depth = serializers.IntegerField(help_text="0 for a root; a SUB_WORKFLOW child is its parent's depth + 1")
    run = serializers.IntegerField(help_text="1, and one more with each restart")
    createdAt = serializers.DateTimeField()
    startedAt = serializers.DateTimeField(allow_null=True)
    endedAt = serializers.DateTimeField(allow_null=True)
    deadline = serializers.DateTimeField(allow_null=True)
    blockedBy = BlockedBySerializer(allow_null=True, help_text="Why a running execution schedules nothing more")
    tasks = TaskSerializer(
        many=True,
        required=False,
        help_text="Every attempt, up to NODE_FLOW_EXECUTION_VIEW_TASKS; in the execution view only",
    )
    tasksNext = serializers.CharField(
        allow_null=True,
        required=False,
        help_text="The cursor of GET …/executions/{id}/tasks for the tasks not shown; null when all are",
    )


class TaskPageSerializer(serializers.Serializer):
    results = TaskSerializer(many=True, help_text="Oldest first (seq order)")
    next = serializers.CharField(allow_null=True, help_text="The cursor of the next page; null on the last")


class ExecutionPageSerializer(serializers.Serializer):
    results = ExecutionSerializer(many=True, help_text="Newest first, without their tasks")
    next = serializers.CharField(allow_null=True, help_text="The cursor of the next page; null on the last")


class BatchStartAnswerSerializer(serializers.Serializer):
    """One start's answer: created (201) or found by idempotencyKey (200)
    with ``id``; else the error body of the refusal with its status."""

    status = serializers.IntegerField()
    id = serializers.UUIDField(required=False)
    executionStatus = serializers.ChoiceField(choices=ExecutionStatus.choices, required=False)
    error = serializers.CharField(required=False)
    message = serializers.CharField(required=False)
    field = serializers.CharField(required=False, allow_null=True)
    control = serializers.CharField(required=False)
    quota = serializers.CharField(required=False)
    limit = serializers.IntegerField(required=False, allow_null=True)
    current = serializers.IntegerField(required=False, allow_null=True)
    retryAfterSeconds = serializers.FloatField(required=False)


class BatchStartAnswersSerializer(serializers.Serializer):
    results = BatchStartAnswerSerializer(many=True)


class MessageAcceptedSerializer(serializers.Serializer):
    id = serializers.IntegerField()


class WebhookDeliveredSerializer(serializers.Serializer):
    matched = serializers.IntegerField(help_text="How many waiting tasks it completed")
    taskIds = serializers.ListField(child=serializers.UUIDField())


class BreakerSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="A host (HTTP, HTTP_POLL, WEBHOOK) or a gRPC service")
    state = serializers.ChoiceField(choices=BREAKER_STATE_CHOICES)
    process = serializers.CharField()
    failures = serializers.IntegerField()
    requests = serializers.IntegerField()
    openedUntil = serializers.DateTimeField(allow_null=True)
    updatedAt = serializers.DateTimeField()
