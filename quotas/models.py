"""Execution controls that need rows of their own: semaphores and their
holders, fixed-window counters, admission tickets, namespace quotas,
schedules, and the record of which workers poll which queue.

Everything here is committed state: a process that dies holds nothing that
is not in these tables, and a holder whose task's lease ran out stops
counting at once (the sweeper only tidies the rows away).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from executions.models import Execution, Task
from nodeflow.models import Namespace


class Semaphore(models.Model):
    """A named ceiling shared by every task type that lists it in its
    ``semaphores``. Unconfigured names gate nothing."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=128)
    permits = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="semaphore_unique_name")]
        ordering = ["namespace", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.permits} permits)"


class SemaphoreHolder(models.Model):
    """A permit taken by a task when it was leased. It counts only while the
    task is IN_PROGRESS and its lease has not expired: the permit is a lease."""

    semaphore = models.ForeignKey(Semaphore, on_delete=models.CASCADE, related_name="holders")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+")
    worker_id = models.CharField(max_length=256, blank=True, default="")
    acquired_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["semaphore", "task"], name="semaphore_holder_unique")]
        indexes = [models.Index(fields=["acquired_at"], name="semaphore_holder_acquired")]

    def __str__(self) -> str:
        return f"{self.semaphore.name} held by task {self.task_id}"


class RateWindow(models.Model):
    """A fixed-window counter: ``used`` dispatches (or starts) of ``key`` in
    the window beginning at ``window_start`` (epoch seconds). One row per key,
    moved on to the next window by the same upsert that counts."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=160)
    window_start = models.FloatField()
    used = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "key"], name="rate_window_unique_key")]

    def __str__(self) -> str:
        return f"{self.key}: {self.used} since {self.window_start}"


class NamespaceQuota(models.Model):
    """Platform limits of one namespace; null is unlimited."""

    namespace = models.OneToOneField(Namespace, on_delete=models.CASCADE, primary_key=True, related_name="+")
    max_concurrent_executions = models.PositiveIntegerField(null=True, blank=True)
    max_executions_per_minute = models.PositiveIntegerField(null=True, blank=True)
    max_workflow_definitions = models.PositiveIntegerField(null=True, blank=True)
    max_schedules = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"quotas of {self.namespace_id}"


# The line of held engine starts (a failure workflow that a start control
# would refuse waits here): no bucket of a workflow can have this name, since
# workflow names never start with "@".
HELD_LINE = "@held"


class Admission(models.Model):
    """An execution's ticket in the line of its admission bucket (workflow
    name + resolved ``rateLimitKey``), or in its namespace's line of held
    engine starts (``HELD_LINE``). Ids give start order; the ticket is
    deleted when the execution ends, which is what frees its slot."""

    id = models.BigAutoField(primary_key=True)
    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    bucket = models.CharField(max_length=420)
    execution = models.OneToOneField(Execution, on_delete=models.CASCADE, related_name="+")
    admitted = models.BooleanField()
    created_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["namespace", "bucket", "admitted", "id"], name="admission_line"),
            # The sweeper's one look, every tick, for any held engine start.
            models.Index(fields=["namespace", "id"], condition=Q(bucket=HELD_LINE), name="admission_held"),
        ]

    def __str__(self) -> str:
        return f"{self.bucket} #{self.id} ({'admitted' if self.admitted else 'waiting'})"


class Schedule(models.Model):
    """Start ``workflow_name`` on a cron schedule in ``timezone``. Each firing
    is claimed by moving ``next_fire_at`` on in the transaction that starts
    the execution, so it happens once however many schedulers run."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=128)
    cron = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC")
    workflow_name = models.CharField(max_length=128)
    version = models.PositiveIntegerField(null=True, blank=True)
    input = models.JSONField(default=dict, blank=True)
    paused = models.BooleanField(default=False)
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    last_execution_id = models.UUIDField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    last_refusal = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="schedule_unique_name")]
        indexes = [models.Index(fields=["next_fire_at"], condition=Q(paused=False), name="schedule_due")]
        ordering = ["namespace", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.cron} {self.timezone})"


class WorkerPoll(models.Model):
    """When a worker last polled a queue (recorded at most every few seconds)."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    queue = models.CharField(max_length=130)
    worker_id = models.CharField(max_length=256)
    last_poll_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "queue", "worker_id"], name="worker_poll_unique")]

    def __str__(self) -> str:
        return f"{self.worker_id or '(anonymous)'} on {self.queue}"
