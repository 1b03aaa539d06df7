"""Request and response shapes for definitions (camelCase, SPEC §3–§4)."""

from __future__ import annotations

from rest_framework import serializers

from metadata.models import RetryLogic, TaskDefinition, TimeoutPolicy, WorkflowVersion
from nodeflow.fields import (
    DurationField,
    EnumField,
    NameField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
)

MAX_NON_RETRYABLE_ERRORS = 100
MAX_SEMAPHORES_PER_TASK = 16


class RetryTimeoutPolicySerializer(StrictSerializer):
    """The retry and timeout policy: what a task definition sets, and what a
    workflow task entry may override for itself (e.g. ``"retryCount": 1``)."""

    retryCount = StrictIntegerField(source="retry_count", min_value=0, max_value=100, default=3)
    retryLogic = EnumField(source="retry_logic", choices=RetryLogic.choices, default=RetryLogic.EXPONENTIAL_BACKOFF)
    retryDelaySeconds = DurationField(source="retry_delay_seconds", default=1.0)
    backoffScaleFactor = StrictFloatField(source="backoff_scale_factor", min_value=1, max_value=100, default=2.0)
    maxRetryDelaySeconds = DurationField(source="max_retry_delay_seconds", default=3600.0)
    jitter = StrictFloatField(min_value=0, max_value=1, default=0.2)
    retryBudget = StrictFloatField(source="retry_budget", min_value=0, max_value=1, default=1.0)
    nonRetryableErrors = serializers.ListField(
        source="non_retryable_errors",
        child=StrictCharField(min_length=1, max_length=1024),
        max_length=MAX_NON_RETRYABLE_ERRORS,
        default=list,
    )
    scheduleToStartTimeout = DurationField(source="schedule_to_start_timeout", default=0.0)
    startToCloseTimeout = DurationField(source="start_to_close_timeout", default=3600.0)
    heartbeatTimeout = DurationField(source="heartbeat_timeout", default=0.0)
    timeoutSeconds = DurationField(source="timeout_seconds", default=0.0)
    timeoutPolicy = EnumField(source="timeout_policy", choices=TimeoutPolicy.choices, default=TimeoutPolicy.RETRY)


POLICY_FIELDS: tuple[str, ...] = tuple(RetryTimeoutPolicySerializer().fields)
# camelCase policy field → TaskDefinition column.
POLICY_COLUMNS: dict[str, str] = {name: field.source for name, field in RetryTimeoutPolicySerializer().fields.items()}


class TaskDefinitionSerializer(RetryTimeoutPolicySerializer):
    name = NameField()
    description = StrictCharField(required=False, allow_blank=True, max_length=10_000, default="")
    concurrentExecLimit = StrictIntegerField(
        source="concurrent_exec_limit", min_value=0, max_value=1_000_000, default=0
    )
    rateLimitPerFrequency = StrictIntegerField(
        source="rate_limit_per_frequency", min_value=0, max_value=1_000_000_000, default=0
    )
    rateLimitFrequencySeconds = DurationField(source="rate_limit_frequency_seconds", default=0.0)
    semaphores = serializers.ListField(child=NameField(), max_length=MAX_SEMAPHORES_PER_TASK, default=list)
    createdAt = serializers.DateTimeField(source="created_at", read_only=True)
    updatedAt = serializers.DateTimeField(source="updated_at", read_only=True)

    def validate_semaphores(self, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise serializers.ValidationError("names a semaphore twice")
        return value

    def validate(self, attrs: dict) -> dict:
        merged = {**self._current(), **attrs}
        if merged.get("rate_limit_per_frequency", 0) > 0 and merged.get("rate_limit_frequency_seconds", 0) <= 0:
            raise serializers.ValidationError(
                {"rateLimitFrequencySeconds": ["must be > 0 when rateLimitPerFrequency is set"]}
            )
        return attrs

    def _current(self) -> dict:
        # On PATCH, cross-field rules see the stored values for omitted fields.
        if self.partial and isinstance(self.instance, TaskDefinition):
            return {
                "rate_limit_per_frequency": self.instance.rate_limit_per_frequency,
                "rate_limit_frequency_seconds": self.instance.rate_limit_frequency_seconds,
            }
        return {}


class WorkflowVersionSerializer(serializers.Serializer):
    """A stored version: its definition body plus version metadata."""

    def to_representation(self, instance: WorkflowVersion) -> dict:
        definition = instance.definition
        return {
            **(instance.source if instance.source is not None else instance.body),
            "name": definition.name,
            "version": instance.version,
            "published": definition.published_version == instance.version,
            "createdAt": serializers.DateTimeField().to_representation(instance.created_at),
            "publishedAt": serializers.DateTimeField().to_representation(instance.published_at)
            if instance.published_at
            else None,
        }
