"""Definitions as Conductor writes them, translated at registration into
Node Flow's native form (docs/conductor.md).

One engine path: a Conductor body is rewritten into the native body that
``metadata.validation`` checks and the decider runs, so every control holds
for it as for any other; the body as posted is kept and a GET answers with
it. A Conductor field is

- informational (``ownerEmail``, ``createTime``, ``schemaVersion``, …):
  accepted and kept, with no effect;
- set to its Conductor default (``startDelay: 0``, ``inputTemplate: {}``,
  ``null`` for an unset field): accepted and dropped;
- renamed or translated (``DECISION`` → SWITCH, ``LAMBDA`` → INLINE,
  ``graaljs`` → javascript, flat HTTP fields → ``http_request``, an embedded
  ``taskDefinition`` → the task's policy overrides);
- otherwise, a meaning Node Flow does not implement: refused with 400
  naming the field and saying so.

Pure: no database, no Django.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from metadata import task_types
from metadata.validation import DefinitionError
from nodeflow.errors import InvalidField

NOT_IMPLEMENTED = "not implemented by Node Flow"
# Kept as given and answered on GET; no effect on how anything runs.
WORKFLOW_INFO = frozenset(
    {
        "ownerEmail",
        "createTime",
        "updateTime",
        "createdBy",
        "updatedBy",
        "ownerApp",
        "accessPolicy",
        "tags",
        "metadata",
        "enforceSchema",  # without inputSchema/outputSchema there is nothing to enforce
    }
)
SCHEMA_VERSIONS = (1, 2)
_EMPTY: tuple[Any, ...] = (None, [], {}, "")
# Accepted only at their Conductor default (or null): field → the values that mean "unset".
WORKFLOW_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "workflowStatusListenerEnabled": (None, False),
    "workflowStatusListenerSink": _EMPTY,
    "inputTemplate": _EMPTY,
    "inputSchema": _EMPTY,
    "outputSchema": _EMPTY,
    "maskedFields": _EMPTY,
    "cacheConfig": _EMPTY,
    "failureWorkflowVersion": (None,),
}
# Native workflow fields a Conductor body may send as null.
NULLABLE_NATIVE = frozenset(
    {
        "description",
        "inputParameters",
        "outputParameters",
        "variables",
        "timeoutSeconds",
        "timeoutPolicy",
        "rateLimitConfig",
        "failureWorkflow",
    }
)

# Fields of a workflow task that Conductor serialises on every task, each with
# the values that mean "unset", and the types on which the field means
# something (there it is translated or kept).
_TASK_DEFAULTS: dict[str, tuple[tuple[Any, ...], frozenset[str]]] = {
    "startDelay": ((None, 0), frozenset()),
    "asyncComplete": ((None, False), frozenset()),
    "rateLimited": ((None, False), frozenset()),
    "permissive": ((None, False), frozenset()),
    "sink": (_EMPTY, frozenset()),
    "onStateChange": (_EMPTY, frozenset()),
    "cacheConfig": (_EMPTY, frozenset()),
    "taskDefinition": (_EMPTY, frozenset({"*"})),
    "decisionCases": (_EMPTY, frozenset({"SWITCH", "DECISION"})),
    "defaultCase": (_EMPTY, frozenset({"SWITCH", "DECISION"})),
    "forkTasks": (_EMPTY, frozenset({"FORK_JOIN"})),
    "joinOn": (_EMPTY, frozenset({"JOIN", "EXCLUSIVE_JOIN"})),
    "defaultExclusiveJoinTask": (_EMPTY, frozenset({"EXCLUSIVE_JOIN"})),
    "loopOver": (_EMPTY, frozenset({"DO_WHILE"})),
    "loopCondition": (_EMPTY, frozenset({"DO_WHILE"})),
    "items": (_EMPTY, frozenset({"DO_WHILE"})),
    "caseValueParam": (_EMPTY, frozenset({"DECISION"})),
    "caseExpression": (_EMPTY, frozenset({"DECISION"})),
    "evaluatorType": (_EMPTY, frozenset({"SWITCH", "DECISION"})),
    "expression": (_EMPTY, frozenset({"SWITCH", "DECISION"})),
    "scriptExpression": (_EMPTY, frozenset()),
    "dynamicTaskNameParam": (_EMPTY, frozenset({"DYNAMIC"})),
    "dynamicForkTasksParam": (_EMPTY, frozenset({"FORK_JOIN_DYNAMIC"})),
    "dynamicForkTasksInputParamName": (_EMPTY, frozenset({"FORK_JOIN_DYNAMIC"})),
    "dynamicForkJoinTasksParam": (_EMPTY, frozenset()),
    "subWorkflowParam": (_EMPTY, frozenset({"SUB_WORKFLOW"})),
    "retryCount": ((None,), frozenset({"*"})),
    # Conductor's JOIN evaluates SYNC (at once) or ASYNC (later); here a JOIN is
    # evaluated in the decision that sees its fork done, so both mean the same.
    "joinMode": ((None, "SYNC", "ASYNC"), frozenset()),
}
CONDUCTOR_TASK_FIELDS = frozenset(_TASK_DEFAULTS)
# HTTP fields Conductor also accepts flat in inputParameters.
HTTP_FLAT = ("uri", "method", "headers", "body", "accept", "contentType", "vipAddress", "appName", "encode")
HTTP_FLAT_TIMEOUTS_MS = {"connectionTimeOut": "connectTimeout", "readTimeOut": "readTimeout"}
HTTP_HEADER_FIELDS = {"contentType": "Content-Type", "accept": "Accept"}
SUB_WORKFLOW_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "taskToDomain": _EMPTY,
    "workflowDefinition": _EMPTY,
    "idempotencyKey": _EMPTY,
    "idempotencyStrategy": _EMPTY,
    "priority": (None, 0),
}
REFUSED_TYPES = {
    "EVENT": "EVENT tasks publish to an event bus, and Node Flow has none (refused: not implemented)",
    "KAFKA_PUBLISH": "KAFKA_PUBLISH needs a Kafka connection, which Node Flow does not have (not implemented)",
}
JAVASCRIPT_EVALUATORS = ("javascript", "graaljs")


@dataclass
class Translated:
    body: Any
    source: dict | None = None  # the body as posted, when it was not already native
    warnings: list[str] = field(default_factory=list)


def _is_unset(value: Any, unset: tuple[Any, ...]) -> bool:
    return any(value == candidate and type(value) is type(candidate) for candidate in unset) or value is None


def _is_expression(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


# --- workflow definitions ---------------------------------------------------------


def translate_workflow(body: Any) -> Translated:
    """The native body for a workflow definition body, Conductor's or native."""
    if not isinstance(body, dict):
        return Translated(body)
    original = copy.deepcopy(body)
    out = dict(body)
    info: dict[str, Any] = {}
    for key in list(out):
        value = out[key]
        if key in WORKFLOW_INFO:
            info[key] = out.pop(key)
        elif key == "schemaVersion":
            if value not in SCHEMA_VERSIONS:
                raise DefinitionError(key, "Conductor's schemaVersion is 2 (1 is accepted too)")
            info[key] = out.pop(key)
        elif key in WORKFLOW_DEFAULTS:
            if not _is_unset(value, WORKFLOW_DEFAULTS[key]):
                raise DefinitionError(key, f"{NOT_IMPLEMENTED} (only its default is accepted)")
            out.pop(key)
        elif key in NULLABLE_NATIVE and value is None:
            out.pop(key)
    if "restartable" in out and out["restartable"] is None:
        out.pop("restartable")
    warnings: list[str] = []
    tasks = out.get("tasks")
    if isinstance(tasks, list):
        loops = _loop_refs(tasks)
        out["tasks"] = _tasks(tasks, "tasks", warnings, loops)
        for key in ("outputParameters",):
            if isinstance(out.get(key), dict):
                out[key] = _rewrite_expressions(out[key], loops)
        if isinstance(out.get("rateLimitConfig"), dict):
            out["rateLimitConfig"] = _rate_limit_config(out["rateLimitConfig"])
    changed = out != body or bool(info)
    return Translated(out, original if changed else None, warnings)


def _rate_limit_config(config: dict) -> dict:
    """Conductor's ``policy`` QUEUE (its default) is what admission by key
    does here: later starts wait in line. REJECT is not implemented."""
    policy = config.get("policy")
    if policy not in (None, "QUEUE"):
        raise DefinitionError("rateLimitConfig.policy", f"{NOT_IMPLEMENTED}: later starts queue (QUEUE)")
    return {key: value for key, value in config.items() if value is not None and key != "policy"}


def _loop_refs(tasks: list) -> frozenset[str]:
    found: set[str] = set()

    def visit(items: Any) -> None:
        if not isinstance(items, list):
            return
        for task in items:
            if not isinstance(task, dict):
                continue
            if task.get("type") == "DO_WHILE" and isinstance(task.get("taskReferenceName"), str):
                found.add(task["taskReferenceName"])
            for case in (
                (task.get("decisionCases") or {}).values() if isinstance(task.get("decisionCases"), dict) else ()
            ):
                visit(case)
            visit(task.get("defaultCase"))
            for branch in task["forkTasks"] if isinstance(task.get("forkTasks"), list) else ():
                visit(branch)
            visit(task.get("loopOver"))

    visit(tasks)
    return frozenset(found)


def _tasks(tasks: Any, where: str, warnings: list[str], loops: frozenset[str]) -> Any:
    if not isinstance(tasks, list):
        return tasks
    return [_task(task, f"{where}[{index}]", warnings, loops) for index, task in enumerate(tasks)]


def _task(task: Any, where: str, warnings: list[str], loops: frozenset[str]) -> Any:
    if not isinstance(task, dict):
        return task
    out = dict(task)
    ref = out.get("taskReferenceName") if isinstance(out.get("taskReferenceName"), str) else None
    task_type = out.get("type") or "SIMPLE"
    if not isinstance(task_type, str):
        return out  # not a type: the validation refuses it, naming the field
    if task_type in REFUSED_TYPES:
        raise DefinitionError(f"{where}.type", REFUSED_TYPES[task_type], ref)
    if "type" in out and out["type"] is None:
        out.pop("type")
    if "inputParameters" in out and out["inputParameters"] is None:
        out.pop("inputParameters")
    if "name" not in out and ref is not None and task_type in task_types.OPERATORS | {"EXCLUSIVE_JOIN", "DYNAMIC"}:
        out["name"] = ref  # Conductor lets a JOIN or a dynamic fork go unnamed
    if out.get("optional") is None:
        out.pop("optional", None)
    if out.get("description") is None:
        out.pop("description", None)
    for key, (unset, types) in _TASK_DEFAULTS.items():
        if key not in out:
            continue
        if "*" in types or task_type in types:
            if out[key] is None:
                out.pop(key)  # null: unset, the native default applies
            continue
        if not _is_unset(out[key], unset):
            raise DefinitionError(f"{where}.{key}", f"{NOT_IMPLEMENTED} on a {task_type} task", ref)
        out.pop(key)
    if "taskDefinition" in out:
        embedded = out.pop("taskDefinition")
        if not _is_unset(embedded, _EMPTY):
            out.update(_embedded_policy(embedded, f"{where}.taskDefinition", ref, out))
    if task_type == "USER_TASK":
        # Conductor's task for a person (a test-harness system task in OSS):
        # here a HUMAN task, completed through the API.
        out["type"] = task_type = "HUMAN"
    translate = _TYPE_TRANSLATIONS.get(task_type)
    if translate is not None:
        translate(out, where, ref, warnings)
    for key in ("decisionCases",):
        if isinstance(out.get(key), dict):
            out[key] = {
                case: _tasks(branch, f"{where}.{key}.{case}", warnings, loops) for case, branch in out[key].items()
            }
    if "defaultCase" in out:
        out["defaultCase"] = _tasks(out["defaultCase"], f"{where}.defaultCase", warnings, loops)
    if isinstance(out.get("forkTasks"), list):
        out["forkTasks"] = [
            _tasks(b, f"{where}.forkTasks[{i}]", warnings, loops) for i, b in enumerate(out["forkTasks"])
        ]
    if "loopOver" in out:
        out["loopOver"] = _tasks(out["loopOver"], f"{where}.loopOver", warnings, loops)
    if isinstance(out.get("forkTask"), dict):
        out["forkTask"] = _task(out["forkTask"], f"{where}.forkTask", warnings, loops)
    if "inputParameters" in out:
        out["inputParameters"] = _rewrite_expressions(out["inputParameters"], loops)
    if isinstance(out.get("subWorkflowParam"), dict):
        out["subWorkflowParam"] = _rewrite_expressions(out["subWorkflowParam"], loops)
    return out


_EMBEDDED_POLICY = {
    "retryCount": "retryCount",
    "retryLogic": "retryLogic",
    "retryDelaySeconds": "retryDelaySeconds",
    "backoffScaleFactor": "backoffScaleFactor",
    "timeoutSeconds": "timeoutSeconds",
    "timeoutPolicy": "timeoutPolicy",
    "responseTimeoutSeconds": "heartbeatTimeout",
    "pollTimeoutSeconds": "scheduleToStartTimeout",
}


def _embedded_policy(embedded: Any, where: str, ref: str | None, task: dict) -> dict:
    """A task definition embedded in a workflow task: its retry and timeout
    policy becomes the task's own overrides (live controls cannot be set per
    task: a non-default one is refused)."""
    if not isinstance(embedded, dict):
        raise DefinitionError(where, "must be a task definition object", ref)
    try:
        native, _extras = translate_taskdef(embedded, prefix=f"{where}.")
    except InvalidField as exc:
        field = exc.fields["field"]
        raise DefinitionError(field, exc.message.removeprefix(f"{field}: "), ref) from exc
    for key in ("concurrentExecLimit", "rateLimitPerFrequency"):
        if native.get(key):
            raise DefinitionError(
                f"{where}.{key}",
                "a live control belongs on the registered task definition, not on a workflow task",
                ref,
            )
    found = {}
    for native_key in _EMBEDDED_POLICY.values():
        if native_key in native and native_key not in task:
            found[native_key] = native[native_key]
    if "retryCount" in task:
        found.pop("retryCount", None)
    return found


# --- per type -----------------------------------------------------------------------


def _decision(task: dict, where: str, ref: str | None, warnings: list[str]) -> None:
    """DECISION is SWITCH: ``caseValueParam`` names the input whose value picks
    the case; ``caseExpression`` is JavaScript over ``$`` (the inputs)."""
    task["type"] = "SWITCH"
    value_param, expression = task.pop("caseValueParam", None), task.pop("caseExpression", None)
    if value_param is not None and expression is not None:
        raise DefinitionError(f"{where}.caseExpression", "give caseValueParam or caseExpression, not both", ref)
    if value_param is not None:
        task["evaluatorType"], task["expression"] = "value-param", value_param
    elif expression is not None:
        task["evaluatorType"], task["expression"] = "javascript", expression
    _switch(task, where, ref, warnings)


def _switch(task: dict, where: str, ref: str | None, warnings: list[str]) -> None:
    if task.get("evaluatorType") == "graaljs":
        task["evaluatorType"] = "javascript"
    task.setdefault("decisionCases", {})


def _lambda(task: dict, where: str, ref: str | None, warnings: list[str]) -> None:
    """LAMBDA is INLINE: ``scriptExpression`` is a function body (it
    ``return``s), run in the same sandbox; output ``{"result"}``."""
    given = task.get("inputParameters")
    inputs = dict(given) if isinstance(given, dict) else {}
    script = inputs.pop("scriptExpression", None)
    if not isinstance(script, str) or not script.strip():
        raise DefinitionError(f"{where}.inputParameters.scriptExpression", "required: the LAMBDA's script", ref)
    task["type"] = "INLINE"
    inputs["evaluatorType"] = "javascript"
    inputs["expression"] = f"(function () {{\n{script}\n}})()"
    task["inputParameters"] = inputs


def _inline(task: dict, where: str, ref: str | None, warnings: list[str]) -> None:
    inputs = task.get("inputParameters")
    if not isinstance(inputs, dict):
        return
    evaluator = inputs.get("evaluatorType")
    if evaluator == "graaljs":
        task["inputParameters"] = {**inputs, "evaluatorType": "javascript"}
    elif evaluator == "value-param" and isinstance(inputs.get("expression"), str):
        # value-param: the result is the input the expression names.
        name = inputs["expression"]
        task["inputParameters"] = {**inputs, "evaluatorType": "javascript", "expression": f"$[{json.dumps(name)}]"}


def _http(task: dict, where: str, ref: str | None, warnings: list[str]) -> None:
    """Conductor also takes an HTTP task's fields flat in inputParameters."""
    inputs = task.get("inputParameters")
    if not isinstance(inputs, dict) or "http_request" in inputs or "uri" not in inputs:
        return
    inputs = dict(inputs)
    request = {key: inputs.pop(key) for key in HTTP_FLAT if key in inputs}
    for flat, native in HTTP_FLAT_TIMEOUTS_MS.items():
        if flat in inputs:
            value = inputs.pop(flat)
            request[native] = value / 1000 if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    inputs["http_request"] = request
    task["inputParameters"] = inputs


def _http_request_timeouts(task: dict, where: str, ref: str | None, warnings: list[str]) -> None:
    """Conductor's HTTP fields in ``http_request``: timeouts in milliseconds
    become seconds; ``contentType`` and ``accept`` become the headers they set."""
    _http(task, where, ref, warnings)
    inputs = task.get("inputParameters")
    request = inputs.get("http_request") if isinstance(inputs, dict) else None
    if not isinstance(request, dict):
        return
    if not any(key in request for key in (*HTTP_FLAT_TIMEOUTS_MS, *HTTP_HEADER_FIELDS)):
        return
    request = dict(request)
    for flat, native in HTTP_FLAT_TIMEOUTS_MS.items():
        if flat in request:
            value = request.pop(flat)
            request[native] = value / 1000 if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    headers = request.get("headers", {})
    if isinstance(headers, dict):
        headers = dict(headers)
        for field_name, header in HTTP_HEADER_FIELDS.items():
            value = request.pop(field_name, None)
            if value is not None and not any(key.lower() == header.lower() for key in headers):
                headers[header] = value
        request["headers"] = headers
    task["inputParameters"] = {**(inputs or {}), "http_request": request}


def _do_while(task: dict, where: str, ref: str | None, warnings: list[str]) -> None:
    if task.get("maxIterations") is None:
        task.pop("maxIterations", None)
        task["maxIterations"] = task_types.MAX_LOOP_ITERATIONS
        warnings.append(
            f"{where}.maxIterations: not given, so the loop '{ref}' gets the ceiling of "
            f"{task_types.MAX_LOOP_ITERATIONS} iterations (still true after that fails it)"
        )
    if "items" in task and not task.get("loopCondition"):
        task.pop("loopCondition", None)


def _sub_workflow(task: dict, where: str, ref: str | None, warnings: list[str]) -> None:
    param = task.get("subWorkflowParam")
    if not isinstance(param, dict):
        return
    param = dict(param)
    for key, unset in SUB_WORKFLOW_DEFAULTS.items():
        if key in param:
            if not _is_unset(param[key], unset):
                raise DefinitionError(f"{where}.subWorkflowParam.{key}", NOT_IMPLEMENTED, ref)
            param.pop(key)
    task["subWorkflowParam"] = param


def _wait(task: dict, where: str, ref: str | None, warnings: list[str]) -> None:
    inputs = task.get("inputParameters")
    if isinstance(inputs, dict):
        task["inputParameters"] = {k: v for k, v in inputs.items() if not (k in ("duration", "until") and v in _EMPTY)}


_TYPE_TRANSLATIONS: dict[str, Callable[[dict, str, str | None, list[str]], None]] = {
    "DECISION": _decision,
    "SWITCH": _switch,
    "LAMBDA": _lambda,
    "INLINE": _inline,
    "HTTP": _http_request_timeouts,
    "HTTP_POLL": _http_request_timeouts,
    "DO_WHILE": _do_while,
    "SUB_WORKFLOW": _sub_workflow,
    "WAIT": _wait,
}


# --- expressions ----------------------------------------------------------------------

# ``${loop['iteration']}`` / ``${loop.iteration}``: the iteration of a DO_WHILE,
# which Node Flow keeps in the loop's output.
_LOOP_ITERATION = re.compile(
    r"\$\{\s*([A-Za-z_][A-Za-z0-9_\-]*)\s*(?:\[\s*'iteration'\s*\]|\[\s*\"iteration\"\s*\]|\.iteration)\s*\}"
)


def _rewrite_expressions(value: Any, loops: frozenset[str]) -> Any:
    if isinstance(value, str):
        if "${" not in value:
            return value
        return _LOOP_ITERATION.sub(
            lambda m: f"${{{m.group(1)}.output.iteration}}" if m.group(1) in loops else m.group(0), value
        )
    if isinstance(value, dict):
        return {key: _rewrite_expressions(item, loops) for key, item in value.items()}
    if isinstance(value, list):
        return [_rewrite_expressions(item, loops) for item in value]
    return value


# --- task definitions -------------------------------------------------------------------

TASKDEF_INFO = frozenset(
    {
        "ownerEmail",
        "createTime",
        "updateTime",
        "createdBy",
        "updatedBy",
        "ownerApp",
        "accessPolicy",
        "tags",
        "inputKeys",
        "outputKeys",
        "enforceSchema",
        "baseType",
    }
)
TASKDEF_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "inputTemplate": _EMPTY,
    "isolationGroupId": _EMPTY,
    "executionNameSpace": _EMPTY,
    "inputSchema": _EMPTY,
    "outputSchema": _EMPTY,
    "totalTimeoutSeconds": (None, 0),
}
# Conductor's name → Node Flow's.
TASKDEF_ALIASES = {
    "responseTimeoutSeconds": "heartbeatTimeout",
    "pollTimeoutSeconds": "scheduleToStartTimeout",
    "rateLimitFrequencyInSeconds": "rateLimitFrequencySeconds",
}


def translate_taskdef(body: Any, *, prefix: str = "") -> tuple[Any, dict]:
    """(the native body, what to keep for GET: ``{"fields": informational,
    "aliases": Conductor names given}``). Raises InvalidField naming the field."""
    if not isinstance(body, dict):
        return body, {}
    out: dict[str, Any] = {}
    info: dict[str, Any] = {}
    aliases: list[str] = []
    for key, value in body.items():
        if key in TASKDEF_INFO:
            info[key] = value
        elif key in TASKDEF_DEFAULTS:
            if not _is_unset(value, TASKDEF_DEFAULTS[key]):
                raise InvalidField(f"{prefix}{key}", f"{NOT_IMPLEMENTED} (only its default is accepted)")
        elif key in TASKDEF_ALIASES:
            native = TASKDEF_ALIASES[key]
            if native in body:
                raise InvalidField(f"{prefix}{key}", f"give {key} or {native}, not both")
            aliases.append(key)
            if value is not None:
                out[native] = value
        else:
            out[key] = value
    rate, window = out.get("rateLimitPerFrequency"), out.get("rateLimitFrequencySeconds")
    if "rateLimitFrequencyInSeconds" in aliases and not rate and window is not None:
        # Conductor's window defaults to 1 s and means nothing without a rate.
        out.pop("rateLimitFrequencySeconds", None)
    extras: dict[str, Any] = {}
    if info:
        extras["fields"] = info
    if aliases:
        extras["aliases"] = aliases
    return out, extras


def taskdef_view(native: dict, extras: dict) -> dict:
    """A task definition's GET body: every native field, then the Conductor
    fields it was given (informational ones as kept, renamed ones with the
    live value of the native field they name)."""
    view = dict(native)
    view.update(extras.get("fields") or {})
    for alias in extras.get("aliases") or ():
        view[alias] = native.get(TASKDEF_ALIASES[alias])
    return view
