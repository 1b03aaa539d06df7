"""Seed 000's "Concurrency", "Rate limits", "Namespace quotas" and
"Diagnosing" sections: each example posted as the seed posts it, answering
in the seed's shape."""

from __future__ import annotations

from nodeflow import clock
from tests.engine_helpers import TASK_DEFS, complete, execution, poll, register, simple, start, sweep


def post_raw(api, path: str, raw: str):
    """As curl sends it: the body byte for byte."""
    return api.call("POST", path, raw=raw)


def test_concurrent_exec_limit_charge(api):
    assert post_raw(api, TASK_DEFS, '{ "name": "charge", "concurrentExecLimit": 2 }').status_code == 201
    register(api, "checkout", simple("charge", "charge"))
    for _ in range(4):
        start(api, "checkout")
    assert len(poll(api, "charge", count=10)) == 2
    assert poll(api, "charge", count=10, worker="second") == []


def test_max_concurrent_tasks_fan_out(api):
    register(
        api,
        "fan_out",
        {
            "name": "fork",
            "taskReferenceName": "fork",
            "type": "FORK_JOIN",
            "forkTasks": [[simple(f"b{i}", "leaf")] for i in range(8)],
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
        maxConcurrentTasks=2,
    )
    started = start(api, "fan_out")
    assert len([t for t in started["tasks"] if t["type"] == "SIMPLE"]) == 2


def test_max_concurrent_executions_nightly_reconcile(api):
    register(api, "nightly_reconcile", simple("r", "reconcile"), maxConcurrentExecutions=1)
    start(api, "nightly_reconcile")
    body = api.post("executions", {"name": "nightly_reconcile"}).json()
    assert (body["error"], body["control"], body["limit"], body["current"]) == (
        "LIMIT_EXCEEDED",
        "maxConcurrentExecutions",
        1,
        1,
    )


def test_named_semaphores_legacy_erp(api):
    put = api.call("PUT", "semaphores/legacy_erp", raw='{"permits":4}')
    assert put.status_code == 201
    assert post_raw(api, TASK_DEFS, '{"name":"export_report","semaphores":["legacy_erp"]}').status_code == 201
    register(api, "reports", simple("export", "export_report"))
    for _ in range(5):
        start(api, "reports")
    poll(api, "export_report", count=10)
    assert api.get("semaphores").json() == [{"name": "legacy_erp", "permits": 4, "held": 4}]


def test_task_rate_limit_partner_api(api, frozen_clock):
    body = '{ "name": "partner_api", "rateLimitPerFrequency": 100, "rateLimitFrequencySeconds": 60 }'
    assert post_raw(api, TASK_DEFS, body).status_code == 201
    register(api, "sync", simple("call", "partner_api"))
    for _ in range(105):
        start(api, "sync")
    leased = poll(api, "partner_api", count=100)
    assert len(leased) == 100
    for item in leased[:10]:
        complete(api, item)
    assert poll(api, "partner_api", count=100) == []
    clock.advance(60)
    assert len(poll(api, "partner_api", count=100)) == 5


def test_workflow_rate_limit_tenant_sync(api):
    register(
        api,
        "tenant_sync",
        simple("sync", "sync"),
        rateLimitConfig={"rateLimitKey": "${workflow.input.tenantId}", "concurrentExecLimit": 1},
    )
    acme = [start(api, "tenant_sync", {"tenantId": "acme"})["id"] for _ in range(3)]
    globex = start(api, "tenant_sync", {"tenantId": "globex"})
    assert [execution(api, pk)["awaitingAdmission"] for pk in acme] == [False, True, True]
    assert globex["awaitingAdmission"] is False
    complete(api, next(t for t in poll(api, "sync", count=10) if t["executionId"] == acme[0]))
    sweep()
    assert [execution(api, pk)["awaitingAdmission"] for pk in acme] == [False, False, True]


def test_namespace_quotas(api):
    raw = """{
    "maxConcurrentExecutions": 5000,
    "maxExecutionsPerMinute": 2000,
    "maxWorkflowDefinitions": 500,
    "maxSchedules": 100
  }"""
    response = api.call("PUT", "quotas", raw=raw)
    assert response.status_code == 200
    assert response.json() == {
        "maxConcurrentExecutions": 5000,
        "maxExecutionsPerMinute": 2000,
        "maxWorkflowDefinitions": 500,
        "maxSchedules": 100,
    }
    api.put("quotas", {"maxConcurrentExecutions": 0})
    register(api, "wf", simple("t", "t"))
    refused = api.post("executions", {"name": "wf"})
    assert refused.status_code == 429 and "Retry-After" in refused
    assert {"quota", "limit", "current", "retryAfterSeconds"} <= set(refused.json())


def test_diagnosing_why_is_my_task_not_running(api):
    post_raw(api, TASK_DEFS, '{ "name": "charge", "concurrentExecLimit": 2 }')
    register(api, "checkout", simple("charge", "charge"))
    ids = [start(api, "checkout")["id"] for _ in range(3)]
    poll(api, "charge", count=10)
    view = api.get(f"executions/{ids[2]}").json()
    assert (view["status"], view["awaitingAdmission"], view["reasonForIncompletion"]) == ("RUNNING", False, None)
    waiting = [t for i in ids for t in execution(api, i)["tasks"] if t["status"] == "SCHEDULED"]
    assert [t["blockedBy"]["control"] for t in waiting] == ["concurrentExecLimit"]
    assert api.get("queues/charge/depth").json() == {"taskType": "charge", "depth": 1, "inFlight": 2}
    assert api.get("queues").json() == [{"taskType": "charge", "depth": 1, "inFlight": 2}]
    assert api.get("queues/workers").json()[0]["workerId"] == "w1"
    assert api.get("semaphores").json() == []
    assert api.get("metadata/task-definitions/charge").json()["concurrentExecLimit"] == 2
    assert api.call("POST", f"executions/{ids[2]}/decide").status_code == 200
