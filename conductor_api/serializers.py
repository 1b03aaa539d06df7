"""Query strings and bodies of the Conductor-compatible routes. Fields are
named as Conductor names them (``workerid``, ``includeTasks``); each is as
strict as Node Flow's own (a wrong type or an unknown field is a 400 naming
it). What Node Flow does not implement is refused by name, not ignored."""

from __future__ import annotations

from rest_framework import serializers

from executions.serializers import MAX_POLL_COUNT, MAX_POLL_WAIT_S, MAX_PRIORITY, RESULT_STATUSES, JSONObjectField
from nodeflow.fields import (
    EnumField,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
)

MAX_CORRELATED = 1000
MAX_CORRELATION_IDS = 100


class Refusing(StrictSerializer):
    """Refuses, by name, a field set to what Node Flow does not implement
    (``UNSUPPORTED``: field → what it asks for); unset, false or empty is fine."""

    UNSUPPORTED: dict[str, str] = {}

    def validate(self, attrs: dict) -> dict:
        for field, what in self.UNSUPPORTED.items():
            if attrs.get(field):
                raise serializers.ValidationError({field: [f"{what}: not supported by Node Flow"]})
        return attrs


class TokenRequestSerializer(StrictSerializer):
    keyId = StrictCharField(max_length=64)
    keySecret = StrictCharField(max_length=256)


class PollQuerySerializer(Refusing):
    UNSUPPORTED = {"domain": "task domains"}
    workerid = StrictCharField(max_length=256, help_text="Required here: it fences the task's updates")
    domain = StrictCharField(max_length=256, required=False, allow_blank=True, help_text="Only empty: no task domains")


class BatchPollQuerySerializer(PollQuerySerializer):
    count = serializers.IntegerField(min_value=1, max_value=MAX_POLL_COUNT, required=False, default=1)
    timeout = serializers.IntegerField(
        min_value=0, max_value=MAX_POLL_WAIT_S * 1000, required=False, default=100, help_text="Milliseconds"
    )


class TaskResultSerializer(Refusing):
    """Conductor's ``TaskResult``."""

    UNSUPPORTED = {"externalOutputPayloadStoragePath": "external payload storage"}

    taskId = StrictCharField(max_length=64)
    workflowInstanceId = StrictCharField(max_length=64, required=False, allow_null=True)
    workerId = StrictCharField(max_length=256, required=False, allow_null=True)
    status = EnumField(choices=[(s, s) for s in RESULT_STATUSES])
    outputData = JSONObjectField(required=False, allow_null=True, default=dict)
    reasonForIncompletion = StrictCharField(max_length=10_000, required=False, allow_blank=True, allow_null=True)
    callbackAfterSeconds = StrictFloatField(min_value=0, max_value=31_536_000, required=False, default=0)
    logs = serializers.ListField(child=serializers.JSONField(), max_length=100, required=False, default=list)
    extendLease = StrictBooleanField(required=False, default=False)
    subWorkflowId = StrictCharField(max_length=64, required=False, allow_null=True)
    externalOutputPayloadStoragePath = StrictCharField(required=False, allow_null=True, allow_blank=True)


class StartRequestSerializer(Refusing):
    """Conductor's ``StartWorkflowRequest``; its Node Flow fields are
    validated again by the start route's own serializer."""

    UNSUPPORTED = {
        "taskToDomain": "task domains",
        "workflowDef": "inline workflow definitions (register it first)",
        "externalInputPayloadStoragePath": "external payload storage",
    }

    name = StrictCharField(max_length=128)
    version = StrictIntegerField(min_value=1, required=False, allow_null=True)
    correlationId = StrictCharField(max_length=256, required=False, allow_null=True)
    input = JSONObjectField(required=False, allow_null=True)
    priority = StrictIntegerField(min_value=0, max_value=MAX_PRIORITY, required=False, allow_null=True)
    idempotencyKey = StrictCharField(max_length=256, required=False, allow_null=True)
    idempotencyStrategy = EnumField(
        choices=[("FAIL", "FAIL"), ("RETURN_EXISTING", "RETURN_EXISTING")], required=False, allow_null=True
    )
    taskToDomain = serializers.DictField(child=StrictCharField(), required=False, allow_null=True)
    workflowDef = serializers.JSONField(required=False, allow_null=True)
    externalInputPayloadStoragePath = StrictCharField(required=False, allow_null=True, allow_blank=True)
    createdBy = StrictCharField(max_length=256, required=False, allow_null=True, allow_blank=True)


class StartQuerySerializer(StrictSerializer):
    version = serializers.IntegerField(min_value=1, required=False)
    correlationId = StrictCharField(max_length=256, required=False)
    priority = serializers.IntegerField(min_value=0, max_value=MAX_PRIORITY, required=False)


class GetWorkflowQuerySerializer(StrictSerializer):
    includeTasks = serializers.BooleanField(required=False, default=True)
    summarize = serializers.BooleanField(required=False, default=False)


class WorkerQuerySerializer(StrictSerializer):
    workerid = StrictCharField(max_length=256, required=False)


class StatusQuerySerializer(StrictSerializer):
    includeOutput = serializers.BooleanField(required=False, default=False)
    includeVariables = serializers.BooleanField(required=False, default=False)


class CorrelatedQuerySerializer(StrictSerializer):
    includeClosed = serializers.BooleanField(required=False, default=False)
    includeTasks = serializers.BooleanField(required=False, default=False)


class CorrelationIdsSerializer(StrictSerializer):
    """The body of ``POST workflow/{name}/correlated``: a list of correlation ids."""

    correlationIds = serializers.ListField(
        child=StrictCharField(max_length=256), max_length=MAX_CORRELATION_IDS, allow_empty=True
    )


class TerminateQuerySerializer(Refusing):
    UNSUPPORTED = {"triggerFailureWorkflow": "a failure workflow on terminate"}
    reason = StrictCharField(max_length=10_000, required=False, allow_blank=True, default="")
    triggerFailureWorkflow = serializers.BooleanField(required=False, default=False)


class RetryQuerySerializer(Refusing):
    UNSUPPORTED = {"resumeSubworkflowTasks": "resuming sub-workflow tasks"}
    resumeSubworkflowTasks = serializers.BooleanField(required=False, default=False)
    retryIfRetriedByParent = serializers.BooleanField(required=False, default=True)


class RestartQuerySerializer(Refusing):
    UNSUPPORTED = {"useLatestDefinitions": "restarting on the latest definitions (a restart runs its snapshot)"}
    useLatestDefinitions = serializers.BooleanField(required=False, default=False)


class VersionQuerySerializer(StrictSerializer):
    version = serializers.IntegerField(min_value=1, required=False)


class RegisterQuerySerializer(StrictSerializer):
    overwrite = serializers.BooleanField(required=False, default=True)


def query(serializer_class: type[StrictSerializer], request) -> dict:
    """A route's query string, validated (a parameter given twice: its last value)."""
    body = serializer_class(data=request.query_params.dict())
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)
