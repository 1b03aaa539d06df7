"""The operations surface (issue 15.7): an optional key for /metrics,
failed authentication throttled per client, and keys that cannot exist
refused without a database query."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from nodeflow import clock
from nodeflow.models import ApiKey

pytestmark = pytest.mark.django_db

A_KEY_SHAPE_NOBODY_HAS = "nf_" + "A" * 43


def _get(path: str, **headers):
    return APIClient().get(path, **headers)


def test_a_key_that_cannot_exist_costs_no_query(api):
    for raw in ("nope", "nf_short", "x" * 5000, "nf_" + "!" * 43):
        with CaptureQueriesContext(connection) as queries:
            response = _get("/v1/ns/default/executions", HTTP_X_API_KEY=raw)
        assert response.status_code == 401, response.json()
        assert [q for q in queries.captured_queries if ApiKey._meta.db_table in q["sql"]] == [], raw


def test_a_key_of_the_right_shape_is_looked_up(api):
    with CaptureQueriesContext(connection) as queries:
        assert _get("/v1/ns/default/executions", HTTP_X_API_KEY=A_KEY_SHAPE_NOBODY_HAS).status_code == 401
    assert any(ApiKey._meta.db_table in q["sql"] for q in queries.captured_queries)


def test_failed_authentication_is_throttled_per_client_and_forgiven_with_time(api, settings, frozen_clock):
    settings.NODE_FLOW_AUTH_FAILURES_PER_MINUTE = 3
    for _ in range(3):
        assert _get("/v1/ns/default/executions", HTTP_X_API_KEY=A_KEY_SHAPE_NOBODY_HAS).status_code == 401
    with CaptureQueriesContext(connection) as queries:
        throttled = _get("/v1/ns/default/executions", HTTP_X_API_KEY=A_KEY_SHAPE_NOBODY_HAS)
    assert throttled.status_code == 429, throttled.json()
    assert throttled.json()["error"] == "THROTTLED" and int(throttled["Retry-After"]) == 60
    assert queries.captured_queries == []
    # Another address is not held back for this one's failures.
    other = _get("/v1/ns/default/executions", HTTP_X_API_KEY=A_KEY_SHAPE_NOBODY_HAS, REMOTE_ADDR="10.0.0.9")
    assert other.status_code == 401
    clock.advance(61)
    assert _get("/v1/ns/default/executions", HTTP_X_API_KEY=api.key).status_code == 200


def test_a_valid_key_is_never_counted_as_a_failure(api, settings):
    settings.NODE_FLOW_AUTH_FAILURES_PER_MINUTE = 1
    for _ in range(5):
        assert _get("/v1/ns/default/executions", HTTP_X_API_KEY=api.key).status_code == 200


def test_metrics_are_open_without_a_metrics_key(settings):
    settings.NODE_FLOW_METRICS_KEY = ""
    assert _get("/metrics").status_code == 200


@pytest.mark.parametrize(
    "headers, status",
    [
        ({}, 401),
        ({"HTTP_AUTHORIZATION": "Bearer wrong"}, 401),
        ({"HTTP_X_API_KEY": "wrong"}, 401),
        ({"HTTP_AUTHORIZATION": "Bearer s3cret-metrics"}, 200),
        ({"HTTP_X_API_KEY": "s3cret-metrics"}, 200),
    ],
)
def test_metrics_need_the_metrics_key_when_one_is_set(settings, headers, status):
    settings.NODE_FLOW_METRICS_KEY = "s3cret-metrics"
    response = _get("/metrics", **headers)
    assert response.status_code == status
    if status == 401:
        assert "NODE_FLOW_METRICS_KEY" in response.json()["message"]
    else:
        assert b"nodeflow_" in response.content
