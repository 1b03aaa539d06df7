"""Workflow definitions as the OpenAPI schema documents them (SPEC §4–§5).

A definition is checked by ``metadata.validation``, not by a serializer, and
its task entries nest (forks, switch cases, loops, a dynamic fork's
template), so their schemas are written here as JSON Schema, from the same
field sets the validation allows: a field it starts to accept appears here
(untyped until it is given a type below). Request and response share the
shape; the response adds the version's metadata. The serializers below are
placeholders the extension maps; they never validate or render anything.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers

from metadata import task_types, validation
from metadata.serializers import POLICY_FIELDS
from nodeflow.models import NAME_PATTERN

_SECONDS = {"type": "number", "minimum": 0, "description": "Seconds"}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _task_fields(task: dict) -> dict[str, dict]:
    """The type of each field a task entry may carry; ``task`` is the
    reference to the entry schema itself (for the nested task lists)."""
    tasks = {"type": "array", "items": task, "minItems": 1}
    return {
        "name": {
            "type": "string",
            "pattern": NAME_PATTERN,
            "description": "The task definition it runs under; for SIMPLE, the queue workers poll",
        },
        "taskReferenceName": {"type": "string", "description": "Unique in the definition; expressions name it"},
        "type": {"type": "string", "enum": sorted(task_types.ALL_TYPES), "description": "Default SIMPLE"},
        "inputParameters": {
            "type": "object",
            "additionalProperties": {},
            "description": "Values, or expressions like ${workflow.input.x} and ${ref.output.y}",
        },
        "optional": {"type": "boolean", "description": "A failure ends it COMPLETED_WITH_ERRORS and the run goes on"},
        "description": {"type": "string"},
        # SWITCH
        "evaluatorType": {"type": "string", "enum": list(task_types.SWITCH_EVALUATORS)},
        "expression": {"type": "string"},
        "decisionCases": {"type": "object", "additionalProperties": tasks},
        "defaultCase": {"type": "array", "items": task},
        # FORK_JOIN, JOIN, FORK_JOIN_DYNAMIC
        "forkTasks": {"type": "array", "items": tasks, "minItems": 1},
        "maxConcurrency": {"type": "integer", "minimum": 1, "maximum": task_types.MAX_FORK_CONCURRENCY},
        "joinOn": {"type": "array", "items": {"type": "string"}},
        "forkTask": task,
        "dynamicForkTasksParam": {"type": "string", "description": "The input holding the tasks to fork, at run time"},
        "dynamicForkTasksInputParamName": {"type": "string", "description": "The input holding each task's input"},
        # EXCLUSIVE_JOIN, DYNAMIC
        "defaultExclusiveJoinTask": {"type": "array", "items": {"type": "string"}},
        "dynamicTaskNameParam": {"type": "string", "description": "The input whose value names the task to run"},
        # DO_WHILE
        "loopCondition": {"type": "string", "description": "JavaScript over $, checked after each iteration"},
        "loopOver": tasks,
        "maxIterations": {"type": "integer", "minimum": 1, "maximum": task_types.MAX_LOOP_ITERATIONS},
        "items": {
            "oneOf": [{"type": "array", "items": {}}, {"type": "string"}],
            "description": "One iteration per item: a list, or an expression such as ${workflow.input.items}",
        },
        # SUB_WORKFLOW
        "subWorkflowParam": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "pattern": NAME_PATTERN},
                "version": {"type": "integer", "minimum": 1, "nullable": True},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        # The task definition's policy, overridden for this task alone.
        "retryCount": {"type": "integer", "minimum": 0, "maximum": 100},
        # The task definition's enums (components named in SPECTACULAR_SETTINGS).
        "retryLogic": _ref("RetryLogic"),
        "retryDelaySeconds": _SECONDS,
        "backoffScaleFactor": {"type": "number", "minimum": 1, "maximum": 100},
        "maxRetryDelaySeconds": _SECONDS,
        "jitter": {"type": "number", "minimum": 0, "maximum": 1},
        "retryBudget": {"type": "number", "minimum": 0, "maximum": 1},
        "nonRetryableErrors": {"type": "array", "items": {"type": "string"}},
        "scheduleToStartTimeout": _SECONDS,
        "startToCloseTimeout": _SECONDS,
        "heartbeatTimeout": _SECONDS,
        "timeoutSeconds": _SECONDS,
        "timeoutPolicy": _ref("TaskTimeoutPolicy"),
    }


def _opened(schema: Any) -> Any:
    """``schema`` without ``additionalProperties: false``: answers may carry
    more (a definition registered in Conductor's dialect keeps its fields)."""
    if isinstance(schema, dict):
        return {k: _opened(v) for k, v in schema.items() if not (k == "additionalProperties" and v is False)}
    if isinstance(schema, list):
        return [_opened(item) for item in schema]
    return schema


def task_entry_schema(name: str, *, direction: str) -> dict[str, Any]:
    """The schema of one entry of ``tasks``: every field the validation
    allows on some type (which field goes with which type: SPEC §5)."""
    typed = _task_fields(_ref(name))
    allowed = task_types.COMMON_FIELDS | set(POLICY_FIELDS)
    for fields in task_types.TYPE_FIELDS.values():
        allowed |= fields
    schema: dict[str, Any] = {
        "type": "object",
        "description": "One task of a workflow: its type's own fields sit on it (SPEC §5)",
        "properties": {field: typed.get(field, {}) for field in sorted(allowed)},
        "required": ["name", "taskReferenceName"],
        "additionalProperties": False,
    }
    if direction == "response":
        schema["required"] = ["name", "taskReferenceName", "type", "inputParameters", "optional"]
        return _opened(schema)
    return schema


def _workflow_fields(task: dict) -> dict[str, dict]:
    return {
        "name": {"type": "string", "pattern": NAME_PATTERN},
        "description": {"type": "string"},
        "tasks": {"type": "array", "items": task, "minItems": 1},
        "inputParameters": {"type": "array", "items": {"type": "string"}, "description": "Names of its inputs"},
        "outputParameters": {"type": "object", "additionalProperties": {}},
        "failureWorkflow": {"type": "string", "pattern": NAME_PATTERN, "nullable": True},
        "timeoutSeconds": {**_SECONDS, "description": "The whole run's budget; 0: none"},
        "timeoutPolicy": {"type": "string", "enum": list(validation.WORKFLOW_TIMEOUT_POLICIES)},
        "maxConcurrentTasks": {"type": "integer", "minimum": 0, "description": "0: no limit"},
        "maxConcurrentExecutions": {"type": "integer", "minimum": 0, "description": "0: no limit"},
        "rateLimitConfig": {
            "type": "object",
            "nullable": True,
            "properties": {
                "rateLimitKey": {"type": "string", "description": "A key or an expression"},
                "concurrentExecLimit": {"type": "integer", "minimum": 1},
            },
            "required": ["rateLimitKey", "concurrentExecLimit"],
            "additionalProperties": False,
        },
        "variables": {"type": "object", "additionalProperties": {}},
        "restartable": {"type": "boolean", "description": "false: a restart is refused (default true)"},
    }


VERSION_FIELDS: dict[str, dict] = {
    "version": {"type": "integer", "minimum": 1},
    "published": {"type": "boolean", "description": "Whether this is the version a start without version runs"},
    "createdAt": {"type": "string", "format": "date-time"},
    "publishedAt": {"type": "string", "format": "date-time", "nullable": True},
}


def workflow_schema(task_component: str, *, direction: str) -> dict[str, Any]:
    typed = _workflow_fields(_ref(task_component))
    properties = {field: typed.get(field, {}) for field in sorted(validation.WORKFLOW_FIELDS)}
    if direction == "request":
        # A fetched definition may be posted back as it is: these are ignored.
        read_only = {field: {**schema, "readOnly": True} for field, schema in VERSION_FIELDS.items()}
        return {
            "type": "object",
            "properties": {**properties, **read_only},
            "required": ["name", "tasks"],
            "additionalProperties": False,
        }
    warnings = {
        "type": "array",
        "items": {"type": "string"},
        "description": "On a registration's answer only: what translating a Conductor definition changed",
    }
    return _opened(
        {
            "type": "object",
            "properties": {**properties, **VERSION_FIELDS, "warnings": warnings},
            "required": sorted({"name", "tasks", *VERSION_FIELDS}),
        }
    )


def one_or_many(component: str) -> dict[str, Any]:
    """A body that is one definition or a list of them (Conductor's PUT)."""
    return {"oneOf": [_ref(component), {"type": "array", "items": _ref(component), "minItems": 1}]}


class WorkflowTaskShape(serializers.Serializer):
    pass


class WorkflowDefinitionShape(serializers.Serializer):
    pass


def _component(name: str, direction: str) -> str:
    # drf-spectacular names a request body's component "<name>Request"
    # (COMPONENT_SPLIT_REQUEST).
    return f"{name}Request" if direction == "request" else name


class WorkflowTaskExtension(OpenApiSerializerExtension):
    target_class = WorkflowTaskShape

    def get_name(self, auto_schema, direction):
        return "WorkflowTask"

    def map_serializer(self, auto_schema, direction):
        return task_entry_schema(_component("WorkflowTask", direction), direction=direction)


class WorkflowDefinitionExtension(OpenApiSerializerExtension):
    target_class = WorkflowDefinitionShape

    def get_name(self, auto_schema, direction):
        return "WorkflowDefinition"

    def map_serializer(self, auto_schema, direction):
        # The task entries' own component, registered here since nothing
        # else names it.
        auto_schema.resolve_serializer(WorkflowTaskShape(), direction)
        return workflow_schema(_component("WorkflowTask", direction), direction=direction)
