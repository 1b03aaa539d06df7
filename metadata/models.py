"""Task definitions and versioned workflow definitions."""

from __future__ import annotations

from django.db import models

from nodeflow.models import Namespace


class RetryLogic(models.TextChoices):
    FIXED = "FIXED"
    LINEAR_BACKOFF = "LINEAR_BACKOFF"
    EXPONENTIAL_BACKOFF = "EXPONENTIAL_BACKOFF"


class TimeoutPolicy(models.TextChoices):
    RETRY = "RETRY"
    TIME_OUT_WF = "TIME_OUT_WF"
    ALERT_ONLY = "ALERT_ONLY"


class TaskDefinition(models.Model):
    """A task type's policy (retries, timeouts) and live controls (caps, limits).

    Column defaults are the SPEC §3 defaults; ``metadata.taskdefs`` holds the
    ranges and the camelCase names of the API.
    """

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="task_definitions")
    name = models.CharField(max_length=128)
    description = models.TextField(blank=True, default="")
    retry_count = models.PositiveIntegerField(default=3)
    retry_logic = models.CharField(max_length=32, choices=RetryLogic.choices, default=RetryLogic.EXPONENTIAL_BACKOFF)
    retry_delay_seconds = models.FloatField(default=1.0)
    backoff_scale_factor = models.FloatField(default=2.0)
    max_retry_delay_seconds = models.FloatField(default=3600.0)
    jitter = models.FloatField(default=0.2)
    retry_budget = models.FloatField(default=1.0)
    non_retryable_errors = models.JSONField(default=list, blank=True)
    schedule_to_start_timeout = models.FloatField(default=0.0)
    start_to_close_timeout = models.FloatField(default=3600.0)
    heartbeat_timeout = models.FloatField(default=0.0)
    timeout_seconds = models.FloatField(default=0.0)
    timeout_policy = models.CharField(max_length=16, choices=TimeoutPolicy.choices, default=TimeoutPolicy.RETRY)
    concurrent_exec_limit = models.PositiveIntegerField(default=0)
    rate_limit_per_frequency = models.PositiveIntegerField(default=0)
    rate_limit_frequency_seconds = models.FloatField(default=0.0)
    semaphores = models.JSONField(default=list, blank=True)
    # What a Conductor body gave beside the native fields (metadata.conductor):
    # {"fields": informational fields, "aliases": Conductor names of native fields}.
    conductor = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="taskdef_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class WorkflowDefinition(models.Model):
    """A workflow name: its versions and which one is published."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="workflow_definitions")
    name = models.CharField(max_length=128)
    published_version = models.PositiveIntegerField(null=True, blank=True)
    latest_version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="workflowdef_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class WorkflowSnapshot(models.Model):
    """What publishing baked: a version's body plus every sub-workflow it
    reaches, each pinned to a version. Immutable once written; executions run
    from one. Deliberately not tied to the definition row, so deleting a
    definition never pulls the ground from under a running execution.

    ``body`` is ``{"root": "name@v", "workflows": {"name@v": definition, …}}``.
    """

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="workflow_snapshots")
    name = models.CharField(max_length=128)
    version = models.PositiveIntegerField()
    body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.name} v{self.version} (snapshot {self.pk})"


class WorkflowVersion(models.Model):
    """One immutable version. ``body`` is the validated definition as stored;
    ``snapshot`` is the last snapshot baked by publishing it (null: a draft
    never published)."""

    definition = models.ForeignKey(WorkflowDefinition, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    body = models.JSONField()
    # The body as posted, when it was not native (a Conductor body,
    # metadata.conductor): what a GET answers. Null: ``body`` is what was posted.
    source = models.JSONField(null=True, blank=True)
    snapshot = models.ForeignKey(WorkflowSnapshot, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["definition", "version"], name="workflowversion_unique")]
        ordering = ["definition", "version"]

    def __str__(self) -> str:
        return f"{self.definition.name} v{self.version}"
