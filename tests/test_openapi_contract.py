"""The OpenAPI schema at /api/schema/ is valid and tells the truth (issue 19.1).

Valid: ``openapi-spec-validator`` accepts it. True: the README's
walk-through, every other operation and the common errors are played
against the server, and every answer is held against the schema of its
operation and status, with every documented object closed (no
``additionalProperties`` where the schema lists the properties): a field
the server returns and the schema leaves out fails, as does a wrong type,
a missing required field, a value outside its enum or an undocumented
status. Every operation in the schema must be answered at least once with
a success. tests/test_fuzz_schema.py fuzzes the same schema's inputs.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone
from openapi_schema_validator import OAS30Validator, oas30_format_checker
from openapi_spec_validator import validate as validate_spec

from executions.models import BreakerState
from nodeflow.models import Namespace
from nodeflow.views import NamespacedView
from tests.conftest import Api

NS = "/v1/ns/{ns}"


@functools.cache
def published_schema() -> dict:
    response = Client().get("/api/schema/?format=json")
    assert response.status_code == 200, response.content[:500]
    return json.loads(response.content)


def operations(schema: dict) -> list[tuple[str, str, dict]]:
    return [
        (method.upper(), path, operation)
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
    ]


# --- the schema itself --------------------------------------------------------


def test_the_schema_is_valid_openapi():
    validate_spec(published_schema())


def test_every_operation_id_is_verb_noun_in_snake_case_and_unique():
    ids = [operation["operationId"] for _, _, operation in operations(published_schema())]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    for operation_id in ids:
        assert re.fullmatch(r"[a-z]+(_[a-z]+)+", operation_id), operation_id
        assert not operation_id.startswith("v1_"), operation_id


def test_every_operation_is_described_for_users():
    internal = NamespacedView.__doc__.split("\n")[0].strip()
    for method, path, operation in operations(published_schema()):
        assert operation.get("summary"), (method, path)
        description = operation.get("description", "")
        assert description, (method, path)
        assert internal not in description and "``" not in description, (method, path, description)
        if operation.get("security"):
            assert re.search(r"Roles: [a-z, ]+\.$", description), (method, path, description)


def test_no_component_publishes_a_docstring_meant_for_the_code():
    for name, component in published_schema()["components"]["schemas"].items():
        assert "``" not in component.get("description", ""), name
        assert "Refuses keys it does not know" not in component.get("description", ""), name


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    if "allOf" in node and len(node["allOf"]) == 1:
        return _resolve(schema, node["allOf"][0])
    return node


@pytest.mark.parametrize(
    ("component", "prop", "values"),
    [
        ("Execution", "status", {"RUNNING", "PAUSED", "COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED"}),
        ("Task", "status", {"SCHEDULED", "IN_PROGRESS", "COMPLETED", "CANCELED", "SKIPPED"}),
        ("Task", "type", {"SIMPLE", "FORK_JOIN", "HTTP", "WAIT"}),
        ("HeartbeatAnswer", "status", {"IN_PROGRESS"}),
        ("ResultRequest", "status", {"COMPLETED", "FAILED", "FAILED_WITH_TERMINAL_ERROR", "IN_PROGRESS"}),
        ("TaskDefinition", "retryLogic", {"FIXED", "LINEAR_BACKOFF", "EXPONENTIAL_BACKOFF"}),
        ("TaskDefinition", "timeoutPolicy", {"RETRY", "TIME_OUT_WF", "ALERT_ONLY"}),
        ("WorkflowDefinition", "timeoutPolicy", {"TIME_OUT_WF", "ALERT_ONLY"}),
        ("WorkflowTask", "type", {"SIMPLE", "SWITCH", "DO_WHILE"}),
        ("Breaker", "state", {"CLOSED", "OPEN", "HALF_OPEN"}),
        ("BatchStartAnswer", "executionStatus", {"RUNNING", "COMPLETED"}),
    ],
)
def test_closed_sets_are_named_enums(component, prop, values):
    schema = published_schema()
    declared = schema["components"]["schemas"][component]["properties"][prop]
    assert "$ref" in json.dumps(declared), (component, prop, declared)  # a component: one enum in a client
    assert values <= set(_resolve(schema, declared)["enum"]), (component, prop)


def _request_schemas(schema: dict):
    """Each object a request body may be (a body of one or a list: both)."""
    for method, path, operation in operations(schema):
        for media, content in operation.get("requestBody", {}).get("content", {}).items():
            body = _resolve(schema, content["schema"])
            for form in body.get("oneOf", [body]):
                form = _resolve(schema, form)
                yield method, path, media, _resolve(schema, form["items"]) if form.get("type") == "array" else form


def test_request_bodies_refuse_unknown_keys_as_the_server_does():
    # Every body but a message's and a webhook's (any JSON) is a strict object.
    schema = published_schema()
    open_bodies = {f"{NS}/executions/{{execution_id}}/messages", f"{NS}/webhooks/{{name}}"}
    for method, path, media, body in _request_schemas(schema):
        if path in open_bodies:
            continue
        assert body.get("additionalProperties") is False, (method, path, media)
        for name, prop in body.get("properties", {}).items():
            nested = _resolve(schema, prop)
            if nested.get("type") == "object" and "properties" in nested:
                assert nested.get("additionalProperties") is False, (method, path, name)


def test_every_default_satisfies_its_own_field():
    # PollRequest.workerId said minLength 1 with default "": a generated
    # client sent the default and was refused.
    schema = published_schema()
    for name, component in schema["components"]["schemas"].items():
        for prop, declared in component.get("properties", {}).items():
            if "default" in declared:
                node = {**declared, "components": schema["components"]}
                errors = list(
                    OAS30Validator(node, format_checker=oas30_format_checker).iter_errors(declared["default"])
                )
                assert not errors, (name, prop, declared["default"], errors[0].message)


def test_the_conductor_dialect_is_not_in_this_schema():
    assert not [path for path in published_schema()["paths"] if path.startswith(f"{NS}/api/")]


# --- real answers against the schema -------------------------------------------


def closed(schema: Any) -> Any:
    """``schema`` with every object that lists its properties closed to
    others; and ``nullable`` beside a reference (``{"allOf": [{"$ref": …}],
    "nullable": true}``, drf-spectacular's OpenAPI 3.0 for a nullable
    component) read as "that, or null", as schemathesis and generated
    clients read it (a 3.0 validator reads the null as failing the ``allOf``)."""
    if isinstance(schema, dict):
        out = {key: closed(value) for key, value in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        if out.get("nullable") is True and "type" not in out:
            rest = {key: value for key, value in out.items() if key != "nullable"}
            return {"anyOf": [rest, {"enum": [None]}]}
        return out
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    return schema


@dataclass
class Answer:
    method: str
    path: str  # the schema's path template
    status: int
    body: Any
    content_type: str


@dataclass
class Recorder:
    """Calls the API by its schema's path templates and keeps every answer."""

    keys: dict[str, str]
    schema: dict
    answers: list[Answer] = field(default_factory=list)

    def call(self, role, method, template, body=None, *, expect, raw=None, content_type="application/json", **params):
        url = template.format(ns="default", **params)
        api = Api(self.keys.get(role))
        response = api.call(method, url, body, raw=raw, content_type=content_type)
        text = response.content.decode()
        content_type = response.get("Content-Type", "")
        answer = Answer(
            method, template.split("?")[0], response.status_code, json.loads(text) if text else None, content_type
        )
        self.answers.append(answer)
        assert response.status_code == expect, (method, url, response.status_code, text[:1000])
        return answer.body


def check(schema: dict, answer: Answer) -> list[str]:
    """What is wrong with ``answer`` by the schema of its operation."""
    where = f"{answer.method} {answer.path} → {answer.status}"
    operation = schema["paths"][answer.path][answer.method.lower()]
    documented = operation["responses"].get(str(answer.status)) or operation["responses"].get("default")
    if documented is None:
        return [f"{where}: status not documented"]
    content = documented.get("content")
    if not content:
        return [] if answer.body is None else [f"{where}: documented without a body, answered {answer.body!r:.200}"]
    media = answer.content_type.split(";")[0].strip()
    if media not in content:
        return [f"{where}: content type {media!r} not documented ({sorted(content)})"]
    root = {**content[media]["schema"], "components": schema["components"]}
    validator = OAS30Validator(root, format_checker=oas30_format_checker)
    return [
        f"{where}: at {'/'.join(map(str, error.absolute_path)) or '(body)'}: {error.message:.300}"
        for error in validator.iter_errors(answer.body)
    ]


CHARGE = {
    "name": "charge",
    "retryCount": 5,
    "retryLogic": "EXPONENTIAL_BACKOFF",
    "retryDelaySeconds": 2,
    "backoffScaleFactor": 2,
    "maxRetryDelaySeconds": 300,
    "jitter": 0.2,
    "retryBudget": 0.3,
    "nonRetryableErrors": ["card_declined", "INVALID_ARGUMENT"],
}
CHECKOUT_YAML = """\
name: checkout
tasks:
  - name: charge
    taskReferenceName: charge
    inputParameters:
      amount: ${workflow.input.amount}
  - name: notify
    taskReferenceName: notify
    optional: true
    retryCount: 1
    inputParameters:
      chargeId: ${charge.output.id}
"""
HOLD = {
    "name": "hold",
    "description": "a human step, then a webhook",
    "inputParameters": ["who"],
    "outputParameters": {"done": "${approve.output.ok}"},
    "timeoutSeconds": 3600,
    "rateLimitConfig": {"rateLimitKey": "${workflow.input.who}", "concurrentExecLimit": 5},
    "tasks": [
        {"name": "approve", "taskReferenceName": "approve", "type": "HUMAN"},
        {
            "name": "paid",
            "taskReferenceName": "paid",
            "type": "WAIT_FOR_WEBHOOK",
            "inputParameters": {"matches": {"$.order": "${workflow.input.who}"}},
        },
    ],
}


def walk_through(r: Recorder) -> None:
    """The README's walk-through, then every other route, then the errors."""
    e = NS + "/executions"
    td, wd = NS + "/metadata/task-definitions", NS + "/metadata/workflow-definitions"
    r.call("none", "GET", "/healthz", expect=200)
    # definitions
    r.call("admin", "POST", td, CHARGE, expect=201)
    r.call("admin", "POST", td, CHARGE, expect=200)
    r.call(
        "admin",
        "POST",
        td,
        {
            "name": "gate_user",
            "semaphores": ["erp"],
            "rateLimitPerFrequency": 5,
            "rateLimitFrequencySeconds": 60,
            "concurrentExecLimit": 1,
        },
        expect=201,
    )
    r.call("admin", "GET", td + "/{name}", expect=200, name="charge")
    r.call("worker", "GET", td, expect=200)
    r.call("admin", "PATCH", td + "/{name}", {"retryCount": 4, "retryDelaySeconds": 60}, expect=200, name="charge")
    r.call("admin", "POST", td, {"name": "x", "retryCount": 101}, expect=400)
    r.call("admin", "POST", wd, raw=CHECKOUT_YAML, content_type="application/yaml", expect=201)
    r.call("admin", "POST", wd, HOLD, expect=201)
    r.call("admin", "GET", wd, expect=200)
    r.call("admin", "GET", wd + "/{name}", expect=200, name="checkout")
    r.call("admin", "GET", wd + "/{name}/versions", expect=200, name="checkout")
    r.call("admin", "POST", wd + "/{name}/publish", {"version": 1}, expect=200, name="checkout")
    r.call(
        "admin",
        "POST",
        wd,
        {
            "name": "checkout",
            "description": "v2",
            "tasks": [
                {
                    "name": "charge",
                    "taskReferenceName": "charge",
                    "inputParameters": {"amount": "${workflow.input.amount}"},
                },
                {
                    "name": "notify",
                    "taskReferenceName": "notify",
                    "optional": True,
                    "inputParameters": {"chargeId": "${charge.output.id}"},
                },
            ],
        },
        expect=201,
    )
    r.call("admin", "GET", wd + "/{name}/versions/{version}", expect=200, name="checkout", version=2)
    r.call("admin", "POST", wd + "/{name}/publish", {}, expect=200, name="checkout")
    r.call("admin", "POST", wd + "/{name}/rollback", {}, expect=200, name="checkout")
    r.call(
        "admin",
        "POST",
        wd,
        {"name": "bad", "tasks": [{"name": "a", "taskReferenceName": "a", "type": "NOPE"}]},
        expect=400,
    )
    # an execution, played by a worker to the end
    started = r.call(
        "admin", "POST", e, {"name": "checkout", "input": {"amount": 42}, "idempotencyKey": "order-1001"}, expect=201
    )
    assert (
        r.call(
            "admin",
            "POST",
            e,
            {"name": "checkout", "input": {"amount": 42}, "idempotencyKey": "order-1001"},
            expect=200,
        )["id"]
        == started["id"]
    )
    r.call(
        "admin",
        "POST",
        e + "/batch",
        {"executions": [{"name": "checkout", "input": {"amount": 1}}, {"name": "nowhere"}]},
        expect=200,
    )
    r.call("admin", "GET", e, expect=200)
    leased = r.call(
        "worker",
        "POST",
        NS + "/tasks/poll/{task_type}",
        {"workerId": "w1", "count": 10},
        expect=200,
        task_type="charge",
    )
    assert leased, "the started executions' charge tasks"
    mine = next(task for task in leased if task["executionId"] == started["id"])
    r.call(
        "worker",
        "POST",
        NS + "/tasks/{task_id}/heartbeat",
        {"leaseToken": mine["leaseToken"], "progress": 0.5},
        expect=200,
        task_id=mine["taskId"],
    )
    r.call(
        "worker",
        "POST",
        NS + "/tasks/{task_id}/heartbeat",
        {"leaseToken": "forged"},
        expect=409,
        task_id=mine["taskId"],
    )
    answer = r.call(
        "worker",
        "POST",
        NS + "/tasks/{task_id}/result",
        {
            "leaseToken": mine["leaseToken"],
            "status": "COMPLETED",
            "outputData": {"id": "ch_1"},
            "logs": ["charged", {"amount": 42}],
            "next": {"workerId": "w1", "count": 1, "taskType": "notify"},
        },
        expect=200,
        task_id=mine["taskId"],
    )
    r.call(
        "worker",
        "POST",
        NS + "/tasks/{task_id}/result",
        {"leaseToken": mine["leaseToken"], "status": "COMPLETED"},
        expect=409,
        task_id=mine["taskId"],
    )
    notify = [task for task in answer["next"] if task["executionId"] == started["id"]]
    assert notify, answer
    others = [task for task in leased if task is not mine]
    r.call(
        "worker",
        "POST",
        NS + "/tasks/results",
        {
            "results": [
                {"taskId": notify[0]["taskId"], "leaseToken": notify[0]["leaseToken"], "status": "COMPLETED"},
                *(
                    {
                        "taskId": t["taskId"],
                        "leaseToken": t["leaseToken"],
                        "status": "FAILED",
                        "reasonForIncompletion": "gateway timeout",  # retried after a delay
                    }
                    for t in others
                ),
                {"taskId": mine["taskId"], "leaseToken": mine["leaseToken"], "status": "COMPLETED"},
            ],
            "next": {"workerId": "w1", "count": 1},
        },
        expect=200,
    )
    done = r.call("admin", "GET", e + "/{execution_id}", expect=200, execution_id=started["id"])
    assert done["status"] == "COMPLETED", done
    for other in others:  # a retry waiting out its delay: blockedBy retryBackoff, with until
        view = r.call("admin", "GET", e + "/{execution_id}", expect=200, execution_id=other["executionId"])
        assert any((t["blockedBy"] or {}).get("control") == "retryBackoff" for t in view["tasks"]), view
    r.call("admin", "GET", e + "/{execution_id}/tasks?status=COMPLETED", expect=200, execution_id=started["id"])
    r.call("admin", "GET", e + "/{execution_id}?includeTasks=false", expect=200, execution_id=started["id"])
    # steering an execution
    held = r.call(
        "admin", "POST", e, {"name": "hold", "input": {"who": "ann"}, "correlationId": "c-1", "priority": 3}, expect=201
    )
    x = {"execution_id": held["id"]}
    r.call("admin", "POST", e + "/{execution_id}/messages", {"hello": 1}, expect=201, **x)
    r.call("admin", "POST", e + "/{execution_id}/pause", expect=200, **x)
    r.call("admin", "POST", e + "/{execution_id}/pause", expect=409, **x)
    r.call("admin", "POST", e + "/{execution_id}/resume", expect=200, **x)
    r.call("admin", "POST", e + "/{execution_id}/decide", expect=200, **x)
    human = next(
        t for t in r.call("admin", "GET", e + "/{execution_id}", expect=200, **x)["tasks"] if t["type"] == "HUMAN"
    )
    r.call(
        "developer",
        "POST",
        NS + "/tasks/{task_id}/result",
        {"status": "COMPLETED", "outputData": {"ok": True}},
        expect=200,
        task_id=human["taskId"],
    )
    r.call("admin", "POST", NS + "/webhooks/{name}", {"order": "ann"}, expect=200, name="paid")
    again = r.call("admin", "POST", e, {"name": "hold", "input": {"who": "bob"}}, expect=201)
    x = {"execution_id": again["id"]}
    r.call("admin", "POST", e + "/{execution_id}/terminate", {"reason": "enough"}, expect=200, **x)
    r.call("admin", "POST", e + "/{execution_id}/messages", {"late": 1}, expect=409, **x)
    r.call("admin", "POST", e + "/{execution_id}/retry", expect=200, **x)
    r.call("admin", "POST", e + "/{execution_id}/terminate", {}, expect=200, **x)
    r.call("admin", "POST", e + "/{execution_id}/restart", expect=200, **x)
    r.call("admin", "GET", e, expect=200)
    # controls and diagnostics
    r.call("admin", "PUT", NS + "/semaphores/{name}", {"permits": 2}, expect=201, name="erp")
    r.call("admin", "PUT", NS + "/semaphores/{name}", {"permits": 3}, expect=200, name="erp")
    r.call("admin", "POST", e, {"name": "single", "input": {}}, expect=404)
    r.call(
        "admin",
        "POST",
        wd,
        {"name": "single", "tasks": [{"name": "gate_user", "taskReferenceName": "g"}], "maxConcurrentExecutions": 1},
        expect=201,
    )
    r.call("admin", "POST", e, {"name": "single"}, expect=201)
    r.call("admin", "POST", e, {"name": "single"}, expect=429)
    r.call("worker", "POST", NS + "/tasks/poll/{task_type}", {"workerId": "w2"}, expect=200, task_type="gate_user")
    # held back by controls: a queue at its cap, a start waiting for its admission key
    r.call(
        "admin", "POST", wd, {"name": "capped", "tasks": [{"name": "gate_user", "taskReferenceName": "g"}]}, expect=201
    )
    capped = r.call("admin", "POST", e, {"name": "capped"}, expect=201)
    assert capped["tasks"][0]["blockedBy"]["control"] == "concurrentExecLimit", capped
    keyed = {
        "name": "keyed",
        "rateLimitConfig": {"rateLimitKey": "${workflow.input.who}", "concurrentExecLimit": 1},
        "tasks": [{"name": "charge", "taskReferenceName": "c"}],
    }
    r.call("admin", "POST", wd, keyed, expect=201)
    r.call("admin", "POST", e, {"name": "keyed", "input": {"who": "ann"}}, expect=201)
    waiting = r.call("admin", "POST", e, {"name": "keyed", "input": {"who": "ann"}}, expect=201)
    assert waiting["awaitingAdmission"] and waiting["blockedBy"]["control"] == "admission:ann", waiting
    r.call("admin", "GET", NS + "/semaphores", expect=200)
    r.call("admin", "GET", NS + "/semaphores/{name}", expect=200, name="erp")
    r.call("admin", "GET", NS + "/queues", expect=200)
    r.call("admin", "GET", NS + "/queues/{task_type}/depth", expect=200, task_type="gate_user")
    r.call("admin", "GET", NS + "/queues/workers", expect=200)
    r.call("admin", "GET", NS + "/queues/workers?taskType=gate_user", expect=200)
    r.call("admin", "GET", NS + "/breakers", expect=200)
    r.call("admin", "GET", NS + "/quotas", expect=200)
    r.call("admin", "PUT", NS + "/quotas", {"maxExecutionsPerMinute": 1000, "maxConcurrentExecutions": 1}, expect=200)
    r.call("admin", "POST", e, {"name": "checkout", "input": {"amount": 1}}, expect=429)
    r.call("admin", "PUT", NS + "/quotas", {}, expect=200)
    r.call("admin", "DELETE", NS + "/semaphores/{name}", expect=204, name="erp")
    # schedules and secrets
    s = NS + "/schedules"
    r.call(
        "admin",
        "POST",
        s,
        {
            "name": "nightly",
            "cron": "0 2 * * *",
            "timezone": "Europe/Paris",
            "workflowName": "checkout",
            "input": {"amount": 0},
        },
        expect=201,
    )
    r.call("admin", "PUT", s + "/{name}", {"cron": "0 3 * * *", "workflowName": "checkout"}, expect=200, name="nightly")
    r.call("admin", "GET", s, expect=200)
    r.call("admin", "POST", s + "/{name}/pause", expect=200, name="nightly")
    r.call("admin", "GET", s + "/{name}", expect=200, name="nightly")
    r.call("admin", "POST", s + "/{name}/resume", expect=200, name="nightly")
    r.call("admin", "DELETE", s + "/{name}", expect=204, name="nightly")
    r.call("admin", "PUT", NS + "/secrets/{name}", {"value": "s3cret"}, expect=201, name="hook_key")
    r.call("admin", "PUT", NS + "/secrets/{name}", {"value": "s3cret2"}, expect=200, name="hook_key")
    r.call("admin", "GET", NS + "/secrets", expect=200)
    r.call("admin", "GET", NS + "/secrets/{name}", expect=200, name="hook_key")
    r.call("admin", "DELETE", NS + "/secrets/{name}", expect=204, name="hook_key")
    # the methods a Conductor client uses on these routes: one definition, or a list
    r.call("admin", "PUT", td, {"name": "charge", "retryCount": 2}, expect=200)
    single = {"name": "single", "tasks": [{"name": "gate_user", "taskReferenceName": "g"}]}
    r.call("admin", "PUT", wd, single, expect=200)
    r.call("admin", "PUT", wd, [single, {**single, "name": "single2"}], expect=200)
    # the common errors, each in the one error model
    r.call("none", "GET", e, expect=401)
    r.call("worker", "GET", NS + "/quotas", expect=403)
    r.call("admin", "GET", e + "/{execution_id}", expect=404, execution_id="00000000-0000-0000-0000-000000000000")
    r.call("admin", "POST", e, raw="{", expect=400)
    r.call("admin", "POST", e, {"name": "checkout", "inptu": {}}, expect=400)
    r.call("admin", "POST", e, raw="name=checkout", content_type="text/plain", expect=415)
    r.call("admin", "POST", e, raw=json.dumps({"name": "x" * (settings.NODE_FLOW_MAX_BODY_BYTES + 1)}), expect=413)
    r.call("admin", "GET", e + "?status=DONE", expect=400)
    # and the end of definitions
    r.call("admin", "DELETE", wd + "/{name}", expect=204, name="single")
    r.call("admin", "DELETE", td + "/{name}", expect=204, name="gate_user")
    r.call("admin", "GET", td + "/{name}", expect=404, name="gate_user")


@pytest.fixture
def recorder(db, make_key) -> Recorder:
    keys = {role: make_key(role) for role in ("admin", "developer", "worker")}
    BreakerState.objects.create(
        process="p1",
        namespace=Namespace.objects.get(name="default"),
        key="pay.example",
        state="HALF_OPEN",
        failures=3,
        requests=7,
        opened_until=None,
        updated_at=timezone.now(),
    )
    return Recorder(keys, published_schema())


def test_every_answer_of_every_operation_is_as_documented(recorder):
    walk_through(recorder)
    schema = closed(copy.deepcopy(published_schema()))
    problems = [problem for answer in recorder.answers for problem in check(schema, answer)]
    assert not problems, "\n".join(problems)
    answered = {(a.method, a.path) for a in recorder.answers if a.status < 400}
    untested = [(method, path) for method, path, _ in operations(schema) if (method, path) not in answered]
    assert not untested, f"operations the walk-through never answered with a success: {untested}"


def test_the_check_finds_a_field_the_schema_leaves_out(recorder):
    # The check itself: an answer with one field more, or one of the wrong
    # type, is caught.
    schema = closed(copy.deepcopy(published_schema()))
    body = recorder.call("none", "GET", "/healthz", expect=200)
    extra = Answer("GET", "/healthz", 200, {**body, "uptime": 3}, "application/json")
    wrong = Answer("GET", "/healthz", 200, {**body, "status": 1}, "application/json")
    undocumented = Answer("GET", "/healthz", 418, body, "application/json")
    assert any("uptime" in problem for problem in check(schema, extra))
    assert check(schema, wrong)
    assert check(schema, undocumented) == ["GET /healthz → 418: status not documented"]


# --- what the fuzzing of the closed schema found --------------------------------


@pytest.mark.parametrize("task_id", [False, 0, 7])
def test_a_batch_result_refuses_a_task_id_that_is_not_a_string(api_for, task_id):
    # DRF's UUIDField took an integer (and false) as UUID(int=…): 200 with a 404 answer.
    body = {"results": [{"taskId": task_id, "leaseToken": "t", "status": "COMPLETED"}]}
    response = api_for("worker").post("tasks/results", body)
    assert response.status_code == 400, response.content
    assert "taskId" in response.json()["field"], response.json()
