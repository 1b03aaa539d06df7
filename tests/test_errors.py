"""The one error model (SPEC §2): malformed bodies, unknown routes, wrong
methods, oversized bodies, YAML; plus health, schema and docs."""

from __future__ import annotations

import io
import re

import pytest
from django.db import connection
from django.urls import URLPattern, URLResolver, get_resolver

from tests.conftest import Api
from tests.procs.stack import free_port

TASKDEFS = "metadata/task-definitions"
WORKFLOWS = "metadata/workflow-definitions"


def assert_error(response, status: int, error: str | None = None) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert isinstance(body["error"], str) and body["error"]
    assert isinstance(body["message"], str) and body["message"]
    if error:
        assert body["error"] == error
    return body


# --- malformed bodies -------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    ['{"name": "t",', "{name: 't'}", "{'name': 't'}", '{"name": "t"} trailing', "", "NaN", '{"jitter": NaN}', "\x00"],
    ids=repr,
)
@pytest.mark.parametrize("method,path", [("POST", TASKDEFS), ("POST", WORKFLOWS)])
def test_it_rejects_malformed_json(api, raw, method, path):
    response = api.call(method, path, raw=raw)
    if raw == "":
        # An empty body is no body at all: the missing name is what is wrong.
        assert_error(response, 400)
    else:
        body = assert_error(response, 400, "MALFORMED_REQUEST")
        assert "parsed" in body["message"]


def test_it_rejects_malformed_json_in_a_patch(api):
    api.post(TASKDEFS, {"name": "t"})
    assert_error(api.call("PATCH", f"{TASKDEFS}/t", raw='{"retryCount": '), 400, "MALFORMED_REQUEST")


def test_it_rejects_json_that_is_not_utf8(api):
    response = api.client.post(
        f"/v1/ns/default/{TASKDEFS}",
        data=b'{"name": "\xff\xfe"}',
        content_type="application/json",
        HTTP_X_API_KEY=api.key,
    )
    assert_error(response, 400, "MALFORMED_REQUEST")


@pytest.mark.parametrize("raw", ["[]", '[{"name": "t"}]', '"t"', "3", "true", "null"])
@pytest.mark.parametrize("path", [TASKDEFS, WORKFLOWS])
def test_it_rejects_a_body_that_is_not_an_object(api, raw, path):
    assert_error(api.call("POST", path, raw=raw), 400)
    assert api.get(path).json() == []


def test_it_names_the_object_rule_for_a_list_body(api):
    body = assert_error(api.call("POST", TASKDEFS, raw='[{"name": "t"}]'), 400, "VALIDATION_ERROR")
    assert "object" in body["message"]


@pytest.mark.parametrize("path", [TASKDEFS, WORKFLOWS])
def test_it_answers_400_not_500_for_a_deeply_nested_body(api, path):
    depth = 100_000
    raw = '{"name": "t", "description": ' + "[" * depth + "]" * depth + "}"
    assert_error(api.call("POST", path, raw=raw), 400, "MALFORMED_REQUEST")


def test_it_refuses_an_unsupported_content_type(api):
    assert_error(api.call("POST", TASKDEFS, raw="name=t", content_type="text/plain"), 415, "UNSUPPORTED_MEDIA_TYPE")


def test_it_never_500s_on_a_form_body(api):
    response = api.call("POST", TASKDEFS, raw="name=t&retryCount=3", content_type="application/x-www-form-urlencoded")
    assert_error(response, 400, "VALIDATION_ERROR")


# --- YAML -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    ["name: [wf", "name: wf\n  tasks: - x", "!!python/object/apply:os.system ['true']", "a: *nope", "\t- x"],
    ids=repr,
)
def test_it_rejects_invalid_yaml(api, raw):
    body = assert_error(api.call("POST", WORKFLOWS, raw=raw, content_type="application/yaml"), 400, "MALFORMED_REQUEST")
    assert "YAML" in body["message"]


@pytest.mark.parametrize("raw", ["- a\n- b\n", "just a string", "", "42"], ids=repr)
def test_it_rejects_yaml_that_is_not_a_mapping(api, raw):
    assert_error(api.call("POST", WORKFLOWS, raw=raw, content_type="application/yaml"), 400)


def test_it_answers_400_for_deeply_nested_yaml(api):
    raw = "name: wf\nvariables: " + "[" * 20_000 + "]" * 20_000
    assert_error(api.call("POST", WORKFLOWS, raw=raw, content_type="application/yaml"), 400, "MALFORMED_REQUEST")


def test_it_accepts_valid_yaml(api):
    raw = "name: wf\ntasks:\n  - name: t\n    taskReferenceName: t\n"
    response = api.call("POST", WORKFLOWS, raw=raw, content_type="application/yaml")
    assert response.status_code == 201, response.content
    assert response.json()["name"] == "wf"


# --- routes and methods ---------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/nope",
        "/v1/",
        "/v1/ns/default/",
        "/v1/ns/default/metadata/",
        "/v1/ns/default/metadata/nothing",
        "/v1/ns/default/metadata/task-definitions/",
        "/v1/ns/default/metadata/workflow-definitions/wf/versions/one",
        "/v2/ns/default/metadata/task-definitions",
    ],
)
def test_it_answers_404_json_for_an_unknown_route(api, path):
    body = assert_error(api.call("GET", path), 404, "NOT_FOUND")
    assert body["message"]


@pytest.mark.parametrize(
    "method,path",
    [
        ("DELETE", TASKDEFS),
        ("PATCH", TASKDEFS),
        ("POST", f"{TASKDEFS}/t"),
        ("PUT", f"{TASKDEFS}/t"),
        ("DELETE", WORKFLOWS),
        ("PATCH", f"{WORKFLOWS}/wf"),
        ("GET", f"{WORKFLOWS}/wf/publish"),
        ("DELETE", f"{WORKFLOWS}/wf/rollback"),
        ("POST", f"{WORKFLOWS}/wf/versions"),
    ],
)
def test_it_answers_405_in_the_error_model(api, method, path):
    body = {} if method in ("POST", "PUT", "PATCH") else None
    assert_error(api.call(method, path, body), 405, "METHOD_NOT_ALLOWED")


def test_it_answers_401_before_405(db):
    assert_error(Api(None).call("DELETE", TASKDEFS), 401, "UNAUTHENTICATED")


def test_it_answers_403_before_405_for_another_namespace(api_for):
    assert_error(api_for("admin", "other", url_namespace="default").call("DELETE", TASKDEFS), 403, "FORBIDDEN")


# --- body size ------------------------------------------------------------------


@pytest.fixture
def small_limit(settings) -> int:
    settings.NODE_FLOW_MAX_BODY_BYTES = 1024
    return 1024


@pytest.mark.parametrize("path", [TASKDEFS, WORKFLOWS])
def test_it_refuses_a_json_body_over_the_limit(api, small_limit, path):
    response = api.post(path, {"name": "t", "description": "x" * small_limit})
    body = assert_error(response, 413)
    assert body["error"] == "PAYLOAD_TOO_LARGE"
    assert "NODE_FLOW_MAX_BODY_BYTES" in body["message"]
    assert api.get(path).json() == []


def test_it_accepts_a_body_just_under_the_limit(api, small_limit):
    head = '{"name": "t", "description": "'
    raw = head + "x" * (small_limit - len(head) - 2) + '"}'
    assert len(raw.encode()) == small_limit
    assert api.call("POST", TASKDEFS, raw=raw).status_code == 201


def test_it_refuses_a_yaml_body_over_the_limit(api, small_limit):
    raw = "name: wf\ndescription: " + "x" * small_limit
    assert_error(api.call("POST", WORKFLOWS, raw=raw, content_type="application/yaml"), 413, "PAYLOAD_TOO_LARGE")


def test_it_refuses_a_patch_over_the_limit(api, small_limit):
    api.post(TASKDEFS, {"name": "t"})
    assert_error(api.patch(f"{TASKDEFS}/t", {"description": "x" * small_limit}), 413, "PAYLOAD_TOO_LARGE")
    assert api.get(f"{TASKDEFS}/t").json()["description"] == ""


def test_it_refuses_a_multipart_file_over_the_limit(api, small_limit):
    # Django's own limit leaves multipart file parts out; ours counts them.
    upload = io.BytesIO(b"x" * (small_limit * 4))
    upload.name = "big.bin"
    response = api.client.post(f"/v1/ns/default/{TASKDEFS}", {"name": "t", "file": upload}, HTTP_X_API_KEY=api.key)
    assert_error(response, 413, "PAYLOAD_TOO_LARGE")


# --- service endpoints ------------------------------------------------------------


def test_it_reports_health_without_a_key(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}


def _routes(patterns, prefix: str = "") -> list[str]:
    out: list[str] = []
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            out.extend(_routes(pattern.url_patterns, route))
        elif isinstance(pattern, URLPattern):
            out.append("/" + route)
    return out


def _v1_paths() -> set[str]:
    # /v1/ns/<str:ns>/... → /v1/ns/{ns}/..., as OpenAPI writes it. The
    # Conductor-compatible routes (/v1/ns/{ns}/api/) are Conductor's dialect,
    # left out of Node Flow's schema (nodeflow.schema.exclude_foreign_dialects).
    routes = [
        route
        for route in _routes(get_resolver().url_patterns)
        if route.startswith("/v1/") and not route.startswith("/v1/ns/<str:ns>/api/")
    ]
    return {re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route) for route in routes}


def test_it_serves_an_openapi_3_schema_with_every_v1_route(client, db):
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    expected = _v1_paths()
    assert "/v1/ns/{ns}/metadata/task-definitions/{name}" in expected
    assert expected <= set(schema["paths"]), sorted(expected - set(schema["paths"]))


def test_it_documents_the_api_key_header(client, db):
    schema = client.get("/api/schema/?format=json").json()
    schemes = schema["components"]["securitySchemes"]
    assert {"type": "apiKey", "in": "header", "name": "x-api-key"} in schemes.values()


def test_it_serves_the_schema_as_yaml_by_default(client, db):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    assert b"openapi: 3." in response.content


def test_it_serves_the_docs(client, db):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")


@pytest.fixture
def unreachable_database(transactional_db):
    """The default connection, pointed where no database answers (a closed
    port; a file in a missing directory), and put back afterwards."""
    settings = connection.settings_dict
    saved = dict(settings)
    connection.close()
    if connection.vendor == "postgresql":
        settings["PORT"] = str(free_port())
    else:
        settings["NAME"] = "/nonexistent-nodeflow-dir/db.sqlite3"
    yield
    connection.close()
    settings.clear()
    settings.update(saved)


def test_it_answers_503_with_retry_after_when_the_database_is_unreachable(unreachable_database, caplog):
    api = Api("nf_" + "N" * 43)  # the shape of a key, so it is looked up (nothing cached)
    body = assert_error(api.get("executions"), 503, "UNAVAILABLE")
    assert "try again" in body["message"]
    assert api.get("executions")["Retry-After"] == "1"
    # The log names the request, not a view object's address.
    assert "database unavailable: GET /v1/ns/default/executions (ExecutionListView)" in caplog.text
