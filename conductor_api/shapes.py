"""Node Flow rows in Conductor's JSON shapes: ``Task``, ``Workflow``,
``TaskDef`` and ``WorkflowDef`` as Conductor's clients deserialize them.
Times are epoch milliseconds (0 when not yet), as Conductor's are. Beside
Conductor's fields each shape keeps a few of Node Flow's own (``attempt``,
``path``, ``idempotencyKey``) that a client ignores."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from executions.models import Execution, Task
from metadata import taskdef_bodies
from metadata.models import TaskDefinition, WorkflowVersion
from metadata.serializers import WorkflowVersionSerializer

# Node Flow type → Conductor's taskType, where they differ.
TASK_TYPES = {"FORK_JOIN": "FORK"}
FAILED = frozenset({"FAILED", "FAILED_WITH_TERMINAL_ERROR", "TIMED_OUT"})


def ms(value: dt.datetime | None) -> int:
    return int(value.timestamp() * 1000) if value is not None else 0


@dataclass(frozen=True)
class RunOf:
    """What a task's Conductor shape says of its workflow."""

    name: str
    correlation_id: str | None
    priority: int

    @classmethod
    def of(cls, execution: Execution) -> RunOf:
        return cls(execution.name, execution.correlation_id, execution.priority)


def task_view(task: Task, run: RunOf) -> dict:
    return {
        "taskId": str(task.id),
        "taskType": task.task_def_name if task.type == "SIMPLE" else TASK_TYPES.get(task.type, task.type),
        "taskDefName": task.task_def_name,
        "referenceTaskName": task.ref,
        "workflowInstanceId": str(task.execution_id),
        "workflowType": run.name,
        "correlationId": run.correlation_id,
        "workflowPriority": run.priority,
        "status": task.status,
        "inputData": task.input,
        "outputData": task.output,
        "reasonForIncompletion": task.reason_for_incompletion or None,
        "workerId": task.worker_id or None,
        "retryCount": task.attempt - 1,
        "pollCount": task.deliveries,
        "seq": task.seq,
        "callbackAfterSeconds": 0,
        # The lease a worker must extend within: heartbeatTimeout, or
        # startToCloseTimeout, or the default (executions/leases.py).
        "responseTimeoutSeconds": math.ceil(task.lease_seconds),
        "scheduledTime": ms(task.scheduled_at),
        "startTime": ms(task.started_at),
        "endTime": ms(task.ended_at),
        "subWorkflowId": str(task.child_execution_id) if task.child_execution_id else None,
        "domain": None,
        "attempt": task.attempt,
        "path": task.path,
        "idempotencyKey": task.idempotency_key,
    }


def workflow_view(execution: Execution, tasks: list[Task] | None = None) -> dict:
    run = RunOf.of(execution)
    failed = [t for t in tasks or [] if t.status in FAILED]
    body = {
        "workflowId": str(execution.id),
        "workflowName": execution.name,
        "workflowVersion": execution.version,
        "status": execution.status,
        "input": execution.input,
        "output": execution.output,
        "variables": execution.variables,
        "correlationId": execution.correlation_id,
        "reasonForIncompletion": execution.reason_for_incompletion or None,
        "priority": execution.priority,
        "parentWorkflowId": str(execution.parent_execution_id) if execution.parent_execution_id else None,
        "failedTaskNames": list(execution.failed_task_names or []),
        "failedReferenceTaskNames": sorted({t.ref for t in failed}),
        "idempotencyKey": execution.idempotency_key,
        "createTime": ms(execution.created_at),
        "startTime": ms(execution.started_at or execution.created_at),
        "endTime": ms(execution.ended_at),
        "updateTime": ms(execution.updated_at),
    }
    if tasks is not None:
        body["tasks"] = [task_view(task, run) for task in tasks]
    return body


def workflow_status(execution: Execution, *, includeOutput: bool, includeVariables: bool) -> dict:  # noqa: N803 - Conductor's query names
    """Conductor's ``WorkflowStatus``."""
    body: dict = {
        "workflowId": str(execution.id),
        "correlationId": execution.correlation_id,
        "status": execution.status,
    }
    if includeOutput:
        body["output"] = execution.output
    if includeVariables:
        body["variables"] = execution.variables
    return body


# Conductor's names for task-definition fields whose Node Flow names differ.
TASKDEF_ALIASES = {
    "heartbeatTimeout": "responseTimeoutSeconds",
    "scheduleToStartTimeout": "pollTimeoutSeconds",
    "rateLimitFrequencySeconds": "rateLimitFrequencyInSeconds",
}


def taskdef_view(row: TaskDefinition) -> dict:
    body = taskdef_bodies.answer(row)
    for ours, theirs in TASKDEF_ALIASES.items():
        if ours in body and theirs not in body:
            body[theirs] = body[ours]
    # Informational fields a definition was given are kept as given.
    return {"createTime": ms(row.created_at), "updateTime": ms(row.updated_at), **body}


def workflowdef_view(row: WorkflowVersion) -> dict:
    body = dict(WorkflowVersionSerializer(row).data)
    return {"createTime": ms(row.created_at), "updateTime": ms(row.published_at or row.created_at), **body}
