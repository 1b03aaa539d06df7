"""Waiting tasks (SPEC §5): WAIT, HUMAN, PULL_WORKFLOW_MESSAGES and
WAIT_FOR_WEBHOOK. Never dispatched; completed by time, a person, posted
messages or an inbound webhook."""

from __future__ import annotations

import datetime as dt

import pytest

from nodeflow import clock
from tests.engine_helpers import (
    advance,
    execution,
    poll,
    poll_and_complete,
    register,
    simple,
    start,
    statuses,
    sweep,
    task_at,
)


def wait(ref: str, **inputs) -> dict:
    return {"name": ref, "taskReferenceName": ref, "type": "WAIT", "inputParameters": inputs}


def human(ref: str, inputs: dict | None = None, **fields) -> dict:
    return {"name": ref, "taskReferenceName": ref, "type": "HUMAN", "inputParameters": inputs or {}, **fields}


def pull(ref: str, batch_size: int | None = None) -> dict:
    inputs = {} if batch_size is None else {"batchSize": batch_size}
    return {"name": ref, "taskReferenceName": ref, "type": "PULL_WORKFLOW_MESSAGES", "inputParameters": inputs}


def webhook_wait(ref: str, name: str, matches: dict) -> dict:
    return {"name": name, "taskReferenceName": ref, "type": "WAIT_FOR_WEBHOOK", "inputParameters": {"matches": matches}}


# --- WAIT -------------------------------------------------------------------


@pytest.mark.parametrize("duration", ["30s", 30, "0.5m"])
def test_it_completes_a_wait_once_its_duration_has_passed(api, frozen_clock, duration):
    register(api, "pause", wait("nap", duration=duration), simple("after"))
    started = start(api, "pause")
    nap = task_at(started, "nap")
    assert nap["status"] == "IN_PROGRESS"
    assert poll(api, "nap") == []
    advance(29)
    assert statuses(execution(api, started["id"])) == {"nap": "IN_PROGRESS"}
    advance(1)
    view = execution(api, started["id"])
    assert statuses(view) == {"nap": "COMPLETED", "after": "SCHEDULED"}
    assert task_at(view, "nap")["endedAt"] == "2026-06-01T12:00:30Z"


def test_it_completes_a_wait_at_its_until_time(api, frozen_clock):
    until = (frozen_clock + dt.timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    register(api, "pause", wait("nap", until="${workflow.input.until}"), simple("after"))
    started = start(api, "pause", {"until": until})
    advance(2 * 3600 - 1)
    assert task_at(execution(api, started["id"]), "nap")["status"] == "IN_PROGRESS"
    advance(1)
    assert statuses(execution(api, started["id"])) == {"nap": "COMPLETED", "after": "SCHEDULED"}


def test_it_does_not_fire_a_wait_without_the_sweeper(api, frozen_clock):
    register(api, "pause", wait("nap", duration="10s"), simple("after"))
    started = start(api, "pause")
    clock.advance(60)
    assert task_at(execution(api, started["id"]), "nap")["status"] == "IN_PROGRESS"
    sweep()
    assert task_at(execution(api, started["id"]), "nap")["status"] == "COMPLETED"


def test_it_completes_a_wait_whose_until_has_already_passed_at_once(api, frozen_clock):
    register(api, "pause", wait("nap", until="2020-01-01T00:00:00Z"), simple("after"))
    started = start(api, "pause")
    assert statuses(started) == {"nap": "COMPLETED", "after": "SCHEDULED"}


def test_it_fails_a_wait_whose_duration_resolves_to_nonsense(api, frozen_clock):
    register(api, "pause", wait("nap", duration="${workflow.input.d}"))
    started = start(api, "pause", {"d": "soon"})
    assert started["status"] == "FAILED"
    assert task_at(started, "nap")["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "WAIT" in task_at(started, "nap")["reasonForIncompletion"]


def test_it_does_not_complete_a_wait_of_a_terminated_execution(api, frozen_clock):
    register(api, "pause", wait("nap", duration="10s"), simple("after"))
    started = start(api, "pause")
    assert api.post(f"executions/{started['id']}/terminate", {"reason": "stop"}).status_code == 200
    advance(20)
    view = execution(api, started["id"])
    assert view["status"] == "TERMINATED"
    assert statuses(view) == {"nap": "CANCELED"}


# --- HUMAN ------------------------------------------------------------------


def test_it_completes_a_human_task_from_a_developer_without_a_lease(api, api_for):
    register(
        api,
        "approval",
        human("approve", {"order": "${workflow.input.order}"}),
        simple("after", inputParameters={"decision": "${approve.output.decision}"}),
    )
    started = start(api, "approval", {"order": 7})
    task = task_at(started, "approve")
    assert task["status"] == "IN_PROGRESS" and task["inputData"] == {"order": 7}
    assert poll(api, "approve") == []
    developer = api_for("developer")
    response = developer.post(
        f"tasks/{task['taskId']}/result", {"status": "COMPLETED", "outputData": {"decision": "yes"}}
    )
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "COMPLETED"
    view = execution(api, started["id"])
    assert task_at(view, "approve")["outputData"] == {"decision": "yes"}
    assert task_at(view, "after")["inputData"] == {"decision": "yes"}


def test_it_refuses_a_human_result_without_a_lease_from_a_worker_key(api, api_for):
    register(api, "approval", human("approve"))
    started = start(api, "approval")
    task = task_at(started, "approve")
    worker = api_for("worker")
    response = worker.post(f"tasks/{task['taskId']}/result", {"status": "COMPLETED"})
    # 403 naming the role it takes, not "leaseToken: required": no lease would do (issue 19.5)
    assert response.status_code == 403
    assert "developer or admin" in response.json()["message"]
    assert task_at(execution(api, started["id"]), "approve")["status"] == "IN_PROGRESS"


def test_it_refuses_a_leaseless_result_for_a_worker_task(api, api_for):
    register(api, "plain", simple("a"))
    started = start(api, "plain")
    task = task_at(started, "a")
    response = api_for("developer").post(f"tasks/{task['taskId']}/result", {"status": "COMPLETED"})
    assert response.status_code == 400
    assert response.json()["field"] == "leaseToken"
    assert task_at(execution(api, started["id"]), "a")["status"] == "SCHEDULED"


def test_it_fails_the_run_when_a_person_rejects_a_human_task(api, api_for):
    register(api, "approval", human("approve", retryCount=0))
    started = start(api, "approval")
    task = task_at(started, "approve")
    response = api_for("developer").post(
        f"tasks/{task['taskId']}/result", {"status": "FAILED_WITH_TERMINAL_ERROR", "reasonForIncompletion": "rejected"}
    )
    assert response.status_code == 200
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert "rejected" in view["reasonForIncompletion"]


def test_it_answers_409_for_a_human_task_completed_twice(api, api_for):
    register(api, "approval", human("approve"), simple("after"))
    started = start(api, "approval")
    task = task_at(started, "approve")
    developer = api_for("developer")
    assert developer.post(f"tasks/{task['taskId']}/result", {"status": "COMPLETED"}).status_code == 200
    again = developer.post(f"tasks/{task['taskId']}/result", {"status": "COMPLETED", "outputData": {"late": 1}})
    assert again.status_code == 409
    assert task_at(execution(api, started["id"]), "approve")["outputData"] == {}


# --- PULL_WORKFLOW_MESSAGES -------------------------------------------------


def post_message(api, execution_id: str, payload) -> int:
    response = api.post(f"executions/{execution_id}/messages", payload)
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def test_it_completes_a_pull_with_a_message_posted_while_it_waits(api):
    register(api, "inbox", pull("read"), simple("after", inputParameters={"got": "${read.output.messages}"}))
    started = start(api, "inbox")
    assert task_at(started, "read")["status"] == "IN_PROGRESS"
    post_message(api, started["id"], {"hello": 1})
    view = execution(api, started["id"])
    assert task_at(view, "read")["outputData"] == {"messages": [{"hello": 1}]}
    assert task_at(view, "after")["inputData"] == {"got": [{"hello": 1}]}


def test_it_takes_up_to_batch_size_messages_oldest_first(api):
    register(api, "inbox", simple("first"), pull("read", batch_size=2), pull("rest", batch_size=5))
    started = start(api, "inbox")
    for n in range(3):
        post_message(api, started["id"], {"n": n})
    poll_and_complete(api, "first")
    sweep()  # messages posted before the task began are read on the next evaluation
    view = execution(api, started["id"])
    assert task_at(view, "read")["outputData"] == {"messages": [{"n": 0}, {"n": 1}]}
    assert task_at(view, "rest")["outputData"] == {"messages": [{"n": 2}]}
    assert view["status"] == "COMPLETED"


def test_it_keeps_waiting_until_a_message_arrives(api):
    register(api, "inbox", pull("read", batch_size=3))
    started = start(api, "inbox")
    assert api.post(f"executions/{started['id']}/decide").status_code == 200
    assert task_at(execution(api, started["id"]), "read")["status"] == "IN_PROGRESS"
    post_message(api, started["id"], ["a", "list"])
    assert task_at(execution(api, started["id"]), "read")["outputData"] == {"messages": [["a", "list"]]}


def test_it_keeps_messages_posted_while_paused_for_the_resume(api):
    register(api, "inbox", pull("read"))
    started = start(api, "inbox")
    assert api.post(f"executions/{started['id']}/pause").status_code == 200
    post_message(api, started["id"], {"while": "paused"})
    assert task_at(execution(api, started["id"]), "read")["status"] == "IN_PROGRESS"
    assert api.post(f"executions/{started['id']}/resume").status_code == 200
    view = execution(api, started["id"])
    assert task_at(view, "read")["outputData"] == {"messages": [{"while": "paused"}]}
    assert view["status"] == "COMPLETED"


def test_it_refuses_messages_for_an_ended_execution(api):
    register(api, "inbox", pull("read"))
    started = start(api, "inbox")
    api.post(f"executions/{started['id']}/terminate")
    response = api.post(f"executions/{started['id']}/messages", {"late": True})
    assert response.status_code == 409


def test_it_answers_404_for_messages_to_an_unknown_execution(api):
    assert api.post("executions/01a22bcb-f1c0-791e-9b81-4291dca332a1/messages", {"x": 1}).status_code == 404


# --- WAIT_FOR_WEBHOOK -------------------------------------------------------


def test_it_completes_a_webhook_wait_when_the_body_matches(api):
    register(
        api,
        "paid",
        webhook_wait("payment", "order_paid", {"$.order.id": "${workflow.input.orderId}"}),
        simple("ship", inputParameters={"amount": "${payment.output.order.amount}"}),
    )
    started = start(api, "paid", {"orderId": 42})
    other = start(api, "paid", {"orderId": 43})
    assert task_at(started, "payment")["inputData"] == {"matches": {"$.order.id": 42}}

    miss = api.post("webhooks/order_paid", {"order": {"id": 7, "amount": 1}})
    assert miss.status_code == 200
    assert miss.json() == {"matched": 0, "taskIds": []}
    assert task_at(execution(api, started["id"]), "payment")["status"] == "IN_PROGRESS"

    body = {"order": {"id": 42, "amount": 99}}
    hit = api.post("webhooks/order_paid", body)
    assert hit.json() == {"matched": 1, "taskIds": [task_at(started, "payment")["taskId"]]}
    view = execution(api, started["id"])
    assert task_at(view, "payment")["status"] == "COMPLETED"
    assert task_at(view, "payment")["outputData"] == body
    assert task_at(view, "ship")["inputData"] == {"amount": 99}
    assert task_at(execution(api, other["id"]), "payment")["status"] == "IN_PROGRESS"


def test_it_ignores_a_webhook_under_another_name(api):
    register(api, "paid", webhook_wait("payment", "order_paid", {"$.order.id": 42}))
    started = start(api, "paid")
    assert api.post("webhooks/order_refunded", {"order": {"id": 42}}).json()["matched"] == 0
    assert api.post("webhooks/order_paid", {"order": {"id": "42"}}).json()["matched"] == 0
    assert api.post("webhooks/order_paid", {"something": "else"}).json()["matched"] == 0
    assert task_at(execution(api, started["id"]), "payment")["status"] == "IN_PROGRESS"


@pytest.mark.parametrize(
    ("criteria", "body", "matched"),
    [
        ({"$.order.id": 42}, {"order": {"id": 42}}, 1),
        ({"$.order.id": 42}, {"order": {"id": 42.0}}, 1),
        ({"$.order.id": 1}, {"order": {"id": True}}, 0),
        ({"$.flag": True}, {"flag": 1}, 0),
        ({"$.order.id": None}, {"order": {}}, 0),
        ({"$.order.id": None}, {"order": {"id": None}}, 1),
        ({"$.lines[1].sku": "b"}, {"lines": [{"sku": "a"}, {"sku": "b"}]}, 1),
        ({"$.lines[5].sku": None}, {"lines": []}, 0),
        ({"$.order": {"id": 1}}, {"order": {"id": 1}}, 1),
        ({"$.order.id": 42, "$.kind": "paid"}, {"order": {"id": 42}, "kind": "refund"}, 0),
    ],
)
def test_it_matches_paths_and_values_exactly(api, criteria, body, matched):
    register(api, "paid", webhook_wait("payment", "hook", criteria))
    start(api, "paid")
    assert api.post("webhooks/hook", body).json()["matched"] == matched


def test_it_completes_a_webhook_wait_only_once(api):
    register(api, "paid", webhook_wait("payment", "order_paid", {"$.order.id": 42}), simple("ship"))
    start(api, "paid")
    assert api.post("webhooks/order_paid", {"order": {"id": 42}}).json()["matched"] == 1
    assert api.post("webhooks/order_paid", {"order": {"id": 42}}).json()["matched"] == 0


def test_it_matches_every_waiting_task_with_empty_criteria(api):
    register(api, "paid", webhook_wait("payment", "ping", {}))
    first, second = start(api, "paid"), start(api, "paid")
    assert api.post("webhooks/ping", {"any": 1}).json()["matched"] == 2
    assert execution(api, first["id"])["status"] == execution(api, second["id"])["status"] == "COMPLETED"


def test_it_refuses_a_webhook_body_that_is_not_an_object(api):
    response = api.post("webhooks/order_paid", [1, 2])
    assert response.status_code == 400
