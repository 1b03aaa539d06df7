"""Executions, their tasks (one row per attempt), the decide queue, timers and
workflow messages. Committed rows are the whole truth: nothing that matters is
kept only in a process's memory."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from metadata.models import WorkflowSnapshot
from nodeflow.ids import new_id
from nodeflow.models import Namespace


class ExecutionStatus(models.TextChoices):
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    TERMINATED = "TERMINATED"


ACTIVE_EXECUTION = (ExecutionStatus.RUNNING, ExecutionStatus.PAUSED)


class TaskStatus(models.TextChoices):
    SCHEDULED = "SCHEDULED"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    COMPLETED_WITH_ERRORS = "COMPLETED_WITH_ERRORS"
    FAILED = "FAILED"
    FAILED_WITH_TERMINAL_ERROR = "FAILED_WITH_TERMINAL_ERROR"
    TIMED_OUT = "TIMED_OUT"
    CANCELED = "CANCELED"
    SKIPPED = "SKIPPED"


OPEN_TASK = (TaskStatus.SCHEDULED, TaskStatus.IN_PROGRESS)


class Execution(models.Model):
    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    # Indexes that only cost: every non-HOT update of a row (each status
    # change) writes an entry in each of the table's indexes. The namespace
    # is the first column of execution_ns_created; snapshots are never
    # deleted; parents and correlation ids are indexed only where present.
    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="executions", db_index=False)
    name = models.CharField(max_length=128)
    version = models.PositiveIntegerField()
    # Children share their root's snapshot; workflow_key says which of its
    # workflows this execution runs ("name@version").
    snapshot = models.ForeignKey(WorkflowSnapshot, on_delete=models.PROTECT, related_name="executions", db_index=False)
    workflow_key = models.CharField(max_length=160)
    status = models.CharField(max_length=16, choices=ExecutionStatus.choices, default=ExecutionStatus.RUNNING)
    awaiting_admission = models.BooleanField(default=False)
    admission_key = models.CharField(max_length=300, null=True, blank=True)
    input = models.JSONField(default=dict)
    output = models.JSONField(default=dict)
    variables = models.JSONField(default=dict)
    reason_for_incompletion = models.TextField(blank=True, default="")
    failed_task_names = models.JSONField(default=list, blank=True)
    correlation_id = models.CharField(max_length=256, null=True, blank=True)
    idempotency_key = models.CharField(max_length=256, null=True, blank=True)
    priority = models.PositiveSmallIntegerField(default=0)
    parent_execution = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children", db_index=False
    )
    parent_task_id = models.UUIDField(null=True, blank=True)
    path_prefix = models.CharField(max_length=1000, blank=True, default="")
    depth = models.PositiveSmallIntegerField(default=0)
    run = models.PositiveIntegerField(default=1, help_text="Incremented by restart; tasks of earlier runs are history.")
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    evaluated_at = models.DateTimeField(
        null=True, blank=True, help_text="First evaluation (arms the workflow timeout)."
    )
    ended_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="execution_unique_idempotency_key",
            )
        ]
        indexes = [
            models.Index(fields=["namespace", "-created_at"], name="execution_ns_created"),
            models.Index(fields=["namespace", "status", "-created_at"], name="execution_ns_status"),
            models.Index(fields=["namespace", "name", "-created_at"], name="execution_ns_name"),
            models.Index(
                fields=["namespace", "correlation_id"],
                condition=Q(correlation_id__isnull=False),
                name="execution_ns_correlation",
            ),
            models.Index(
                fields=["parent_execution"], condition=Q(parent_execution__isnull=False), name="execution_parent"
            ),
            # maxConcurrentExecutions counts the active runs of one definition.
            models.Index(
                fields=["namespace", "name"],
                condition=Q(status__in=["RUNNING", "PAUSED"]),
                name="execution_active_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version} {self.id}"

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_EXECUTION


class Task(models.Model):
    """One attempt of one task. ``path`` names the logical task (``fan[3].charge``);
    its attempts share ``idempotency_key``."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    # The execution is the first column of task_run_rows.
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="tasks", db_index=False)
    # No index of its own: every hot lookup is by id or by execution, and the
    # queue indexes (task_ready, task_in_flight, task_waiting) lead with the
    # namespace. Each lease and each result would write an entry in it.
    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+", db_index=False)
    run = models.PositiveIntegerField(default=1)
    seq = models.PositiveIntegerField(default=0)
    ref = models.CharField(max_length=128)
    path = models.CharField(max_length=1000)
    type = models.CharField(max_length=32)
    kind = models.CharField(max_length=16)  # worker, system, operator, waiting
    task_def_name = models.CharField(max_length=128)
    # Dispatchable tasks only: the task definition's name for SIMPLE tasks,
    # "@TYPE" for system tasks (a name no task definition can take).
    queue = models.CharField(max_length=130, null=True, blank=True)
    status = models.CharField(max_length=32, choices=TaskStatus.choices)
    held = models.BooleanField(default=False, help_text="Not dispatched while the execution is paused.")
    optional = models.BooleanField(default=False)
    attempt = models.PositiveIntegerField(default=1)
    priority = models.PositiveSmallIntegerField(default=0)
    policy = models.JSONField(default=dict, help_text="Retry and timeout policy copied at scheduling.")
    input = models.JSONField(default=dict)
    output = models.JSONField(default=dict)
    reason_for_incompletion = models.TextField(blank=True, default="")
    idempotency_key = models.CharField(max_length=1200)
    scheduled_at = models.DateTimeField()
    available_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    first_scheduled_at = models.DateTimeField(
        help_text="When attempt 1 was scheduled: the total budget counts from here."
    )
    worker_id = models.CharField(max_length=256, blank=True, default="")
    lease_token = models.CharField(max_length=64, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_seconds = models.FloatField(
        default=300.0, help_text="Length of a lease, from the policy (dispatch.lease_seconds)."
    )
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    deliveries = models.PositiveIntegerField(default=0)
    child_execution_id = models.UUIDField(null=True, blank=True)
    logs = models.JSONField(default=list, blank=True)
    # The FORK_JOIN_DYNAMIC row whose finished branch this row belongs to,
    # once the fork settled it: deciding no longer reads it while the fork
    # runs (executions.decider.dynamic_fork); cleared when the fork ends.
    settled_by = models.UUIDField(null=True, blank=True)

    class Meta:
        indexes = [
            # The dequeue path: ready tasks of one queue in priority, then
            # availability order, found by an index scan of this partial index.
            models.Index(
                fields=["namespace", "queue", "-priority", "available_at"],
                condition=Q(status="SCHEDULED", held=False),
                name="task_ready",
            ),
            # System tasks across every namespace, for the system-task role.
            models.Index(
                fields=["kind", "available_at"],
                condition=Q(status="SCHEDULED", held=False, kind="system"),
                name="task_system_ready",
            ),
            # In-flight tasks of one task definition: concurrentExecLimit counts
            # them at dequeue, worker and system tasks alike (a SIMPLE task's
            # queue is its definition's name; a system task's is "@TYPE").
            models.Index(
                fields=["namespace", "task_def_name"], condition=Q(status="IN_PROGRESS"), name="task_in_flight"
            ),
            # Expired leases, for the sweeper.
            models.Index(fields=["lease_expires_at"], condition=Q(status="IN_PROGRESS"), name="task_lease_expiry"),
            # A run's rows in seq order; deciding reads the unsettled ones
            # (settled_by IS NULL) without touching the settled.
            models.Index(fields=["execution", "run", "settled_by", "seq"], name="task_run_rows"),
            models.Index(
                fields=["namespace", "type", "task_def_name"],
                condition=Q(status="IN_PROGRESS", kind="waiting"),
                name="task_waiting",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.path} #{self.attempt} ({self.status})"


class DecideRequest(models.Model):
    """The durable decide queue: "evaluate this execution (again)". Deciders
    claim rows with SKIP LOCKED and delete them in the transaction that
    applies the decision."""

    execution = models.OneToOneField(Execution, on_delete=models.CASCADE, primary_key=True, related_name="+")
    due_at = models.DateTimeField(db_index=True)


class TimerKind(models.TextChoices):
    WORKFLOW_TIMEOUT = "WORKFLOW_TIMEOUT"
    SCHEDULE_TO_START = "SCHEDULE_TO_START"
    TASK_TOTAL = "TASK_TOTAL"
    WAIT = "WAIT"
    DECIDE = "DECIDE"  # a retry delay of a task that is not dispatched (SUB_WORKFLOW, waiting)


class Timer(models.Model):
    """A durable timer. Fired by a sweeper, exactly once: claimed with SKIP
    LOCKED and deleted in the transaction that acts on it. (Start-to-close and
    heartbeat deadlines are the task's lease expiry, indexed on the task.)"""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    kind = models.CharField(max_length=32, choices=TimerKind.choices)
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="timers")
    task_id = models.UUIDField(null=True, blank=True)
    due_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.kind} @ {self.due_at:%Y-%m-%d %H:%M:%S}"


class Message(models.Model):
    """A message posted to an execution, consumed by PULL_WORKFLOW_MESSAGES."""

    id = models.BigAutoField(primary_key=True)
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="messages")
    payload = models.JSONField()
    created_at = models.DateTimeField()
    consumed_by = models.UUIDField(null=True, blank=True, db_index=True)


class BreakerState(models.Model):
    """One process's circuit breaker for one key, as it last reported it
    (``executions.breakers``): one row per namespace whose tasks used it."""

    process = models.CharField(max_length=200)
    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=300)
    state = models.CharField(max_length=16)
    failures = models.PositiveIntegerField(default=0)
    requests = models.PositiveIntegerField(default=0)
    opened_until = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["process", "namespace", "key"], name="breaker_state_unique")]
        indexes = [models.Index(fields=["namespace", "updated_at"], name="breaker_state_ns_updated")]

    def __str__(self) -> str:
        return f"{self.key} {self.state} ({self.process})"
