"""Plainly JSON requests skip DRF's request machinery (nodeflow.plain_json):
each request here is sent twice, once plainly (served by plain_json.dispatch)
and once with a query string the views ignore (served by DRF's dispatch),
and both must give the same status, body and headers, refusals included."""

from __future__ import annotations

import json
import uuid

import pytest
from rest_framework.test import APIClient

from nodeflow import clock, plain_json
from nodeflow.auth import Principal
from nodeflow.models import Role
from tests.conftest import Api
from tests.engine_helpers import poll_one, register, simple, start

COMPARED_HEADERS = ("Content-Type", "Allow", "Vary", "WWW-Authenticate", "Retry-After")


@pytest.fixture
def served(monkeypatch) -> list[str]:
    """The path of every request plain_json.dispatch served."""
    seen: list[str] = []
    original = plain_json.dispatch

    def spy(view, request, *args):
        seen.append(request.path)
        return original(view, request, *args)

    monkeypatch.setattr(plain_json, "dispatch", spy)
    return seen


def both(api: Api, served: list[str], path: str, *, raw: str):
    """The request plainly and through DRF: (plain answer, DRF's answer)."""
    extra = {"HTTP_X_API_KEY": api.key} if api.key else {}
    url = api.url(path)
    before = len(served)
    plain = api.client.post(url, data=raw, content_type="application/json", **extra)
    assert len(served) == before + 1, "the plain request went through DRF's dispatch"
    drf = api.client.post(f"{url}?via=drf", data=raw, content_type="application/json", **extra)
    assert len(served) == before + 1, "a request with a query string went the plain way"
    return plain, drf


def same(plain, drf) -> None:
    assert plain.status_code == drf.status_code, (plain.content, drf.content)
    assert plain.content == drf.content
    for name in COMPARED_HEADERS:
        assert plain.get(name) == drf.get(name), name


@pytest.fixture
def flow(api):
    register(api, "flow", simple("work"))
    return api


REFUSED_STARTS = [
    pytest.param("{}", id="no name"),
    pytest.param('{"name": "nope"}', id="unknown workflow"),
    pytest.param('{"name": "flow", "input": []}', id="input not an object"),
    pytest.param('{"name": "flow", "priority": "high"}', id="priority not a number"),
    pytest.param("{not json", id="not JSON"),
    pytest.param('{"name": "flow", "input": {"x": NaN}}', id="NaN"),
    pytest.param('{"name": "flow", "input": {"x": 1e400}}', id="not finite"),
    pytest.param('{"name": "flow", "input": {"x": "\\u0000"}}', id="NUL"),
    pytest.param('{"name": "flow", "input": {"x": "\\ud800"}}', id="lone surrogate"),
    pytest.param("[" * 5000 + "]" * 5000, id="nested too deeply"),
    pytest.param("", id="no body"),
    pytest.param('"flow"', id="a string"),
]


@pytest.mark.parametrize("raw", REFUSED_STARTS)
def test_a_refused_start_is_refused_alike(flow, served, raw):
    plain, drf = both(flow, served, "executions", raw=raw)
    assert 400 <= plain.status_code < 500
    same(plain, drf)


def test_a_start_is_answered_alike(flow, served):
    key = json.dumps({"name": "flow", "input": {"n": 1}, "idempotencyKey": "k1"})
    plain, drf = both(flow, served, "executions", raw=key)
    assert (plain.status_code, drf.status_code) == (201, 200)
    assert plain.json() == drf.json()
    again, _ = both(flow, served, "executions", raw=key)
    same(again, drf)


@pytest.mark.parametrize(
    "key, status", [pytest.param(None, 401, id="no key"), pytest.param("nf_unknown", 401, id="unknown key")]
)
def test_an_unauthenticated_request_is_refused_alike(flow, served, key, status):
    plain, drf = both(Api(key), served, "executions", raw='{"name": "flow"}')
    assert plain.status_code == status
    same(plain, drf)


def test_a_key_without_the_scope_or_namespace_is_refused_alike(flow, api_for, served):
    for api in (api_for("worker"), api_for("admin", "other", url_namespace="default")):
        plain, drf = both(api, served, "executions", raw='{"name": "flow"}')
        assert plain.status_code == 403
        same(plain, drf)


def test_a_body_over_the_limit_is_refused_alike(flow, served, settings):
    settings.NODE_FLOW_MAX_BODY_BYTES = 64
    plain, drf = both(flow, served, "executions", raw=json.dumps({"name": "flow", "input": {"x": "y" * 100}}))
    assert plain.status_code == 413
    same(plain, drf)


def test_a_quota_refusal_keeps_its_retry_after(flow, served):
    response = flow.put("quotas", {"maxExecutionsPerMinute": 1})
    assert response.status_code == 200, response.json()
    with clock.travel_to(clock.now()):  # the refusal says how long to wait: the same time for both
        start(flow, "flow")
        plain, drf = both(flow, served, "executions", raw='{"name": "flow"}')
    assert plain.status_code == 429 and plain.get("Retry-After")
    same(plain, drf)


def test_worker_routes_answer_alike(flow, served):
    plain, drf = both(flow, served, "tasks/poll/work", raw='{"workerId": "w", "count": 1}')
    same(plain, drf)
    assert plain.json() == []
    for path, raw in [
        ("tasks/poll/bad name", '{"workerId": "w"}'),
        ("tasks/poll/work", '{"workerId": "w", "count": 0}'),
        (f"tasks/{uuid.uuid4()}/result", '{"leaseToken": "t", "status": "COMPLETED"}'),
        ("tasks/not-a-uuid/heartbeat", '{"leaseToken": "t"}'),
        ("tasks/results", '{"results": [{"taskId": "x"}]}'),
    ]:
        plain, drf = both(flow, served, path, raw=raw)
        assert 400 <= plain.status_code < 500, path
        same(plain, drf)


def test_a_stale_result_is_refused_alike(flow, served):
    start(flow, "flow")
    leased = poll_one(flow, "work")
    body = json.dumps({"leaseToken": "stale", "status": "COMPLETED"})
    plain, drf = both(flow, served, f"tasks/{leased['taskId']}/result", raw=body)
    assert plain.status_code == 409
    same(plain, drf)


@pytest.mark.parametrize(
    "headers, content_type",
    [
        pytest.param({"HTTP_ACCEPT": "text/html"}, "application/json", id="a browser's Accept"),
        pytest.param({}, "application/yaml", id="a YAML body"),
        pytest.param({}, "application/json; charset=latin-1", id="another charset"),
    ],
)
def test_what_is_not_plainly_json_goes_through_drf(flow, served, headers, content_type):
    response = flow.client.post(
        flow.url("executions"),
        data="name: flow\n" if "yaml" in content_type else '{"name": "flow"}',
        content_type=content_type,
        HTTP_X_API_KEY=flow.key,
        **headers,
    )
    assert served == []
    assert response.status_code == 201, response.content


def test_only_the_listed_methods_go_the_plain_way(flow, served):
    start(flow, "flow")
    assert flow.get("executions").status_code == 200
    assert served == [flow.url("executions")]  # the start, not the listing


def test_a_forced_authentication_is_honoured(flow, served):
    """DRF's test client can force a user (no key sent): the plain way's
    request is DRF's own Request, which takes it."""
    client = APIClient()
    client.force_authenticate(user=Principal(role=Role.ADMIN, namespace="default", label="forced"))
    response = client.post(flow.url("executions"), data='{"name": "flow"}', content_type="application/json")
    assert response.status_code == 201, response.content
    assert served == [flow.url("executions")]
