"""Execution lifecycle through the API (SPEC §6): start (idempotency,
priority), terminate, pause/resume, retry, restart, decide, listing, and
namespace isolation."""

from __future__ import annotations

import pytest

from nodeflow import clock
from tests.engine_helpers import (
    complete,
    execution,
    fail,
    no_retries,
    poll,
    poll_and_complete,
    poll_one,
    register,
    report,
    simple,
    start,
    statuses,
    sweep,
    task_at,
    tasks_at,
)

UNKNOWN_ID = "01a22bcb-f1c0-791e-9b81-4291dca332a1"


def act(api, execution_id: str, verb: str, body: dict | None = None, expect: int = 200) -> dict:
    response = api.post(f"executions/{execution_id}/{verb}", body or {})
    assert response.status_code == expect, response.json()
    return response.json()


# --- start ------------------------------------------------------------------


def test_it_starts_an_execution_and_schedules_its_first_task(api):
    register(api, "orders", simple("charge", inputParameters={"id": "${workflow.input.id}"}), simple("ship"))
    started = start(api, "orders", {"id": 1}, correlationId="order-1")
    assert started["status"] == "RUNNING"
    assert (started["name"], started["version"], started["correlationId"]) == ("orders", 1, "order-1")
    assert statuses(started) == {"charge": "SCHEDULED"}
    assert task_at(started, "charge")["inputData"] == {"id": 1}


def test_it_returns_the_same_execution_for_the_same_idempotency_key(api):
    register(api, "orders", simple("charge"))
    first = start(api, "orders", {"id": 1}, idempotencyKey="order-1")
    again = start(api, "orders", {"id": 2}, idempotencyKey="order-1", expect=200)
    assert again["id"] == first["id"]
    assert again["input"] == {"id": 1}
    assert len(again["tasks"]) == 1
    other = start(api, "orders", {"id": 2}, idempotencyKey="order-2")
    assert other["id"] != first["id"]
    assert len(api.get("executions?name=orders").json()["results"]) == 2


def test_it_runs_the_published_version_unless_one_is_named(api):
    register(api, "orders", simple("v1_task"))
    register(api, "orders", simple("v2_task"))  # a draft: version 1 stays published
    assert statuses(start(api, "orders")) == {"v1_task": "SCHEDULED"}
    named = start(api, "orders", version=2)
    assert named["version"] == 2
    assert statuses(named) == {"v2_task": "SCHEDULED"}
    assert api.post("executions", {"name": "orders", "version": 3}).status_code == 404


def test_it_refuses_to_start_an_unknown_workflow(api):
    response = api.post("executions", {"name": "nope"})
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "orders", "priority": 100}, "priority"),
        ({"name": "orders", "priority": -1}, "priority"),
        ({"name": "orders", "input": [1]}, "input"),
        ({"name": "orders", "version": 0}, "version"),
        ({}, "name"),
    ],
)
def test_it_refuses_bad_start_bodies(api, body, field):
    register(api, "orders", simple("charge"))
    response = api.post("executions", body)
    assert response.status_code == 400
    assert field in response.json()["message"]


def test_it_leases_the_higher_priority_task_first(api):
    register(api, "orders", simple("charge"))
    low = start(api, "orders", priority=1)
    high = start(api, "orders", priority=9)
    middle = start(api, "orders", priority=5)
    order = [poll_one(api, "charge")["executionId"] for _ in range(3)]
    assert order == [high["id"], middle["id"], low["id"]]


# --- terminate --------------------------------------------------------------


def test_it_terminates_cancelling_open_tasks_and_fencing_workers(api):
    register(
        api,
        "orders",
        {
            "name": "split",
            "taskReferenceName": "split",
            "type": "FORK_JOIN",
            "forkTasks": [[simple("a")], [simple("b")]],
        },
    )
    started = start(api, "orders")
    leased = poll_one(api, "a")
    view = act(api, started["id"], "terminate", {"reason": "customer cancelled"})
    assert view["status"] == "TERMINATED"
    assert view["reasonForIncompletion"] == "customer cancelled"
    assert view["endedAt"] is not None
    assert task_at(view, "a")["status"] == "CANCELED"
    assert task_at(view, "b")["status"] == "CANCELED"
    heartbeat = api.post(f"tasks/{leased['taskId']}/heartbeat", {"leaseToken": leased["leaseToken"]})
    assert heartbeat.status_code == 409
    assert heartbeat.json()["taskStatus"] == "CANCELED"
    assert report(api, leased).status_code == 409
    assert poll(api, "b") == []
    assert task_at(execution(api, started["id"]), "a")["status"] == "CANCELED"


def test_it_refuses_to_terminate_twice(api):
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    act(api, started["id"], "terminate")
    body = act(api, started["id"], "terminate", expect=409)
    assert body["error"] == "CONFLICT"


def test_it_refuses_to_terminate_a_completed_execution(api):
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    poll_and_complete(api, "charge")
    act(api, started["id"], "terminate", expect=409)
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_cascades_terminate_to_child_executions(api):
    register(api, "child", simple("inner"))
    register(
        api,
        "parent",
        {"name": "call", "taskReferenceName": "sub", "type": "SUB_WORKFLOW", "subWorkflowParam": {"name": "child"}},
    )
    started = start(api, "parent")
    child_id = task_at(started, "sub")["subWorkflowId"]
    leased = poll_one(api, "inner")
    act(api, started["id"], "terminate", {"reason": "stop"})
    child = execution(api, child_id)
    assert child["status"] == "TERMINATED"
    assert task_at(child, "sub.inner")["status"] == "CANCELED"
    assert report(api, leased).status_code == 409
    assert task_at(execution(api, started["id"]), "sub")["status"] == "CANCELED"
    sweep()
    assert execution(api, started["id"])["status"] == "TERMINATED"


def test_it_does_not_let_an_optional_task_swallow_terminate(api):
    register(api, "orders", simple("extra", optional=True), simple("after"))
    started = start(api, "orders")
    act(api, started["id"], "terminate")
    sweep()
    view = execution(api, started["id"])
    assert view["status"] == "TERMINATED"
    assert statuses(view) == {"extra": "CANCELED"}


# --- pause and resume -------------------------------------------------------


def test_it_dispatches_nothing_while_paused(api):
    register(api, "orders", simple("charge"), simple("ship"))
    started = start(api, "orders")
    view = act(api, started["id"], "pause")
    assert view["status"] == "PAUSED"
    blocked = task_at(view, "charge")["blockedBy"]
    assert blocked["control"] == "paused"
    assert poll(api, "charge", count=10) == []
    resumed = act(api, started["id"], "resume")
    assert resumed["status"] == "RUNNING"
    assert task_at(resumed, "charge")["blockedBy"] is None
    poll_and_complete(api, "charge")
    poll_and_complete(api, "ship")
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_lets_running_tasks_finish_while_paused_and_schedules_on_resume(api):
    register(api, "orders", simple("charge"), simple("ship"))
    started = start(api, "orders")
    leased = poll_one(api, "charge")
    act(api, started["id"], "pause")
    complete(api, leased, {"paid": True})
    view = execution(api, started["id"])
    assert view["status"] == "PAUSED"
    assert statuses(view) == {"charge": "COMPLETED"}
    act(api, started["id"], "resume")
    assert statuses(execution(api, started["id"])) == {"charge": "COMPLETED", "ship": "SCHEDULED"}
    poll_and_complete(api, "ship")
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_refuses_pause_and_resume_in_the_wrong_state(api):
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    act(api, started["id"], "resume", expect=409)
    act(api, started["id"], "pause")
    act(api, started["id"], "pause", expect=409)
    act(api, started["id"], "terminate")
    act(api, started["id"], "resume", expect=409)


def test_it_terminates_a_paused_execution(api):
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    act(api, started["id"], "pause")
    view = act(api, started["id"], "terminate")
    assert view["status"] == "TERMINATED"
    assert statuses(view) == {"charge": "CANCELED"}
    assert task_at(view, "charge")["blockedBy"] is None


# --- retry and restart ------------------------------------------------------


def test_it_retries_from_the_failed_task(api):
    no_retries(api, "ship")
    register(api, "orders", simple("charge"), simple("ship"), simple("notify"))
    started = start(api, "orders")
    poll_and_complete(api, "charge")
    fail(api, poll_one(api, "ship"), "courier down")
    assert execution(api, started["id"])["status"] == "FAILED"

    view = act(api, started["id"], "retry")
    assert view["status"] == "RUNNING"
    assert view["reasonForIncompletion"] is None and view["endedAt"] is None
    attempts = tasks_at(view, "ship")
    assert [(t["attempt"], t["status"]) for t in attempts] == [(1, "FAILED"), (2, "SCHEDULED")]
    assert attempts[0]["idempotencyKey"] == attempts[1]["idempotencyKey"]
    assert len(tasks_at(view, "charge")) == 1
    leased = poll_one(api, "ship")
    assert leased["attempt"] == 2
    assert leased["idempotencyKey"] == attempts[0]["idempotencyKey"]
    complete(api, leased)
    poll_and_complete(api, "notify")
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_retries_a_failed_fork_reopening_its_canceled_branches(api):
    no_retries(api, "a")
    register(
        api,
        "orders",
        {
            "name": "split",
            "taskReferenceName": "split",
            "type": "FORK_JOIN",
            "forkTasks": [[simple("a")], [simple("b")]],
        },
        {"name": "merge", "taskReferenceName": "merge", "type": "JOIN", "joinOn": ["a", "b"]},
    )
    started = start(api, "orders")
    fail(api, poll_one(api, "a"))
    assert statuses(execution(api, started["id"])) == {"split": "FAILED", "a": "FAILED", "b": "CANCELED"}
    view = act(api, started["id"], "retry")
    assert view["status"] == "RUNNING"
    assert task_at(view, "split")["status"] == "IN_PROGRESS"
    poll_and_complete(api, "a", {"x": 1})
    poll_and_complete(api, "b", {"y": 2})
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert task_at(view, "merge")["outputData"] == {"a": {"x": 1}, "b": {"y": 2}}


def test_it_fails_again_on_retry_when_a_switch_expression_failed(api):
    register(
        api,
        "orders",
        {
            "name": "route",
            "taskReferenceName": "route",
            "type": "SWITCH",
            "evaluatorType": "javascript",
            "expression": "$.missing.field",
            "decisionCases": {"x": [simple("a")]},
        },
        simple("after"),
    )
    started = start(api, "orders")
    assert started["status"] == "FAILED"
    view = act(api, started["id"], "retry")
    # Evaluated again it throws again: the run must not skip the SWITCH.
    assert view["status"] == "FAILED"
    assert statuses(view) == {"route": "FAILED_WITH_TERMINAL_ERROR"}
    assert "SWITCH expression" in view["reasonForIncompletion"]


@pytest.mark.parametrize("items", [[1, 2, 3], {"not": "a list"}])
def test_it_fails_again_on_retry_when_a_dynamic_fork_refused_its_items(api, settings, items):
    settings.NODE_FLOW_MAX_FORK_ITEMS = 2
    register(
        api,
        "orders",
        {
            "name": "fan",
            "taskReferenceName": "fan",
            "type": "FORK_JOIN_DYNAMIC",
            "forkTask": simple("charge"),
            "inputParameters": {"items": "${workflow.input.items}"},
        },
        simple("after"),
    )
    started = start(api, "orders", {"items": items})
    assert started["status"] == "FAILED"
    view = act(api, started["id"], "retry")
    assert view["status"] == "FAILED"
    assert statuses(view) == {"fan": "FAILED_WITH_TERMINAL_ERROR"}
    assert poll(api, "charge", count=10) == []


def test_it_retries_a_do_while_from_its_failed_iteration(api):
    no_retries(api, "step")
    register(
        api,
        "orders",
        {
            "name": "loop",
            "taskReferenceName": "loop",
            "type": "DO_WHILE",
            "loopCondition": "$.iteration < 3",
            "maxIterations": 5,
            "loopOver": [simple("step")],
        },
    )
    started = start(api, "orders")
    poll_and_complete(api, "step")
    fail(api, poll_one(api, "step"))
    assert execution(api, started["id"])["status"] == "FAILED"
    view = act(api, started["id"], "retry")
    assert view["status"] == "RUNNING"
    assert task_at(view, "loop")["status"] == "IN_PROGRESS"
    assert [(t["attempt"], t["status"]) for t in tasks_at(view, "loop[2].step")] == [(1, "FAILED"), (2, "SCHEDULED")]
    leased = poll_one(api, "step")
    assert (leased["path"], leased["attempt"]) == ("loop[2].step", 2)
    complete(api, leased)
    leased = poll_one(api, "step")
    assert (leased["path"], leased["attempt"]) == ("loop[3].step", 1)
    complete(api, leased)
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert task_at(view, "loop")["outputData"] == {"iteration": 3}


def test_it_retries_a_terminated_execution(api):
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    act(api, started["id"], "terminate")
    view = act(api, started["id"], "retry")
    assert view["status"] == "RUNNING"
    poll_and_complete(api, "charge")
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_refuses_to_retry_a_running_or_completed_execution(api):
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    act(api, started["id"], "retry", expect=409)
    poll_and_complete(api, "charge")
    act(api, started["id"], "retry", expect=409)


def test_it_restarts_as_a_new_run_with_new_idempotency_keys(api):
    register(api, "orders", simple("charge"), simple("ship"), variables={"stage": "new"})
    started = start(api, "orders", {"id": 1})
    old_charge = poll_one(api, "charge")
    complete(api, old_charge, {"paid": 1})
    poll_and_complete(api, "ship")
    first_run = execution(api, started["id"])
    assert first_run["status"] == "COMPLETED"

    view = act(api, started["id"], "restart")
    assert view["id"] == started["id"]
    assert view["status"] == "RUNNING"
    assert view["run"] == 2
    assert view["output"] == {} and view["endedAt"] is None
    assert [(t["path"], t["status"]) for t in view["tasks"]] == [("charge", "SCHEDULED")]
    new_key = task_at(view, "charge")["idempotencyKey"]
    assert new_key != old_charge["idempotencyKey"]
    leased = poll_one(api, "charge")
    assert leased["idempotencyKey"] == new_key and leased["attempt"] == 1
    assert report(api, old_charge).status_code == 409
    complete(api, leased)
    poll_and_complete(api, "ship")
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert len(view["tasks"]) == 2


def test_it_refuses_to_restart_a_running_execution(api):
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    act(api, started["id"], "restart", expect=409)


# --- decide -----------------------------------------------------------------


def test_it_decides_on_request(api):
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    view = act(api, started["id"], "decide")
    assert view["id"] == started["id"]
    assert statuses(view) == {"charge": "SCHEDULED"}


def test_it_decides_an_ended_execution_without_changing_it(api):
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    act(api, started["id"], "terminate")
    assert act(api, started["id"], "decide")["status"] == "TERMINATED"


# --- listing ----------------------------------------------------------------


def test_it_filters_executions_by_status_name_and_correlation_id(api):
    register(api, "orders", simple("charge"))
    register(api, "refunds", simple("refund"))
    a = start(api, "orders", correlationId="c1")
    b = start(api, "orders", correlationId="c2")
    c = start(api, "refunds", correlationId="c1")
    act(api, b["id"], "terminate")

    def ids(query: str) -> set[str]:
        response = api.get(f"executions{query}")
        assert response.status_code == 200, response.json()
        return {row["id"] for row in response.json()["results"]}

    assert ids("") == {a["id"], b["id"], c["id"]}
    assert ids("?name=orders") == {a["id"], b["id"]}
    assert ids("?status=TERMINATED") == {b["id"]}
    assert ids("?status=RUNNING&name=orders") == {a["id"]}
    assert ids("?correlationId=c1") == {a["id"], c["id"]}
    assert ids("?name=nothing") == set()
    listed = api.get("executions?name=refunds").json()["results"][0]
    assert "tasks" not in listed


def test_it_refuses_an_unknown_status_filter(api):
    response = api.get("executions?status=SLEEPING")
    assert response.status_code == 400
    assert response.json()["field"] == "status"


def test_it_refuses_a_forged_cursor(api):
    response = api.get("executions?cursor=not-a-cursor")
    assert response.status_code == 400
    assert response.json()["field"] == "cursor"


def test_it_pages_through_executions_newest_first(api, frozen_clock):
    register(api, "orders", simple("charge"))
    started = []
    for index in range(7):
        started.append(start(api, "orders")["id"])
        if index % 3 == 0:
            clock.advance(1)  # some share a creation time, some do not
    seen, cursor = [], None
    while True:
        response = api.get("executions?limit=3" + (f"&cursor={cursor}" if cursor else ""))
        assert response.status_code == 200
        body = response.json()
        assert len(body["results"]) <= 3
        seen += [row["id"] for row in body["results"]]
        cursor = body["next"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(started)
    assert len(seen) == len(set(seen)) == 7
    created = [execution(api, pk)["createdAt"] for pk in seen]
    assert created == sorted(created, reverse=True)


def test_it_gives_no_next_cursor_on_the_last_page(api):
    register(api, "orders", simple("charge"))
    start(api, "orders")
    body = api.get("executions?limit=1").json()
    assert len(body["results"]) == 1 and body["next"] is None


# --- not found and other namespaces -----------------------------------------


@pytest.mark.parametrize("execution_id", [UNKNOWN_ID, "not-a-uuid", "12345"])
def test_it_answers_404_for_an_unknown_or_malformed_id(api, execution_id):
    response = api.get(f"executions/{execution_id}")
    assert response.status_code == 404
    assert response.json()["error"] == "NOT_FOUND"
    for verb in ("terminate", "pause", "resume", "retry", "restart", "decide"):
        assert api.post(f"executions/{execution_id}/{verb}").status_code == 404, verb


def test_it_hides_another_namespaces_execution(api, api_for):
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    outsider = api_for("admin", "other")
    assert outsider.get(f"executions/{started['id']}").status_code == 404
    assert outsider.post(f"executions/{started['id']}/terminate").status_code == 404
    assert outsider.get("executions").json()["results"] == []
    trespasser = api_for("admin", "other", url_namespace="default")
    assert trespasser.get(f"executions/{started['id']}").status_code == 403
    assert trespasser.post(f"executions/{started['id']}/terminate").status_code == 403
    assert execution(api, started["id"])["status"] == "RUNNING"


def test_it_does_not_let_a_worker_key_control_executions(api, api_for):
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    worker = api_for("worker")
    assert worker.get(f"executions/{started['id']}").status_code == 403
    assert worker.post(f"executions/{started['id']}/terminate").status_code == 403
    assert worker.post("executions", {"name": "orders"}).status_code == 403
