"""drf-spectacular extensions: how our authentication, our errors, our
operation names and our strict request bodies appear in the OpenAPI schema
(docs/api.md)."""

from __future__ import annotations

import re

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent

from nodeflow.auth import ROLE_SCOPES
from nodeflow.fields import StrictSerializer
from nodeflow.models import NAME_PATTERN


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "nodeflow.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "x-api-key"}


class StaffSessionScheme(OpenApiAuthenticationExtension):
    target_class = "nodeflow.auth.StaffSessionAuthentication"
    name = "StaffSession"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid"}


# --- errors in the schema ------------------------------------------------------
# Every error body (nodeflow/errors.py) is one object; each kind adds its own
# fields (``field``/``errors`` for validation, ``control``/``limit``/``current``
# for refusals), so the object stays open.
ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {"type": "string", "description": "A code: VALIDATION_ERROR, NOT_FOUND, FORBIDDEN, …"},
        "message": {"type": "string"},
        "field": {"type": "string", "nullable": True, "description": "The offending field's path, e.g. tasks[1].name"},
        "taskReferenceName": {"type": "string", "description": "In a workflow definition, the task at fault"},
        "control": {"type": "string", "description": "LIMIT_EXCEEDED: the execution control that refused it"},
        "quota": {"type": "string", "description": "QUOTA_EXCEEDED: the namespace quota that refused it"},
        "limit": {"type": "integer", "nullable": True},
        "current": {"type": "integer", "nullable": True},
        "retryAfterSeconds": {"type": "number", "description": "Also sent as a Retry-After header"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"field": {"type": "string", "nullable": True}, "message": {"type": "string"}},
                "required": ["field", "message"],
            },
        },
    },
    "required": ["error", "message"],
    "additionalProperties": True,
}
ERROR_DESCRIPTIONS = {
    "400": "Invalid input; `field` names it",
    "401": "Missing or unknown API key",
    "403": "The key may not do this, or not in this namespace",
    "404": "No such namespace or resource",
    "409": "The resource is not in a state that allows this",
    "413": "The body is larger than NODE_FLOW_MAX_BODY_BYTES",
    "415": "A content type the route does not parse",
    "429": "An execution control or namespace quota refused it",
    "503": "The database is unavailable; nothing changed; retry after Retry-After",
}
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _error_codes(method: str) -> tuple[str, ...]:
    codes: tuple[str, ...] = ("400", "401", "403", "404", "503")
    if method in BODY_METHODS:
        codes += ("413", "415")
    if method in BODY_METHODS or method == "DELETE":
        codes += ("409", "429")
    return codes


# Path parameters that are names (nodeflow.models.NAME_PATTERN); ids stay plain
# strings (an id that is not a UUID is simply not found).
NAME_PARAMETERS = frozenset({"ns", "name", "task_type"})

# --- operations: one name convention, descriptions for users --------------------
# operationId: snake_case, verb first, then the resource, singular for one
# and plural for several (list_executions, get_execution, start_execution).
# Generated clients turn it into a function name, so it is chosen here, per
# route, rather than derived from the URL; a route missing from the table
# gets the same shape derived from its path (``_derived_id``). The
# description here is used when the view's extend_schema gives none.
NS = "/v1/ns/{ns}"
OPERATIONS: dict[tuple[str, str], tuple[str, str]] = {
    # (method, path): (operationId, description)
    ("GET", "/healthz"): ("get_health", "Whether the server answers and reaches its database; no key needed."),
    # executions
    ("GET", f"{NS}/executions"): (
        "list_executions",
        "Executions of the namespace, newest first, without their tasks; filter by status, name and "
        "correlationId. Pages of `limit` (default 50, at most 500); pass `next` back as `cursor` for the next page.",
    ),
    ("POST", f"{NS}/executions"): ("start_execution", ""),
    ("POST", f"{NS}/executions/batch"): ("start_executions", ""),
    ("GET", f"{NS}/executions/{{execution_id}}"): (
        "get_execution",
        "The execution with its tasks (every attempt, in the order they were scheduled) and, while it waits, "
        "why (`blockedBy` on the execution and on each waiting task).",
    ),
    ("GET", f"{NS}/executions/{{execution_id}}/tasks"): ("list_execution_tasks", ""),
    ("POST", f"{NS}/executions/{{execution_id}}/terminate"): (
        "terminate_execution",
        "Ends the execution TERMINATED with `reason`: every open task is CANCELED (a worker holding one gets "
        "409 on its next heartbeat or result) and every child execution is terminated too. 409 when it has "
        "already ended.",
    ),
    ("POST", f"{NS}/executions/{{execution_id}}/pause"): (
        "pause_execution",
        "Schedules and dispatches nothing new until resumed; tasks already running finish. 409 unless RUNNING.",
    ),
    ("POST", f"{NS}/executions/{{execution_id}}/resume"): (
        "resume_execution",
        "Lets a PAUSED execution carry on where it stopped. 409 unless PAUSED.",
    ),
    ("POST", f"{NS}/executions/{{execution_id}}/retry"): (
        "retry_execution",
        "Runs a FAILED, TIMED_OUT or TERMINATED execution again from its failed task, keeping what completed. "
        "It takes admission as a start does: over `maxConcurrentExecutions` or a quota it is refused with "
        "the start's 429 and nothing changes.",
    ),
    ("POST", f"{NS}/executions/{{execution_id}}/restart"): (
        "restart_execution",
        "Runs an ended execution again from the beginning, with the same id and input (`run` counts the runs), "
        "under the same admission as a start.",
    ),
    ("POST", f"{NS}/executions/{{execution_id}}/decide"): (
        "decide_execution",
        "Evaluates the execution now instead of at its next event: schedules what is ready. Safe to repeat.",
    ),
    ("POST", f"{NS}/executions/{{execution_id}}/messages"): (
        "post_execution_message",
        "Stores any JSON value as a message for the execution's PULL_WORKFLOW_MESSAGES tasks, which complete "
        "with up to their `batchSize` messages in the order posted. 409 once the execution has ended.",
    ),
    # workers
    ("POST", f"{NS}/tasks/poll/{{task_type}}"): (
        "poll_tasks",
        "Leases up to `count` ready tasks of the queue `task_type` (a SIMPLE task's definition name) to "
        "`workerId`, under every control of the queue (concurrentExecLimit, rate limit, semaphores). With "
        "`waitSeconds` it long-polls: it answers as soon as a task is ready, or an empty list when the wait "
        "ends. Each leased task's `leaseToken` must come with its heartbeats and result before `leaseExpiresAt`.",
    ),
    ("POST", f"{NS}/tasks/{{task_id}}/heartbeat"): (
        "heartbeat_task",
        "Extends the lease of a task you hold (by its heartbeatTimeout, else its startToCloseTimeout) and "
        "records `progress`. 409 when the lease is no longer yours: it expired and the task was given to "
        "another worker, or the task was canceled; stop working on it.",
    ),
    ("POST", f"{NS}/tasks/{{task_id}}/result"): (
        "report_task_result",
        "Reports the outcome of a leased task: COMPLETED with `outputData`; FAILED (retried under its policy) "
        "or FAILED_WITH_TERMINAL_ERROR (never retried) with `reasonForIncompletion`; or IN_PROGRESS to be "
        "called back after `callbackAfterSeconds`. 409 for a stale lease (nothing changes). A developer key "
        "completes a HUMAN task without a lease token (a worker key gets 403 for one). With `next`, the same "
        "request leases the worker's next tasks, answered in `next`.",
    ),
    ("POST", f"{NS}/tasks/results"): (
        "report_task_results",
        "Reports up to 100 results in one request, each with its `taskId` and `leaseToken`; one answer per "
        "result, in order (200, 404 or 409), and one stale result spoils none of the others. With `next`, "
        "the worker's next tasks are leased in the same request.",
    ),
    ("POST", f"{NS}/webhooks/{{name}}"): (
        "deliver_webhook",
        "Completes, with the posted body as their output, the waiting WAIT_FOR_WEBHOOK tasks whose task "
        '`name` is `name` and whose `matches` (`{"$.path": value}`) the body satisfies, in every execution of '
        "the namespace; answers how many. `name` is the waiting task's `name` in the workflow (the task "
        "definition name it sits under), not its `taskReferenceName`.",
    ),
    # definitions
    ("GET", f"{NS}/metadata/task-definitions"): ("list_task_definitions", "Every task definition, by name."),
    ("POST", f"{NS}/metadata/task-definitions"): ("register_task_definition", ""),
    ("PUT", f"{NS}/metadata/task-definitions"): (
        "replace_task_definition",
        "The same as POST (201 created, 200 replaced, omitted fields back to their defaults): the method "
        "Conductor's clients update a definition with. PATCH …/task-definitions/{name} changes some fields only.",
    ),
    ("GET", f"{NS}/metadata/task-definitions/{{name}}"): (
        "get_task_definition",
        "A task definition with every field at its effective value (defaults filled in).",
    ),
    ("PATCH", f"{NS}/metadata/task-definitions/{{name}}"): (
        "update_task_definition",
        "Changes the fields given and keeps the others. Its controls apply at once to queued tasks; its retry "
        "and timeout policy to tasks scheduled from now on.",
    ),
    ("DELETE", f"{NS}/metadata/task-definitions/{{name}}"): (
        "delete_task_definition",
        "Deletes a task definition; tasks of that name then run with the defaults.",
    ),
    ("GET", f"{NS}/metadata/workflow-definitions"): (
        "list_workflow_definitions",
        "Every workflow definition, each at its published version.",
    ),
    ("POST", f"{NS}/metadata/workflow-definitions"): ("register_workflow_definition", ""),
    ("PUT", f"{NS}/metadata/workflow-definitions"): (
        "register_workflow_definitions",
        "Registers a new version of each definition given, one or a list (as Conductor's clients send "
        "them), all or none; answers one version or the list, in order.",
    ),
    ("GET", f"{NS}/metadata/workflow-definitions/{{name}}"): (
        "get_workflow_definition",
        "The published version of the workflow definition: the one a start without `version` runs.",
    ),
    ("DELETE", f"{NS}/metadata/workflow-definitions/{{name}}"): (
        "delete_workflow_definition",
        "Deletes the definition and all its versions; running executions keep the snapshot they run.",
    ),
    ("GET", f"{NS}/metadata/workflow-definitions/{{name}}/versions"): (
        "list_workflow_versions",
        "Every version of the definition, oldest first, and which one is published.",
    ),
    ("GET", f"{NS}/metadata/workflow-definitions/{{name}}/versions/{{version}}"): (
        "get_workflow_version",
        "One version of the definition, published or draft.",
    ),
    ("POST", f"{NS}/metadata/workflow-definitions/{{name}}/publish"): (
        "publish_workflow_version",
        "Publishes `version` (default: the latest): starts without a version run it from now on. Publishing "
        "bakes the definition with every SUB_WORKFLOW it reaches, pinned to their published versions.",
    ),
    ("POST", f"{NS}/metadata/workflow-definitions/{{name}}/rollback"): ("rollback_workflow_version", ""),
    # controls and diagnostics
    ("GET", f"{NS}/semaphores"): ("list_semaphores", "Every semaphore with its permits and the permits held now."),
    ("GET", f"{NS}/semaphores/{{name}}"): (
        "get_semaphore",
        "One semaphore with the tasks holding its permits (a permit is held while the task's lease lasts).",
    ),
    ("PUT", f"{NS}/semaphores/{{name}}"): (
        "set_semaphore",
        "Creates the semaphore (201) or changes its permits (200). Tasks whose definition names it hold one "
        "permit each while in flight; lowering the permits revokes none held.",
    ),
    ("DELETE", f"{NS}/semaphores/{{name}}"): (
        "delete_semaphore",
        "Deletes the semaphore: tasks naming it are no longer gated by it.",
    ),
    ("GET", f"{NS}/quotas"): ("get_quotas", "The namespace's quotas; null is unlimited."),
    ("PUT", f"{NS}/quotas"): (
        "set_quotas",
        "Replaces every quota of the namespace; one left out becomes unlimited. Over a quota, a start, a "
        "new workflow definition or a schedule is refused with 429 QUOTA_EXCEEDED and a Retry-After header.",
    ),
    ("GET", f"{NS}/schedules"): ("list_schedules", "Every schedule, by name."),
    ("POST", f"{NS}/schedules"): (
        "create_schedule",
        "Creates (201) or replaces (200) the schedule `name`: it starts `workflowName` on `cron` in "
        "`timezone`, each firing a start under every control; a refused firing is recorded on the schedule "
        "(`lastError`, `lastRefusal`).",
    ),
    ("GET", f"{NS}/schedules/{{name}}"): (
        "get_schedule",
        "One schedule with its next firing and the outcome of its last one.",
    ),
    ("PUT", f"{NS}/schedules/{{name}}"): (
        "replace_schedule",
        "Creates (201) or replaces (200) the schedule named in the path.",
    ),
    ("DELETE", f"{NS}/schedules/{{name}}"): ("delete_schedule", "Deletes the schedule; started executions go on."),
    ("POST", f"{NS}/schedules/{{name}}/pause"): ("pause_schedule", "Stops the schedule firing until resumed."),
    ("POST", f"{NS}/schedules/{{name}}/resume"): (
        "resume_schedule",
        "Resumes a paused schedule; firings missed meanwhile are skipped, the next is the first after now.",
    ),
    ("GET", f"{NS}/queues"): (
        "list_queues",
        "Every queue with tasks waiting or in flight: `depth` counts the tasks waiting (ready, in a retry "
        "delay or held by a control), `inFlight` those leased to a worker.",
    ),
    ("GET", f"{NS}/queues/{{task_type}}/depth"): (
        "get_queue_depth",
        "One queue's waiting and in-flight tasks (zeros for a queue nothing uses).",
    ),
    ("GET", f"{NS}/queues/workers"): (
        "list_queue_workers",
        "The workers that polled lately and when each last polled each queue; `taskType` narrows it to one queue.",
    ),
    ("GET", f"{NS}/breakers"): ("list_breakers", ""),
    # secrets
    ("GET", f"{NS}/secrets"): ("list_secrets", "The names of the namespace's secrets; values are never shown."),
    ("GET", f"{NS}/secrets/{{name}}"): ("get_secret", "One secret's name (its value is never shown)."),
    ("PUT", f"{NS}/secrets/{{name}}"): (
        "set_secret",
        "Creates (201) or replaces (200) a secret; WEBHOOK tasks sign with it (`secretName`). The value is "
        "stored and never shown back.",
    ),
    ("DELETE", f"{NS}/secrets/{{name}}"): (
        "delete_secret",
        "Deletes a secret; tasks that name it then fail terminally.",
    ),
}
VERBS = {"GET": "get", "POST": "create", "PUT": "set", "PATCH": "update", "DELETE": "delete"}
# Tags group the operations (a generated client's modules): the first path
# segment under the namespace.
TAGS = {
    "executions": "executions",
    "tasks": "workers",
    "webhooks": "workers",
    "metadata": "definitions",
    "semaphores": "controls",
    "quotas": "controls",
    "queues": "controls",
    "breakers": "controls",
    "schedules": "schedules",
    "secrets": "secrets",
    "healthz": "service",
}


def _derived_id(method: str, path: str, is_list: bool) -> str:
    """verb_noun from the path, for a route the table does not name:
    ``GET /v1/ns/{ns}/executions/{execution_id}/tasks`` → ``list_executions_tasks``."""
    words = [part for part in path.removeprefix(NS).split("/") if part and not part.startswith("{")]
    verb = "list" if method == "GET" and is_list else VERBS[method]
    return "_".join([verb, *(re.sub(r"[^a-z]+", "_", word.lower()).strip("_") for word in words)]) or verb


def _roles(scopes) -> list[str]:
    wanted = scopes if isinstance(scopes, tuple) else (scopes,)
    return [str(role) for role, held in ROLE_SCOPES.items() if any(scope in held for scope in wanted)]


class ApiAutoSchema(AutoSchema):
    """Documents the error answers of every authenticated operation, in the one
    error model, next to the success answers each view declares; the form
    of the names in paths; each operation's name, tag, description and the
    roles that may call it; and strict bodies as closed objects."""

    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        named = OPERATIONS.get((self.method, path))
        if named is not None:
            operation["operationId"] = named[0]
        elif operation["operationId"] == AutoSchema.get_operation_id(self):
            operation["operationId"] = _derived_id(self.method, path, self._is_list_view())
        scopes = getattr(self.view, "scopes", {}).get(self.method)
        if scopes:
            roles = ", ".join(_roles(scopes))
            operation["description"] = f"{operation.get('description', '')}\n\nRoles: {roles}.".lstrip()
        return operation

    def get_description(self) -> str:
        # Never a docstring: those state contracts for the code's readers.
        return OPERATIONS.get((self.method, self.path), ("", ""))[1]

    def get_tags(self) -> list[str]:
        segment = self.path.removeprefix(NS).strip("/").split("/")[0]
        return [TAGS.get(segment, segment or "service")]

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        # A serializer's docstring (or a base class's) tells the code's
        # readers how it validates; users read the fields' help texts.
        schema.pop("description", None)
        if direction == "request" and isinstance(serializer, StrictSerializer):
            schema["additionalProperties"] = False  # StrictSerializer refuses unknown keys
        for field in schema.get("properties", {}).values():
            # A default that is only the server's own fallback ("" for an
            # absent workerId) and fails the field's own rule is left out:
            # clients would send it and be refused.
            if field.get("default") == "" and field.get("minLength", 0) > 0:
                del field["default"]
        return schema

    def _resolve_path_parameters(self, variables):
        parameters = super()._resolve_path_parameters(variables)
        for parameter in parameters:
            if parameter["name"] in NAME_PARAMETERS:
                parameter["schema"] = {"type": "string", "pattern": NAME_PATTERN}
        return parameters

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if not getattr(self.view, "scopes", None):
            return responses  # open routes (health, schema) have no auth errors
        component = self._error_component()
        for code in _error_codes(self.method):
            responses.setdefault(
                code,
                {"description": ERROR_DESCRIPTIONS[code], "content": {"application/json": {"schema": component.ref}}},
            )
        return responses

    def _error_component(self) -> ResolvedComponent:
        component = ResolvedComponent(name="Error", type=ResolvedComponent.SCHEMA, object="Error", schema=ERROR_SCHEMA)
        self.registry.register_on_missing(component)
        return component


def exclude_foreign_dialects(endpoints):
    """Preprocessing hook: the Conductor-compatible routes (``conductor_api/``,
    under ``/v1/ns/{ns}/api/``) answer Conductor's shapes, documented by
    Conductor; this schema is Node Flow's own."""
    return [
        (path, path_regex, method, callback)
        for path, path_regex, method, callback in endpoints
        if not getattr(callback, "__module__", "").startswith("conductor_api")
        and not getattr(getattr(callback, "cls", None), "__module__", "").startswith("conductor_api")
        and not path.startswith(f"{NS}/api/")
    ]
