"""Hostile input (issue #8): every route that takes a body refuses oversize,
deeply nested, non-UTF-8 and wrongly typed bodies clearly and stores nothing;
huge dynamic forks, self-referencing expressions and sandbox escapes fail
with a reason; bad header values and unauthenticated webhooks change nothing.

tests/test_errors.py covers the same refusals on the definition routes; this
file takes them to every body route (the table of tests/test_isolation.py).
"""

from __future__ import annotations

import json

import pytest
from django.test import override_settings
from rest_framework.exceptions import ParseError

from executions.javascript import ScriptError, evaluate
from executions.json_values import nested_deeper_than
from executions.models import Task
from nodeflow.errors import InvalidField
from nodeflow.keys import create_api_key
from nodeflow.parsers import JSONParser
from tests.conftest import Api
from tests.engine_helpers import execution, register, start, task_at
from tests.system_helpers import run_system_tasks, system_task
from tests.test_isolation import ROUTES, build_world, fill, fingerprint

# Routes that read a body (pause/resume and the like take none and read none).
BODY_ROUTES = [route for route, case in ROUTES.items() if case.body is not None]
BODY_IDS = [f"{method} {path}" for method, path in BODY_ROUTES]


@pytest.fixture(scope="module")
def built_world(module_rows) -> dict:
    """The world, built once for the module's tests (each rolls back to it)."""

    def make() -> dict:
        admin = create_api_key(role="admin", namespace="default")[1]
        worker = create_api_key(role="worker", namespace="default")[1]
        return {"admin_key": admin, **build_world(Api(admin), Api(worker), "default")}

    return module_rows(make)


@pytest.fixture
def world(built_world, db) -> dict:
    return {**built_world, "admin": Api(built_world["admin_key"])}


def send(world: dict, route: tuple[str, str], raw: bytes, content_type: str = "application/json", **headers):
    """``raw`` as the body of ``route``, sent with an admin key (admins hold every scope)."""
    api: Api = world["admin"]
    path = fill(ROUTES[route].path, world)
    return api.client.generic(
        route[0], api.url(path), raw, content_type=content_type, HTTP_X_API_KEY=api.key, **headers
    )


def assert_error(response, status: int, error: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"] == error and body["message"], body
    return body


def valid_body(world: dict, route: tuple[str, str]) -> dict:
    body = fill(ROUTES[route].body, world)
    return body if isinstance(body, dict) else {}


# --- bodies, on every route that takes one ------------------------------------


@pytest.fixture
def small_limit(settings) -> int:
    settings.NODE_FLOW_MAX_BODY_BYTES = 4096
    return 4096


@pytest.mark.parametrize("route", BODY_ROUTES, ids=BODY_IDS)
def test_it_refuses_a_body_over_the_limit_and_stores_nothing(world, small_limit, route):
    # A valid body made too big where each route keeps its payload.
    body = {**valid_body(world, route), "padding": "x" * small_limit}
    before = fingerprint()
    body = assert_error(send(world, route, json.dumps(body).encode()), 413, "PAYLOAD_TOO_LARGE")
    assert "NODE_FLOW_MAX_BODY_BYTES" in body["message"]
    assert fingerprint() == before


def test_it_refuses_a_worker_output_over_the_limit(world, small_limit):
    route = ("POST", "tasks/<str:task_id>/result")
    body = {"leaseToken": world["lease"], "status": "COMPLETED", "outputData": {"blob": "x" * small_limit}}
    assert_error(send(world, route, json.dumps(body).encode()), 413, "PAYLOAD_TOO_LARGE")
    assert Task.objects.get(pk=world["task"]).status == "IN_PROGRESS"


@pytest.mark.parametrize("route", BODY_ROUTES, ids=BODY_IDS)
@pytest.mark.parametrize("depth", [101, 100_000])
def test_it_refuses_a_deeply_nested_body_and_stores_nothing(world, route, depth):
    # 100 000 levels exhaust the parser's stack; 101 parse but exceed NODE_FLOW_MAX_JSON_DEPTH.
    raw = ('{"nested": ' + "[" * depth + "]" * depth + "}").encode()
    before = fingerprint()
    assert_error(send(world, route, raw), 400, "MALFORMED_REQUEST")
    assert fingerprint() == before


def test_it_accepts_nesting_up_to_the_limit(world):
    value: list = []
    for _ in range(97):  # body, input, then 98 lists: 100 levels
        value = [value]
    response = world["admin"].post("executions", {"name": world["workflow"], "input": {"x": value}})
    assert response.status_code == 201, response.content


def test_it_refuses_deep_yaml_and_yaml_aliases(world):
    route = ("POST", "metadata/workflow-definitions")
    deep = "name: deep\ntasks: " + "[" * 101 + "]" * 101
    assert_error(send(world, route, deep.encode(), "application/yaml"), 400, "MALFORMED_REQUEST")
    # "Billion laughs": nine levels of aliases to ten copies each expand to 10^9 strings.
    laughs = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    laughs += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    bomb = "\n".join(
        ["name: laughs", "variables:", *("  " + line for line in laughs), "tasks: [{name: t, taskReferenceName: t}]"]
    )
    before = fingerprint()
    body = assert_error(send(world, route, bomb.encode(), "application/yaml"), 400, "MALFORMED_REQUEST")
    assert "aliases" in body["message"]
    assert fingerprint() == before


@pytest.mark.parametrize("route", BODY_ROUTES, ids=BODY_IDS)
@pytest.mark.parametrize("content_type", ["application/json", "application/yaml"])
def test_it_refuses_a_body_that_is_not_utf8_and_stores_nothing(world, route, content_type):
    raw = json.dumps(valid_body(world, route)).encode()[:-1] + b', "x": "\xff\xfe"}'
    before = fingerprint()
    assert_error(send(world, route, raw, content_type), 400, "MALFORMED_REQUEST")
    assert fingerprint() == before


@pytest.mark.parametrize("route", BODY_ROUTES, ids=BODY_IDS)
@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "application/octet-stream"])
def test_it_refuses_a_wrong_content_type_and_stores_nothing(world, route, content_type):
    before = fingerprint()
    raw = json.dumps(valid_body(world, route)).encode()
    assert_error(send(world, route, raw, content_type), 415, "UNSUPPORTED_MEDIA_TYPE")
    assert fingerprint() == before


@pytest.mark.parametrize(
    "raw",
    [
        b'{"name": "x", "input": {"n": NaN}}',
        b'{"name": "x", "input": {"n": 1e999}}',
        b'{"name": "x", "input": {"s": "\\ud800"}}',
        b'{"name": "x", "input": {"s": "a\\u0000b"}}',
        b'{"name": "x", "input": {"a\\u0000b": 1}}',
    ],
    ids=["NaN", "overflow", "lone surrogate", "NUL", "NUL in a key"],
)
def test_it_refuses_json_values_that_cannot_be_stored(world, raw):
    before = fingerprint()
    response = send(world, ("POST", "executions"), raw.replace(b'"x"', f'"{world["workflow"]}"'.encode()))
    assert response.status_code == 400, response.content
    assert response.json()["error"] in ("MALFORMED_REQUEST", "VALIDATION_ERROR")
    assert fingerprint() == before


# --- headers -------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["\x01nf_x", "é", "x" * 10_000, "nf_\u2028", "nf_ key with spaces"],
    ids=["control", "non-ascii", "huge", "line separator", "spaces"],
)
def test_it_answers_401_for_a_key_that_is_not_a_key(world, key):
    response = world["admin"].client.get("/v1/ns/default/executions", HTTP_X_API_KEY=key)
    assert_error(response, 401, "UNAUTHENTICATED")


@pytest.mark.parametrize("length", ["abc", "-1", "1.5"])
def test_it_never_500s_on_a_bad_content_length(world, length):
    before = fingerprint()
    response = send(world, ("POST", "metadata/task-definitions"), b'{"name": "sneaky"}', CONTENT_LENGTH=length)
    assert response.status_code == 400, response.content
    assert fingerprint() == before


def test_it_answers_413_for_a_content_length_over_the_limit_before_reading(world):
    response = send(world, ("POST", "metadata/task-definitions"), b'{"name": "sneaky"}', CONTENT_LENGTH="9" * 30)
    assert_error(response, 413, "PAYLOAD_TOO_LARGE")


@pytest.mark.parametrize("accept", ["application/xml", "image/png"])
def test_it_answers_406_in_the_error_model_for_an_unservable_accept(world, accept):
    response = world["admin"].client.get(
        "/v1/ns/default/executions", HTTP_X_API_KEY=world["admin"].key, HTTP_ACCEPT=accept
    )
    assert_error(response, 406, "NOT_ACCEPTABLE")


def test_it_renders_the_browsable_api_for_the_deepest_accepted_value(world):
    # Before the depth limit, a body the parser took rendered to a 500 here.
    value: list = []
    for _ in range(97):
        value = [value]
    started = world["admin"].post("executions", {"name": world["workflow"], "input": {"x": value}}).json()
    response = world["admin"].client.get(
        f"/v1/ns/default/executions/{started['id']}", HTTP_X_API_KEY=world["admin"].key, HTTP_ACCEPT="text/html"
    )
    assert response.status_code == 200


@pytest.mark.parametrize("query", ["name=%FF", "limit=%FF", "cursor=%00", "name=a%00b", "status=%C0%AF"])
def test_it_never_500s_on_a_query_that_is_not_utf8(world, query):
    response = world["admin"].get(f"executions?{query}")
    assert response.status_code in (200, 400), response.content


@pytest.mark.parametrize(
    "path",
    ["semaphores/%FF", "executions/%FF%FE", "metadata/task-definitions/%C0%AF", "schedules/a%00b", "queues/%FF/depth"],
)
def test_it_never_500s_on_a_path_that_is_not_utf8(world, path):
    response = world["admin"].get(path)
    assert response.status_code in (400, 404), response.content
    assert response.json()["error"] in ("VALIDATION_ERROR", "NOT_FOUND")


# --- webhooks --------------------------------------------------------------------


@pytest.mark.parametrize("who", ["none", "unknown", "worker", "other namespace"])
def test_it_refuses_a_webhook_without_a_valid_key_and_completes_nothing(world, make_key, who):
    """Inbound webhooks are authenticated by API key (they carry no signature
    of their own): without a valid developer or admin key of the namespace,
    nothing is delivered."""
    key = {
        "none": None,
        "unknown": "nf_forged",
        "worker": make_key("worker"),
        "other namespace": make_key("admin", "elsewhere"),
    }[who]
    response = Api(key).post(f"webhooks/{world['webhook']}", {"id": 1})
    assert response.status_code in (401, 403)
    assert response.json()["error"] in ("UNAUTHENTICATED", "FORBIDDEN")
    assert Task.objects.get(pk=world["webhook_task"]).status == "IN_PROGRESS"


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"text"', b"null", b'{"id": ' + b"[" * 101 + b"]" * 101 + b"}"])
def test_it_refuses_a_webhook_body_that_is_not_a_shallow_object(world, raw):
    response = send(world, ("POST", "webhooks/<str:name>"), raw)
    assert response.status_code == 400, response.content
    assert Task.objects.get(pk=world["webhook_task"]).status == "IN_PROGRESS"


# --- definitions: forks, self references ---------------------------------------


@override_settings(NODE_FLOW_MAX_FORK_ITEMS=5)
def test_it_fails_a_dynamic_fork_over_the_item_ceiling_with_a_reason(api):
    fork = {
        "name": "fan",
        "taskReferenceName": "fan",
        "type": "FORK_JOIN_DYNAMIC",
        "inputParameters": {"items": "${workflow.input.items}"},
        "forkTask": {"name": "leaf", "taskReferenceName": "leaf"},
    }
    register(api, "fanout", fork, {"name": "join", "taskReferenceName": "join", "type": "JOIN"})
    view = start(api, "fanout", {"items": list(range(6))})
    task = task_at(view, "fan")
    assert task["status"] in ("FAILED", "FAILED_WITH_TERMINAL_ERROR")
    assert "5" in task["reasonForIncompletion"]
    assert view["status"] == "FAILED"
    assert not [t for t in view["tasks"] if t["path"].startswith("fan[")]  # no branch was scheduled
    assert start(api, "fanout", {"items": list(range(5))})["status"] == "RUNNING"


def test_it_fails_a_dynamic_fork_over_the_default_ceiling(api, settings):
    assert settings.NODE_FLOW_MAX_FORK_ITEMS == 10_000  # the documented default
    fork = {
        "name": "fan",
        "taskReferenceName": "fan",
        "type": "FORK_JOIN_DYNAMIC",
        "inputParameters": {"items": "${workflow.input.items}"},
        "forkTask": {"name": "leaf", "taskReferenceName": "leaf"},
    }
    register(api, "fanout", fork, {"name": "join", "taskReferenceName": "join", "type": "JOIN"})
    view = start(api, "fanout", {"items": list(range(10_001))})
    assert "10000" in task_at(view, "fan")["reasonForIncompletion"]
    assert Task.objects.filter(execution_id=view["id"]).count() == 1  # the fork alone: no branch


def test_it_refuses_an_expression_that_references_its_own_task(api):
    before = fingerprint()
    tasks = [{"name": "a", "taskReferenceName": "a", "inputParameters": {"x": "${a.output.x}"}}]
    body = assert_error(
        api.post("metadata/workflow-definitions", {"name": "loop", "tasks": tasks}), 400, "VALIDATION_ERROR"
    )
    assert body["field"] == "tasks[0].inputParameters.x"
    assert fingerprint() == before


def test_tasks_that_reference_each_other_resolve_once_without_looping(api):
    # Not a cycle at run time: each input is resolved once, when its task is
    # scheduled, from what has run by then (a later task's output is null).
    register(
        api,
        "pair",
        {"name": "a", "taskReferenceName": "a", "inputParameters": {"x": "${b.output.y}"}},
        {"name": "b", "taskReferenceName": "b", "inputParameters": {"y": "${a.output.x}"}},
    )
    view = start(api, "pair")
    assert task_at(view, "a")["inputData"] == {"x": None}


def test_it_never_resolves_an_expression_inside_a_resolved_value(api, make_key):
    register(
        api,
        "echo",
        {
            "name": "echo",
            "taskReferenceName": "e",
            "inputParameters": {"x": "${workflow.input.x}", "y": "${workflow.input.y}"},
        },
    )
    view = start(api, "echo", {"x": "${workflow.input.y}", "y": "${workflow.input.x}"})
    assert task_at(view, "e")["inputData"] == {"x": "${workflow.input.y}", "y": "${workflow.input.x}"}


# --- INLINE: the sandbox ---------------------------------------------------------


@pytest.mark.parametrize(
    "probe", ["require", "process", "fetch", "XMLHttpRequest", "Deno", "Bun", "__dirname", "module", "importScripts"]
)
def test_the_sandbox_has_no_host_objects(probe):
    assert evaluate(f"typeof {probe}", {}) == "undefined"


@pytest.mark.parametrize(
    "script",
    [
        "require('fs').readFileSync('/etc/passwd')",
        "process.exit(1)",
        "fetch('http://127.0.0.1/')",
        "this.constructor.constructor('return process')().exit()",
        "new Function('return require')()('child_process')",
        "eval('require')('os')",
    ],
    ids=["require", "process", "fetch", "constructor escape", "Function escape", "eval escape"],
)
def test_a_script_reaching_for_the_host_fails_with_a_reason(script):
    with pytest.raises(ScriptError, match="is not defined"):
        evaluate(script, {})


def test_a_dynamic_import_loads_nothing():
    assert evaluate("import('fs').then(m => m.readFileSync); 'done'", {}) == "done"


@pytest.mark.parametrize(
    "script",
    ["let a = []; for (let i = 0; i < 5000; i++) a = [a]; a", "let o = {}; for (let i = 0; i < 150; i++) o = {o}; o"],
)
def test_a_script_result_nested_too_deeply_fails_with_a_reason(script):
    with pytest.raises(ScriptError, match="NODE_FLOW_MAX_JSON_DEPTH"):
        evaluate(script, {})


def test_one_script_cannot_change_what_the_next_one_sees():
    # A shared V8 context let one script replace JSON.parse (or stash another
    # script's input in a global) for every later script, of any namespace.
    evaluate(
        "JSON.parse = () => ({hacked: true}); globalThis.stash = $; Object.prototype.polluted = 1; 1",
        {"secret": "first"},
    )
    assert evaluate("$", {"mine": 2}) == {"mine": 2}
    assert evaluate("typeof stash + typeof ({}).polluted", {}) == "undefinedundefined"


def test_an_inline_task_of_one_namespace_cannot_read_another_namespaces_script_input(make_key):
    alpha, beta = Api(make_key("admin", "alpha"), "alpha"), Api(make_key("admin", "beta"), "beta")
    thief = "Object.defineProperty(Object.prototype, 'grab', {get() { globalThis.loot = this; return 1 }}); 1"
    register(alpha, "thief", system_task("t", "INLINE", evaluatorType="javascript", expression=thief))
    register(
        beta,
        "victim",
        system_task(
            "t", "INLINE", evaluatorType="javascript", expression="$.grab; $.secret", secret="${workflow.input.secret}"
        ),
    )
    register(
        alpha,
        "fence",
        system_task(
            "t", "INLINE", evaluatorType="javascript", expression="typeof loot === 'undefined' ? 'nothing' : loot"
        ),
    )
    runs = [start(alpha, "thief"), start(beta, "victim", {"secret": "s3cret"}), start(alpha, "fence")]
    run_system_tasks()
    fence = execution(alpha, runs[2]["id"])
    assert task_at(fence, "t")["outputData"] == {"result": "nothing"}


def test_a_script_result_that_is_not_text_fails_with_a_reason():
    with pytest.raises(ScriptError, match="surrogate"):
        evaluate("'\\ud800'", {})


def test_a_script_result_holding_a_nul_fails_with_a_reason():
    # PostgreSQL's jsonb cannot store "\u0000": the result would fail to save.
    with pytest.raises(ScriptError, match="not text"):
        evaluate("({k: 'a\\u0000b'})", {})


@pytest.mark.parametrize("code", ["(function () {})", "Symbol('s')"])
def test_a_script_result_that_is_not_json_fails_with_a_reason(code):
    # JSON.stringify gives undefined for these: the result is no JSON text at all.
    with pytest.raises(ScriptError, match="not JSON data"):
        evaluate(code, {})


def test_it_refuses_a_nul_in_a_namespace_name_from_an_all_namespaces_key(make_key):
    response = Api(make_key("admin", None), "a%00b").get("executions")
    assert_error(response, 400, "VALIDATION_ERROR")


def test_the_depth_walk_is_iterative():
    value: list = []
    for _ in range(100_000):
        value = [value]
    assert nested_deeper_than(value, 100)
    assert not nested_deeper_than([[1], {"a": [2]}], 3)
    assert nested_deeper_than([[1], {"a": [[2]]}], 3)
    assert nested_deeper_than([], 0) and not nested_deeper_than(5, 0)
    assert not nested_deeper_than([[], {}], 2) and nested_deeper_than([[], [{}]], 2)


# The JSON parser settles its checks from the body's text where it can
# (nodeflow/parsers.py); these bodies sit at the edges of those shortcuts.
@pytest.mark.parametrize(
    ("raw", "field"),
    [(b'{"a": [1, 1E400]}', "a[1]"), (b'{"a": {"b": -1e+400}}', "a.b"), (b'{"a": 1' + b"0" * 400 + b".5}", "a")],
    ids=["capital E", "signed exponent", "400 digits and a fraction"],
)
def test_the_parser_names_a_number_too_large_however_it_is_written(raw, field):
    with pytest.raises(InvalidField) as refused:
        JSONParser().parse_bytes(raw)
    assert refused.value.fields["field"] == field


@pytest.mark.parametrize(
    "raw",
    [b'{"s": "\\\\u0000"}', b'{"s": "[[[[' + b"[" * 200 + b'"}', b'{"a": [' + b"[1]," * 300 + b"[1]]}"],
    ids=["an escaped backslash before u0000", "brackets inside a string", "wide, not deep"],
)
def test_the_parser_accepts_what_only_looks_like_a_refusal(raw):
    assert JSONParser().parse_bytes(raw) == json.loads(raw)


@pytest.mark.parametrize(
    "raw",
    [b'{"s": "\\u0000"}', b'{"s": "\\uD800"}', b'{"a": ' + b"[" * 101 + b"]" * 101 + b"}"],
    ids=["NUL", "lone surrogate, capitals", "deep"],
)
def test_the_parser_refuses_what_its_text_allows(raw):
    with pytest.raises(ParseError):
        JSONParser().parse_bytes(raw)


def test_the_parser_reads_numbers_as_json_does():
    raw = json.dumps({"results": [{"n": 1.5, "m": -2e-5, "k": 10**30, "f": 3.0} for _ in range(100)]}).encode()
    assert JSONParser().parse_bytes(raw) == json.loads(raw)


@pytest.mark.parametrize("route", BODY_ROUTES, ids=BODY_IDS)
@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity", "-Infinity"])
def test_it_refuses_a_number_that_is_not_finite_anywhere_naming_the_field(world, route, number):
    # 1e400 is valid JSON that parses as infinity: no jsonb column and no JSON answer can hold it.
    body = json.dumps({**valid_body(world, route), "extra": {"deep": [1, "PLACEHOLDER"]}})
    raw = body.replace('"PLACEHOLDER"', number).encode()
    before = fingerprint()
    response = send(world, route, raw)
    assert 400 <= response.status_code < 500, response.content
    if number.endswith("e400"):
        assert response.json()["field"] == "extra.deep[1]", response.json()
    assert fingerprint() == before


@pytest.mark.parametrize("text", ["{x: .inf}", "{x: -.inf}", "{x: .nan}"])
def test_it_refuses_yaml_numbers_that_are_not_finite(world, text):
    route = ("POST", "metadata/workflow-definitions")
    raw = f"name: w\nvariables: {text}\ntasks: [{{name: t, taskReferenceName: t}}]".encode()
    body = assert_error(send(world, route, raw, "application/yaml"), 400, "VALIDATION_ERROR")
    assert body["field"] == "variables.x"


@pytest.mark.parametrize("route", [("POST", "tasks/<str:task_id>/result"), ("POST", "executions")])
def test_a_number_that_is_not_finite_in_output_or_input_changes_nothing(world, route):
    body = valid_body(world, route)
    key = "outputData" if "result" in route[1] else "input"
    raw = json.dumps({**body, key: {"n": "PLACEHOLDER"}}).replace('"PLACEHOLDER"', "1e400").encode()
    before = fingerprint()
    response = assert_error(send(world, route, raw), 400, "VALIDATION_ERROR")
    assert response["field"] == f"{key}.n"
    assert fingerprint() == before
