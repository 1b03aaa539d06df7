"""Namespace quotas (SPEC §8): admin only; 429 QUOTA_EXCEEDED with quota,
limit, current, retryAfterSeconds and a Retry-After header."""

from __future__ import annotations

import pytest

from executions.models import Execution
from nodeflow import clock
from tests.engine_helpers import register, simple, start

SEED = {
    "maxConcurrentExecutions": 5000,
    "maxExecutionsPerMinute": 2000,
    "maxWorkflowDefinitions": 500,
    "maxSchedules": 100,
}
UNLIMITED = dict.fromkeys(SEED)


def refused(response, quota: str, limit: int, current: int) -> dict:
    assert response.status_code == 429, response.json()
    body = response.json()
    assert body["error"] == "QUOTA_EXCEEDED"
    assert (body["quota"], body["limit"], body["current"]) == (quota, limit, current)
    assert body["retryAfterSeconds"] > 0
    assert int(response["Retry-After"]) >= 1
    return body


def test_quotas_are_unlimited_until_set(api):
    assert api.get("quotas").json() == UNLIMITED


def test_the_seed_put_sets_every_quota(api):
    response = api.put("quotas", SEED)
    assert response.status_code == 200 and response.json() == SEED
    assert api.get("quotas").json() == SEED


def test_a_put_replaces_every_quota(api):
    api.put("quotas", SEED)
    assert api.put("quotas", {"maxSchedules": 3}).json() == {**UNLIMITED, "maxSchedules": 3}
    assert api.put("quotas", {"maxSchedules": None}).json() == UNLIMITED


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"maxSchedules": -1}, "maxSchedules"),
        ({"maxSchedules": "3"}, "maxSchedules"),
        ({"maxSchedules": 1.5}, "maxSchedules"),
        ({"maxThings": 3}, "maxThings"),
    ],
)
def test_it_refuses_bad_quota_bodies(api, body, field):
    response = api.put("quotas", body)
    assert response.status_code == 400 and response.json()["field"] == field


def test_only_admins_see_or_set_quotas(api_for):
    for role in ("developer", "worker"):
        assert api_for(role).get("quotas").status_code == 403
        assert api_for(role).put("quotas", SEED).status_code == 403


def test_max_concurrent_executions_counts_active_runs(api):
    register(api, "wf", simple("t", "work"))
    api.put("quotas", {"maxConcurrentExecutions": 2})
    first = start(api, "wf")
    start(api, "wf")
    refused(api.post("executions", {"name": "wf"}), "maxConcurrentExecutions", 2, 2)
    assert Execution.objects.count() == 2
    api.post(f"executions/{first['id']}/terminate", {})
    start(api, "wf")


def test_max_executions_per_minute_is_a_fixed_window(api, frozen_clock):
    register(api, "wf", simple("t", "work"))
    api.put("quotas", {"maxExecutionsPerMinute": 2})
    clock.advance(20)
    start(api, "wf"), start(api, "wf")
    response = api.post("executions", {"name": "wf"})
    body = refused(response, "maxExecutionsPerMinute", 2, 2)
    assert body["retryAfterSeconds"] == 40 and response["Retry-After"] == "40"
    clock.advance(40)
    start(api, "wf")


def test_a_refused_start_spends_nothing(api, frozen_clock):
    register(api, "wf", simple("t", "work"), maxConcurrentExecutions=1)
    api.put("quotas", {"maxExecutionsPerMinute": 2})
    start(api, "wf")
    assert api.post("executions", {"name": "wf"}).status_code == 429  # LIMIT_EXCEEDED rolls its count back
    register(api, "other", simple("t", "work"))
    start(api, "other")
    refused(api.post("executions", {"name": "other"}), "maxExecutionsPerMinute", 2, 2)


def test_an_idempotent_repeat_is_not_a_new_start(api):
    register(api, "wf", simple("t", "work"))
    api.put("quotas", {"maxConcurrentExecutions": 1})
    first = start(api, "wf", idempotencyKey="k")
    assert start(api, "wf", idempotencyKey="k", expect=200)["id"] == first["id"]


def test_max_workflow_definitions_counts_names_not_versions(api):
    api.put("quotas", {"maxWorkflowDefinitions": 1})
    register(api, "a", simple("t", "work"))
    register(api, "a", simple("t2", "work"))  # a new version of an existing name
    response = api.post("metadata/workflow-definitions", {"name": "b", "tasks": [simple("t", "work")]})
    refused(response, "maxWorkflowDefinitions", 1, 1)


def test_max_schedules_counts_new_schedules(api):
    register(api, "wf", simple("t", "work"))
    api.put("quotas", {"maxSchedules": 1})
    body = {"name": "s1", "cron": "* * * * *", "workflowName": "wf"}
    assert api.post("schedules", body).status_code == 201
    assert api.post("schedules", {**body, "cron": "*/5 * * * *"}).status_code == 200  # a replace
    refused(api.post("schedules", {**body, "name": "s2"}), "maxSchedules", 1, 1)
