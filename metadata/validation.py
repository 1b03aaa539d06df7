"""Static checks on a workflow definition (SPEC §4), with no database access.

``normalize_workflow`` validates a body and returns it normalised (defaults
filled in), or raises ``DefinitionError`` naming the field by its path
(``tasks[2].loopOver[0].maxIterations``) and the task's reference name.
Checks that need other stored workflows (sub-workflow existence, cycles,
call depth) live in ``metadata.baking``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from metadata import durations, task_types
from metadata.expressions import ExpressionError, case_key, check_reference, iter_strings, paths_in
from metadata.serializers import POLICY_FIELDS, RetryTimeoutPolicySerializer
from metadata.tree import walk_tasks
from nodeflow.errors import InvalidField, flatten_errors
from nodeflow.fields import MAX_DURATION_S, is_name

# Used with fullmatch: "$" alone would also accept a trailing newline ("a\n").
REF_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,127}")
RESERVED_REFS = frozenset({"workflow", "item", "index"})
WORKFLOW_FIELDS = frozenset(
    {
        "name",
        "description",
        "tasks",
        "inputParameters",
        "outputParameters",
        "failureWorkflow",
        "timeoutSeconds",
        "timeoutPolicy",
        "maxConcurrentTasks",
        "maxConcurrentExecutions",
        "rateLimitConfig",
        "variables",
        "restartable",
    }
)
# Fields a GET returns; accepted and dropped so a fetched body can be re-posted.
READ_ONLY_FIELDS = frozenset({"version", "published", "createdAt", "publishedAt"})
WORKFLOW_TIMEOUT_POLICIES = ("TIME_OUT_WF", "ALERT_ONLY")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


class DefinitionError(InvalidField):
    def __init__(self, field: str, message: str, ref: str | None = None) -> None:
        extra = {"taskReferenceName": ref} if ref else {}
        prefix = f"task '{ref}': " if ref else ""
        super().__init__(field, message, **extra)
        self.message = f"{prefix}{field}: {message}"
        self.detail = self.message


def _is_expression(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def _whole_expression(value: Any) -> bool:
    """A string that is exactly one ``${…}`` expression."""
    return isinstance(value, str) and value.startswith("${") and value.endswith("}") and value.count("${") == 1


def _int_in(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


class _Walker:
    """Walks the task tree once to collect references, once to check them."""

    def __init__(self) -> None:
        self.refs: dict[str, str] = {}  # ref → field path of its task
        self.template_refs: set[str] = set()

    # --- pass 1: structure ------------------------------------------------
    def tasks(
        self, tasks: Any, where: str, depth: int, in_template: bool = False, owner: str | None = None
    ) -> list[dict]:
        """``owner`` is the reference name of the task holding this list (None at the top)."""
        if not isinstance(tasks, list) or not tasks:
            raise DefinitionError(where, "must be a non-empty list of tasks", owner)
        return [self.task(task, f"{where}[{index}]", depth, in_template) for index, task in enumerate(tasks)]

    def task(self, task: Any, where: str, depth: int, in_template: bool) -> dict:
        if not isinstance(task, dict):
            raise DefinitionError(where, "must be a JSON object")
        ref = task.get("taskReferenceName")
        if depth > task_types.MAX_NESTING_DEPTH:
            # Named by its reference when it has one, so the author can find it.
            named = ref if isinstance(ref, str) and REF_PATTERN.fullmatch(ref) else None
            raise DefinitionError(where, f"structural nesting depth exceeds {task_types.MAX_NESTING_DEPTH}", named)
        if not isinstance(ref, str) or not REF_PATTERN.fullmatch(ref) or ref in RESERVED_REFS:
            raise DefinitionError(
                f"{where}.taskReferenceName",
                "required: a letter or _ then letters, digits, _ or - (not workflow, item or index)",
            )
        if ref in self.refs:
            raise DefinitionError(f"{where}.taskReferenceName", f"'{ref}' is already used at {self.refs[ref]}", ref)
        self.refs[ref] = where
        if in_template:
            self.template_refs.add(ref)
        out = self._common(task, where, ref)
        handler = getattr(self, f"_type_{out['type'].lower()}", None)
        if handler:
            handler(task, out, where, ref, depth, in_template)
        self._required_inputs(out, where, ref)
        return out

    def _common(self, task: dict, where: str, ref: str) -> dict:
        task_type = task.get("type", "SIMPLE")
        if task_type not in task_types.ALL_TYPES:
            raise DefinitionError(
                f"{where}.type", f"unknown type '{task_type}'; known: {', '.join(sorted(task_types.ALL_TYPES))}", ref
            )
        allowed = task_types.COMMON_FIELDS | task_types.TYPE_FIELDS.get(task_type, frozenset()) | set(POLICY_FIELDS)
        for key in task:
            if key not in allowed:
                raise DefinitionError(f"{where}.{key}", f"unknown field for a {task_type} task", ref)
        name = task.get("name")
        if not isinstance(name, str) or not is_name(name):
            raise DefinitionError(f"{where}.name", "required: 1–128 characters from A–Z a–z 0–9 _ . -", ref)
        inputs = task.get("inputParameters", {})
        if not isinstance(inputs, dict):
            raise DefinitionError(f"{where}.inputParameters", "must be a JSON object", ref)
        _check_json(inputs, f"{where}.inputParameters", ref)
        optional = task.get("optional", False)
        if not isinstance(optional, bool):
            raise DefinitionError(f"{where}.optional", "must be true or false", ref)
        out = {
            "name": name,
            "taskReferenceName": ref,
            "type": task_type,
            "inputParameters": inputs,
            "optional": optional,
        }
        if "description" in task:
            out["description"] = str(task["description"])
        out.update(self._policy_overrides(task, where, ref))
        return out

    def _policy_overrides(self, task: dict, where: str, ref: str) -> dict:
        given = {key: task[key] for key in POLICY_FIELDS if key in task}
        if not given:
            return {}
        serializer = RetryTimeoutPolicySerializer(data=given, partial=True)
        if not serializer.is_valid():
            field, message = flatten_errors(serializer.errors)[0]
            raise DefinitionError(f"{where}.{field}", message, ref)
        return given

    def _required_inputs(self, out: dict, where: str, ref: str) -> None:
        for key in task_types.REQUIRED_INPUTS.get(out["type"], ()):
            if key not in out["inputParameters"]:
                raise DefinitionError(f"{where}.inputParameters.{key}", f"required for {out['type']}", ref)
        checker = getattr(self, f"_inputs_{out['type'].lower()}", None)
        if checker:
            checker(out["inputParameters"], f"{where}.inputParameters", ref)

    # --- operators --------------------------------------------------------
    def _type_switch(self, task, out, where, ref, depth, in_template) -> None:
        evaluator = task.get("evaluatorType", "value-param")
        if evaluator not in task_types.SWITCH_EVALUATORS:
            raise DefinitionError(f"{where}.evaluatorType", "must be value-param or javascript", ref)
        expression = task.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            raise DefinitionError(f"{where}.expression", "required: a non-empty string", ref)
        if evaluator == "value-param" and expression not in out["inputParameters"]:
            raise DefinitionError(
                f"{where}.expression", f"names input '{expression}', which inputParameters lacks", ref
            )
        cases = task.get("decisionCases", {})
        if not isinstance(cases, dict):
            raise DefinitionError(f"{where}.decisionCases", "must be an object of case → list of tasks", ref)
        out.update(
            evaluatorType=evaluator,
            expression=expression,
            decisionCases={
                case_key(case): self._branch(branch, f"{where}.decisionCases.{case}", depth + 1, in_template, ref)
                for case, branch in cases.items()
            },
        )
        out["defaultCase"] = self._branch(
            task.get("defaultCase", []), f"{where}.defaultCase", depth + 1, in_template, ref
        )

    def _branch(self, tasks: Any, where: str, depth: int, in_template: bool, owner: str) -> list[dict]:
        """A SWITCH branch may be empty; every other task list may not."""
        if tasks == []:
            return []
        return self.tasks(tasks, where, depth, in_template, owner)

    def _type_fork_join(self, task, out, where, ref, depth, in_template) -> None:
        branches = task.get("forkTasks")
        if not isinstance(branches, list) or not branches:
            raise DefinitionError(f"{where}.forkTasks", "required: a non-empty list of branches (lists of tasks)", ref)
        out["forkTasks"] = [
            self.tasks(branch, f"{where}.forkTasks[{index}]", depth + 1, in_template, ref)
            for index, branch in enumerate(branches)
        ]
        if "maxConcurrency" in task:
            out["maxConcurrency"] = self._fork_concurrency(task["maxConcurrency"], where, ref)

    def _fork_concurrency(self, value: Any, where: str, ref: str) -> int:
        if not _int_in(value, 1, task_types.MAX_FORK_CONCURRENCY):
            raise DefinitionError(
                f"{where}.maxConcurrency", f"must be an integer 1–{task_types.MAX_FORK_CONCURRENCY}", ref
            )
        return value

    def _type_join(self, task, out, where, ref, depth, in_template) -> None:
        join_on = task.get("joinOn", [])
        if not isinstance(join_on, list) or not all(isinstance(item, str) for item in join_on):
            raise DefinitionError(f"{where}.joinOn", "must be a list of task reference names", ref)
        out["joinOn"] = join_on

    def _type_fork_join_dynamic(self, task, out, where, ref, depth, in_template) -> None:
        if "dynamicForkTasksParam" in task:
            self._dynamic_tasks_fork(task, out, where, ref)
            return
        template = task.get("forkTask")
        if not isinstance(template, dict):
            raise DefinitionError(f"{where}.forkTask", "required: the task to run for each item", ref)
        if "items" not in out["inputParameters"]:
            raise DefinitionError(f"{where}.inputParameters.items", "required for FORK_JOIN_DYNAMIC", ref)
        out["forkTask"] = self.task(template, f"{where}.forkTask", depth + 1, True)
        out["maxConcurrency"] = self._fork_concurrency(
            task.get("maxConcurrency", task_types.DEFAULT_DYNAMIC_FORK_CONCURRENCY), where, ref
        )

    def _dynamic_tasks_fork(self, task, out, where, ref) -> None:
        """Conductor's dynamic fork: the tasks themselves are chosen at run
        time, named by the input ``dynamicForkTasksParam`` (a list of tasks,
        each a name and reference name), their inputs by the input
        ``dynamicForkTasksInputParamName`` (reference name → input)."""
        if "forkTask" in task:
            raise DefinitionError(f"{where}.forkTask", "give forkTask or dynamicForkTasksParam, not both", ref)
        for key in ("dynamicForkTasksParam", "dynamicForkTasksInputParamName"):
            if key not in task:
                continue
            name = task[key]
            if not isinstance(name, str) or name not in out["inputParameters"]:
                raise DefinitionError(f"{where}.{key}", f"names input {name!r}, which inputParameters lacks", ref)
            out[key] = name
        if "maxConcurrency" in task:
            out["maxConcurrency"] = self._fork_concurrency(task["maxConcurrency"], where, ref)

    def _type_do_while(self, task, out, where, ref, depth, in_template) -> None:
        condition = task.get("loopCondition")
        over_items = "items" in task
        if not (over_items and condition is None) and (not isinstance(condition, str) or not condition.strip()):
            raise DefinitionError(f"{where}.loopCondition", "required: a javascript condition over $", ref)
        if not _int_in(task.get("maxIterations"), 1, task_types.MAX_LOOP_ITERATIONS):
            raise DefinitionError(
                f"{where}.maxIterations", f"required: an integer 1–{task_types.MAX_LOOP_ITERATIONS}", ref
            )
        out.update(
            maxIterations=task["maxIterations"],
            loopOver=self.tasks(task.get("loopOver"), f"{where}.loopOver", depth + 1, in_template, ref),
        )
        if condition is not None:
            out["loopCondition"] = condition
        if over_items:
            # One iteration per item (the loop's output carries loopItem and loopIndex).
            items = task["items"]
            if not isinstance(items, list) and not _is_expression(items):
                raise DefinitionError(
                    f"{where}.items", "must be a list or an expression such as ${workflow.input.items}", ref
                )
            out["items"] = items

    def _type_exclusive_join(self, task, out, where, ref, depth, in_template) -> None:
        for key in ("joinOn", "defaultExclusiveJoinTask"):
            value = task.get(key, [])
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise DefinitionError(f"{where}.{key}", "must be a list of task reference names", ref)
            out[key] = value
        if not out["joinOn"]:
            raise DefinitionError(f"{where}.joinOn", "required: the tasks of which whichever ran is joined", ref)

    def _type_dynamic(self, task, out, where, ref, depth, in_template) -> None:
        param = task.get("dynamicTaskNameParam")
        if not isinstance(param, str) or param not in out["inputParameters"]:
            raise DefinitionError(
                f"{where}.dynamicTaskNameParam", "required: the input whose value names the task to run", ref
            )
        out["dynamicTaskNameParam"] = param

    def _type_sub_workflow(self, task, out, where, ref, depth, in_template) -> None:
        param = task.get("subWorkflowParam")
        named = isinstance(param, dict) and isinstance(param.get("name"), str)
        # A name given as an expression is resolved at run time (not baked).
        if not named or not (is_name(param["name"]) or _whole_expression(param["name"])):
            raise DefinitionError(f"{where}.subWorkflowParam.name", "required: the child workflow's name", ref)
        unknown = set(param) - {"name", "version"}
        if unknown:
            raise DefinitionError(f"{where}.subWorkflowParam.{sorted(unknown)[0]}", "unknown field", ref)
        version = param.get("version")
        if version is not None and not _int_in(version, 1, 2**31 - 1) and not _whole_expression(version):
            raise DefinitionError(f"{where}.subWorkflowParam.version", "must be a positive integer", ref)
        out["subWorkflowParam"] = {"name": param["name"], "version": param.get("version")}

    # --- inputs of specific types -----------------------------------------
    def _inputs_terminate(self, inputs: dict, where: str, ref: str) -> None:
        status = inputs.get("terminationStatus", "COMPLETED")
        if not _is_expression(status) and status not in task_types.TERMINATION_STATUSES:
            raise DefinitionError(f"{where}.terminationStatus", "must be COMPLETED, FAILED or TERMINATED", ref)

    def _inputs_wait(self, inputs: dict, where: str, ref: str) -> None:
        has = [key for key in ("duration", "until") if key in inputs]
        if not has:
            return  # waits until completed through the API
        if len(has) != 1:
            raise DefinitionError(f"{where}.duration", "WAIT takes one of duration or until, not both", ref)
        value = inputs[has[0]]
        if _is_expression(value):
            return
        try:
            if has[0] == "duration":
                if durations.parse_duration(value) > MAX_DURATION_S:
                    raise ValueError("longer than a year")
            else:
                durations.parse_instant(value)
        except ValueError as exc:
            raise DefinitionError(f"{where}.{has[0]}", str(exc), ref) from exc

    def _inputs_http(self, inputs: dict, where: str, ref: str) -> None:
        request = inputs["http_request"]
        if _is_expression(request):
            return
        if not isinstance(request, dict) or not isinstance(request.get("uri"), str) or not request["uri"]:
            raise DefinitionError(f"{where}.http_request.uri", "required: the URL to call", ref)
        method = request.get("method", "GET")
        if not _is_expression(method) and method not in HTTP_METHODS:
            raise DefinitionError(f"{where}.http_request.method", f"must be one of {', '.join(HTTP_METHODS)}", ref)

    _inputs_http_poll = _inputs_http

    def _inputs_grpc(self, inputs: dict, where: str, ref: str) -> None:
        request = inputs["grpc_request"]
        if _is_expression(request):
            return
        if not isinstance(request, dict):
            raise DefinitionError(f"{where}.grpc_request", "must be an object with host, service, method", ref)
        for key in ("host", "service", "method"):
            if not isinstance(request.get(key), str) or not request[key]:
                raise DefinitionError(f"{where}.grpc_request.{key}", "required", ref)

    def _inputs_inline(self, inputs: dict, where: str, ref: str) -> None:
        if inputs.get("evaluatorType", "javascript") != "javascript":
            raise DefinitionError(f"{where}.evaluatorType", "must be javascript", ref)
        if not isinstance(inputs["expression"], str) or not inputs["expression"].strip():
            raise DefinitionError(f"{where}.expression", "required: a javascript expression", ref)

    def _inputs_start_workflow(self, inputs: dict, where: str, ref: str) -> None:
        request = inputs["startWorkflow"]
        if _is_expression(request):
            return
        if not isinstance(request, dict) or not isinstance(request.get("name"), str) or not request["name"]:
            raise DefinitionError(f"{where}.startWorkflow.name", "required: the workflow to start", ref)

    def _inputs_json_jq_transform(self, inputs: dict, where: str, ref: str) -> None:
        query = inputs["queryExpression"]
        if not isinstance(query, str) or not query.strip():
            raise DefinitionError(f"{where}.queryExpression", "required: a jq program such as .a", ref)

    def _inputs_wait_for_webhook(self, inputs: dict, where: str, ref: str) -> None:
        if not isinstance(inputs["matches"], dict):
            raise DefinitionError(f"{where}.matches", 'must be an object like {"$.path": value}', ref)

    def _inputs_pull_workflow_messages(self, inputs: dict, where: str, ref: str) -> None:
        size = inputs.get("batchSize", 1)
        if not _is_expression(size) and not _int_in(size, 1, 100):
            raise DefinitionError(f"{where}.batchSize", "must be an integer 1–100", ref)

    # --- pass 2: references -----------------------------------------------
    def check_refs(self, tasks: list[dict]) -> None:
        for task, where in walk_tasks(tasks):
            ref = task["taskReferenceName"]
            in_template = ref in self.template_refs
            self.check_expressions(task["inputParameters"], f"{where}.inputParameters", ref, in_template)
            for key in ("joinOn", "defaultExclusiveJoinTask"):
                for target in task.get(key, []):
                    if target not in self.refs:
                        raise DefinitionError(f"{where}.{key}", f"'{target}' is not a task reference name here", ref)
            if task["type"] == "SUB_WORKFLOW":
                self.check_expressions(task["subWorkflowParam"], f"{where}.subWorkflowParam", ref, in_template)
            if "items" in task and task["type"] == "DO_WHILE":
                self.check_expressions(task["items"], f"{where}.items", ref, in_template)

    def check_expressions(self, value: Any, where: str, ref: str | None, in_template: bool) -> None:
        for location, text in iter_strings(value):
            field = f"{where}.{location}" if location else where
            try:
                for path in paths_in(text):
                    if ref is not None and path[0] == ref:
                        raise ExpressionError(
                            f"task '{ref}' cannot read its own {'.'.join(map(str, path[1:2])) or 'state'}"
                        )
                    check_reference(path, refs=frozenset(self.refs), in_template=in_template)
            except ExpressionError as exc:
                raise DefinitionError(field, str(exc), ref) from exc


def normalize_workflow(body: Any) -> dict:
    """Validate a workflow definition body; return it normalised."""
    if not isinstance(body, dict):
        raise DefinitionError("body", "must be a JSON (or YAML) object")
    body = {key: value for key, value in body.items() if key not in READ_ONLY_FIELDS}
    for key in body:
        if key not in WORKFLOW_FIELDS:
            raise DefinitionError(key, "unknown field")
    if not isinstance(body.get("name"), str) or not is_name(body["name"]):
        raise DefinitionError("name", "required: 1–128 characters from A–Z a–z 0–9 _ . -")
    walker = _Walker()
    out: dict[str, Any] = {"name": body["name"], "description": _string(body, "description")}
    out["tasks"] = walker.tasks(body.get("tasks"), "tasks", 1)
    walker.check_refs(out["tasks"])
    out.update(_workflow_settings(body))
    walker.check_expressions(out["outputParameters"], "outputParameters", None, False)
    if out["failureWorkflow"]:
        _check_admission_key(out["failureWorkflow"], "failureWorkflow")
    if out["rateLimitConfig"]:
        _check_admission_key(out["rateLimitConfig"]["rateLimitKey"])
    _check_json(out, "")
    return out


def _check_admission_key(key: str, field: str = "rateLimitConfig.rateLimitKey") -> None:
    """The admission key is resolved before any task has run, so it may only
    read the workflow itself (its input, variables, correlation id…); so is a
    failureWorkflow given as an expression, once the run has ended."""
    try:
        for path in paths_in(key):
            if path[0] != "workflow":
                raise ExpressionError("may only read ${workflow.…}: no task has run when a start is admitted")
            check_reference(path, refs=frozenset(), in_template=False)
    except ExpressionError as exc:
        raise DefinitionError(field, str(exc)) from exc


_JSON_SCALARS = (str, int, float, bool, type(None))


def _check_json(value: Any, where: str, ref: str | None = None) -> None:
    """Refuse what a JSON column cannot hold. A YAML body can carry dates,
    timestamps, sets and .nan; storing them would fail (PostgreSQL refuses NaN)
    with a 500 instead of a 400 naming the field."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, _JSON_SCALARS):
                raise DefinitionError(where or "body", f"key {key!r} is not a string (in YAML, quote it)", ref)
            _check_json(item, f"{where}.{key}" if where else str(key), ref)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json(item, f"{where}[{index}]", ref)
    elif isinstance(value, float) and not math.isfinite(value):
        raise DefinitionError(where, "must be a finite number", ref)
    elif not isinstance(value, _JSON_SCALARS):
        raise DefinitionError(where, "is not a JSON value (in YAML, quote dates and times)", ref)


def _string(body: dict, key: str) -> str:
    value = body.get(key, "")
    if not isinstance(value, str):
        raise DefinitionError(key, "must be a string")
    return value


def _workflow_settings(body: dict) -> dict:
    inputs = body.get("inputParameters", [])
    if not isinstance(inputs, list) or not all(isinstance(item, str) for item in inputs):
        raise DefinitionError("inputParameters", "must be a list of input names")
    outputs = body.get("outputParameters", {})
    if not isinstance(outputs, dict):
        raise DefinitionError("outputParameters", "must be a JSON object")
    variables = body.get("variables", {})
    if not isinstance(variables, dict):
        raise DefinitionError("variables", "must be a JSON object")
    failure = body.get("failureWorkflow")
    if failure is not None and (not isinstance(failure, str) or not (is_name(failure) or _whole_expression(failure))):
        raise DefinitionError("failureWorkflow", "must be a workflow name (or an expression giving one)")
    restartable = body.get("restartable", True)
    if not isinstance(restartable, bool):
        raise DefinitionError("restartable", "must be true or false")
    timeout = body.get("timeoutSeconds", 0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout <= MAX_DURATION_S:
        raise DefinitionError("timeoutSeconds", f"must be a number of seconds 0–{int(MAX_DURATION_S)}")
    policy = body.get("timeoutPolicy", "TIME_OUT_WF")
    if policy not in WORKFLOW_TIMEOUT_POLICIES:
        raise DefinitionError("timeoutPolicy", "must be TIME_OUT_WF or ALERT_ONLY")
    limits = {key: body.get(key, 0) for key in ("maxConcurrentTasks", "maxConcurrentExecutions")}
    for key, value in limits.items():
        if not _int_in(value, 0, 1_000_000):
            raise DefinitionError(key, "must be an integer ≥ 0 (0 = no limit)")
    return {
        "inputParameters": inputs,
        "outputParameters": outputs,
        "variables": variables,
        "failureWorkflow": failure,
        "timeoutSeconds": timeout,
        "timeoutPolicy": policy,
        **limits,
        "rateLimitConfig": _rate_limit_config(body.get("rateLimitConfig")),
        **({} if restartable else {"restartable": False}),
    }


def _rate_limit_config(config: Any) -> dict | None:
    if config is None:
        return None
    if not isinstance(config, dict):
        raise DefinitionError("rateLimitConfig", "must be an object with rateLimitKey and concurrentExecLimit")
    unknown = set(config) - {"rateLimitKey", "concurrentExecLimit"}
    if unknown:
        raise DefinitionError(f"rateLimitConfig.{sorted(unknown)[0]}", "unknown field")
    key = config.get("rateLimitKey")
    if not isinstance(key, str) or not key:
        raise DefinitionError(
            "rateLimitConfig.rateLimitKey", "required: a key or an expression like ${workflow.input.tenantId}"
        )
    if not _int_in(config.get("concurrentExecLimit"), 1, 1_000_000):
        raise DefinitionError("rateLimitConfig.concurrentExecLimit", "required: an integer ≥ 1")
    return {"rateLimitKey": key, "concurrentExecLimit": config["concurrentExecLimit"]}
