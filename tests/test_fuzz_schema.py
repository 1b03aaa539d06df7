"""API fuzzing from the OpenAPI schema (issue #8): schemathesis generates
requests for every operation drf-spectacular documents, valid and invalid,
and sends them in-process to the Django WSGI app with an admin key (and, on
the worker routes, a worker key too). Every answer must be: not a 500, an
error body in the one error model when it is an error, and conform to the
schema (status code, content type, body).

Bounded and deterministic: a fixed seed, ``derandomize`` and few examples
per operation, so the run is the same in CI every time.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from urllib.parse import quote

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, given, settings, strategies
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from executions.models import BreakerState
from nodeflow.models import NAME_PATTERN, Namespace
from nodeflow.wsgi import application
from tests.conftest import Api

# Examples per operation and phase; with ~50 operations this keeps the run
# near a minute on the two-core CI machine.
MAX_EXAMPLES = 12
SEED = 20261130
WORKER_ROUTES = ("/tasks/",)

CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": SEED,
        "generation": {
            "max-examples": MAX_EXAMPLES,
            "deterministic": True,
            # The key is sent by the test, not generated: fuzzed keys would
            # only ever reach the 401 path.
            "with-security-parameters": False,
        },
        # Fuzzing another namespace's name only reaches the 403 path
        # (tests/test_isolation.py covers that); fuzz inside "default".
        "parameters": {"path.ns": "default"},
        "phases": {"coverage": {"generation": {"mode": "negative"}}},
    }
)


@schemathesis.check
def error_model(ctx, response, case) -> None:
    """Every 4xx/5xx body is ``{"error": CODE, "message": "..."}`` (nodeflow/errors.py)."""
    if response.status_code < 400:
        return None
    body = response.json()
    assert isinstance(body, dict), f"error body is not an object: {body!r}"
    assert isinstance(body.get("error"), str) and body["error"], f"no error code: {body!r}"
    assert isinstance(body.get("message"), str) and body["message"], f"no message: {body!r}"
    if "field" in body:
        assert body["field"] is None or isinstance(body["field"], str), f"field is not a path: {body!r}"
    return None


# Left out: positive_data_acceptance. Much of what makes a body valid is not
# expressible in the schema (cron syntax, opaque cursors, a workflow's task
# graph, cross-field rules), so a schema-valid body may rightly get a 400.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


def _seed(admin: Api) -> None:
    """Some of everything, so list routes answer non-empty pages the schema
    must also describe."""
    assert admin.post("metadata/task-definitions", {"name": "work", "semaphores": ["gate"]}).status_code == 201
    assert admin.put("semaphores/gate", {"permits": 2}).status_code == 201
    workflow = {
        "name": "wf",
        "tasks": [
            {"name": "work", "taskReferenceName": "a", "inputParameters": {"x": "${workflow.input.x}"}},
            {
                "name": "hook",
                "taskReferenceName": "b",
                "type": "WAIT_FOR_WEBHOOK",
                "inputParameters": {"matches": {"$.id": 1}},
            },
        ],
    }
    assert admin.post("metadata/workflow-definitions", workflow).status_code == 201
    assert admin.post("executions", {"name": "wf", "input": {"x": 1}, "correlationId": "c"}).status_code == 201
    assert admin.post("schedules", {"name": "nightly", "cron": "0 3 * * *", "workflowName": "wf"}).status_code == 201
    assert admin.put("quotas", {"maxSchedules": 100}).status_code == 200
    BreakerState.objects.create(
        process="p1",
        namespace=Namespace.objects.get(name="default"),
        key="host.example",
        state="OPEN",
        failures=5,
        requests=5,
        opened_until=timezone.now(),
        updated_at=timezone.now(),
    )


def app(environ, start_response):
    """The Django WSGI app as schemathesis calls it. Like Django's test client,
    it keeps the request signals from closing the connection that holds the
    test's transaction (the test client reconnects them after each of its
    own requests, so they are disconnected per call)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        response = application(environ, start_response)
        body = b"".join(response)
        response.close()  # fires request_finished, as a WSGI server would
        return [body]
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


# Loaded at collection: the schema route needs no database.
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", app, config=CONFIG)


@pytest.fixture
def keys(db, make_key) -> dict[str, str]:
    """An admin and a worker key of "default", with the seeded world behind them."""
    _seed(Api(make_key("admin")))
    return {"admin": make_key("admin"), "worker": make_key("worker")}


def _calm(case) -> None:
    # A long-poll waits in real time for up to 30 s; the fuzz has no worker
    # to wait for, so each poll answers at once.
    if case.path.endswith("/tasks/poll/{task_type}") and isinstance(case.body, dict) and "waitSeconds" in case.body:
        case.body["waitSeconds"] = 0


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
def test_every_operation_survives_fuzzing(case, keys):
    _calm(case)
    roles = ("admin", "worker") if any(part in case.path for part in WORKER_ROUTES) else ("admin",)
    for role in roles:
        case.call_and_validate(headers={"x-api-key": keys[role]}, checks=[*CHECKS, error_model])


# --- numbers that are not finite ------------------------------------------------
# JSON has no infinity or NaN, so schemathesis never generates one, but
# ``1e400`` is valid JSON that parses as infinity and Python's parser takes
# ``NaN`` and ``Infinity`` too: no jsonb column or JSON answer can hold them.
# Every operation with a body gets bodies schemathesis generates for it, with
# one number made non-finite, wherever it falls (an existing number, a new
# key of any object, a new item of any list, the whole body).

NON_FINITE = ("1e400", "-1e400", "NaN", "Infinity", "-Infinity")
NON_FINITE_EXAMPLES = 8
MARKER = "\u0001non-finite\u0001"
BODY_OPERATIONS = [
    (path, method.upper())
    for path, methods in schema.raw_schema["paths"].items()
    for method, operation in methods.items()
    if "requestBody" in operation
]


def _slots(value, put, path: str = "") -> list[tuple[str, Callable[[], None]]]:
    """Every place a number can go in ``value``: its field path (as errors
    name it) and a thunk that puts the marker there (``put`` replaces
    ``value`` itself in its parent)."""

    def inner(key) -> str:
        return f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))

    slots = [(path or "(the body)", lambda: put(MARKER))]
    if isinstance(value, dict):
        slots.append((inner("n"), lambda: value.__setitem__("n", MARKER)))
        for key in [k for k in value if k != "n"]:
            slots += _slots(value[key], lambda new, key=key: value.__setitem__(key, new), inner(key))
    elif isinstance(value, list):
        slots.append((inner(len(value)), lambda: value.append(MARKER)))
        for index in range(len(value)):
            slots += _slots(value[index], lambda new, index=index: value.__setitem__(index, new), inner(index))
    return slots


def with_non_finite(body, literal: str, where: int) -> tuple[str, bytes]:
    """``body`` as JSON text with ``literal`` in the ``where``-th place a
    number can go, and that place's field path."""
    holder = [copy.deepcopy(body)]
    slots = _slots(holder[0], lambda new: holder.__setitem__(0, new))
    field, put = slots[where % len(slots)]
    put()
    return field, json.dumps(holder[0]).replace(json.dumps(MARKER), literal).encode()


@pytest.mark.parametrize(("path", "method"), BODY_OPERATIONS, ids=[f"{m} {p}" for p, m in BODY_OPERATIONS])
def test_no_body_with_a_number_that_is_not_finite_reaches_a_server_error(keys, path, method):
    from werkzeug.test import Client

    @settings(
        max_examples=NON_FINITE_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        case=schema[path][method].as_strategy(),
        literal=strategies.sampled_from(NON_FINITE),
        where=strategies.integers(min_value=0, max_value=10_000),
    )
    def check(case, literal, where):
        values = {**(case.path_parameters or {}), "ns": "default"}
        url = path.format(**{name: quote(str(value), safe="") for name, value in values.items()})
        field, raw = with_non_finite(case.body, literal, where)
        response = Client(app).open(
            url, method=method, data=raw, content_type="application/json", headers={"x-api-key": keys["admin"]}
        )
        assert 400 <= response.status_code < 500, (url, response.status_code, response.get_data(as_text=True))
        body = response.json
        assert isinstance(body.get("error"), str) and isinstance(body.get("message"), str), body
        if response.status_code == 400 and literal.endswith("e400"):
            # Named where it is, unless a path parameter was refused first.
            assert body.get("field") in (field, *values), (field, body)

    check()


def test_it_puts_a_non_finite_number_in_every_place_a_number_can_go():
    body = {"a": [1, {"b": 2}]}
    placed = {with_non_finite(body, "1e400", where) for where in range(20)}
    assert placed == {
        ("(the body)", b"1e400"),
        ("n", b'{"a": [1, {"b": 2}], "n": 1e400}'),
        ("a", b'{"a": 1e400}'),
        ("a[2]", b'{"a": [1, {"b": 2}, 1e400]}'),
        ("a[0]", b'{"a": [1e400, {"b": 2}]}'),
        ("a[1]", b'{"a": [1, 1e400]}'),
        ("a[1].n", b'{"a": [1, {"b": 2, "n": 1e400}]}'),
        ("a[1].b", b'{"a": [1, {"b": 1e400}]}'),
    }
    assert body == {"a": [1, {"b": 2}]}  # the generated body is left as it was


# --- what the fuzzing found, one regression test each -------------------------


def _send(method: str, path: str, key: str, body=None):
    from werkzeug.test import Client

    return Client(app).open(f"/v1/ns/default/{path}", method=method, json=body, headers={"x-api-key": key})


@pytest.mark.parametrize("path", ["/v1/ns/{ns}/semaphores", "/v1/ns/{ns}/queues", "/v1/ns/{ns}/queues/workers"])
def test_it_documents_the_control_lists_as_arrays(keys, path):
    # They were documented as one object; the routes answer a list.
    assert schema[path]["GET"].is_valid_response(_send("GET", path.removeprefix("/v1/ns/{ns}/"), keys["admin"]))


def test_it_documents_the_null_fields_of_a_schedule_that_never_fired(keys):
    # lastFiredAt, lastExecutionId, lastError were documented as non-null strings.
    response = _send("GET", "schedules/nightly", keys["admin"])
    assert response.json["lastFiredAt"] is None
    assert schema["/v1/ns/{ns}/schedules/{name}"]["GET"].is_valid_response(response)


def test_it_documents_every_error_answer_in_the_error_model():
    for path, methods in schema.raw_schema["paths"].items():
        for method, operation in methods.items():
            if not operation.get("security"):
                continue
            for code in ("400", "401", "403", "404"):
                body = operation["responses"][code]["content"]["application/json"]["schema"]
                assert body == {"$ref": "#/components/schemas/Error"}, (method, path, code)


def test_it_documents_only_the_body_types_the_api_reads():
    # Form and multipart bodies were documented, though no strict field takes their strings.
    for path, methods in schema.raw_schema["paths"].items():
        for method, operation in methods.items():
            types = set(operation.get("requestBody", {}).get("content", {}))
            assert types <= {"application/json", "application/yaml"}, (method, path, types)


def test_it_documents_names_in_paths_by_their_pattern():
    parameters = schema.raw_schema["paths"]["/v1/ns/{ns}/webhooks/{name}"]["post"]["parameters"]
    assert {p["name"]: p["schema"].get("pattern") for p in parameters} == {"ns": NAME_PATTERN, "name": NAME_PATTERN}


def test_it_refuses_a_webhook_name_that_is_not_a_name(keys):
    # It answered 200 {"matched": 0} for a name no WAIT_FOR_WEBHOOK task can have.
    response = _send("POST", "webhooks/%C2%84", keys["admin"], {})
    assert response.status_code == 400
    assert response.json["field"] == "name"


@pytest.mark.parametrize("body", [{"count": 1.0}, {"count": 2.0, "waitSeconds": 0}])
def test_it_refuses_a_float_where_the_schema_says_integer(keys, body):
    # 1.0 was taken as 1 though the schema says integer (and definitions refuse it).
    response = _send("POST", "tasks/poll/work", keys["worker"], body)
    assert response.status_code == 400
    assert response.json["field"] == "count"


def test_it_documents_the_execution_list_filters_with_their_bounds():
    parameters = {p["name"]: p for p in schema.raw_schema["paths"]["/v1/ns/{ns}/executions"]["get"]["parameters"]}
    assert parameters["limit"]["schema"]["maximum"] == 500
    assert "RUNNING" in parameters["status"]["schema"]["enum"]


def test_it_documents_that_a_workflow_needs_a_task():
    body = schema.raw_schema["components"]["schemas"]["WorkflowDefinitionRequest"]
    assert body["properties"]["tasks"]["minItems"] == 1
