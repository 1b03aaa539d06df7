"""The worker API (SPEC §7): poll, leases and fencing, heartbeats, lease
expiry and re-delivery, callbacks, batched results, retries; and the
execution view's fields (SPEC §6)."""

from __future__ import annotations

import datetime as dt

import pytest

from nodeflow import clock
from tests.engine_helpers import (
    advance,
    complete,
    execution,
    fail,
    poll,
    poll_one,
    register,
    report,
    simple,
    start,
    statuses,
    task_at,
    task_def,
    tasks_at,
)

EXECUTION_FIELDS = {
    "id",
    "name",
    "version",
    "status",
    "awaitingAdmission",
    "input",
    "output",
    "variables",
    "reasonForIncompletion",
    "correlationId",
    "parentExecutionId",
    "depth",
    "createdAt",
    "startedAt",
    "endedAt",
    "deadline",
    "tasks",
}
TASK_FIELDS = {
    "taskId",
    "executionId",
    "referenceTaskName",
    "path",
    "type",
    "taskDefName",
    "status",
    "attempt",
    "scheduledAt",
    "availableAt",
    "startedAt",
    "endedAt",
    "workerId",
    "inputData",
    "outputData",
    "reasonForIncompletion",
    "idempotencyKey",
    "blockedBy",
}
LEASED_FIELDS = {"taskId", "executionId", "inputData", "attempt", "idempotencyKey", "leaseToken", "leaseExpiresAt"}


def at(instant: dt.datetime, seconds: float = 0) -> str:
    """The API's rendering of ``instant + seconds``."""
    return (instant + dt.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def heartbeat(api, leased: dict, **body):
    return api.post(f"tasks/{leased['taskId']}/heartbeat", {"leaseToken": leased["leaseToken"], **body})


def one_task(api, name: str = "work", **definition) -> dict:
    """Register ``name`` (with a task definition) as a one-task workflow and start it."""
    if definition:
        task_def(api, name, **definition)
    register(api, f"wf_{name}", simple(name, inputParameters={"n": "${workflow.input.n}"}))
    return start(api, f"wf_{name}", {"n": 1})


# --- poll -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"count": 0}, "count"),
        ({"count": 101}, "count"),
        ({"count": "2"}, "count"),
        ({"count": 1.5}, "count"),
        ({"waitSeconds": -1}, "waitSeconds"),
        ({"waitSeconds": 31}, "waitSeconds"),
        ({"waitSeconds": "1"}, "waitSeconds"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_it_refuses_poll_bodies_out_of_range(api, body, field):
    response = api.post("tasks/poll/work", {"workerId": "w1", **body})
    assert response.status_code == 400
    assert field in response.json()["message"]


def test_it_refuses_a_bad_task_type_name(api):
    assert api.post("tasks/poll/bad name!", {"workerId": "w1"}).status_code in (400, 404)


@pytest.mark.parametrize("count", [1, 100])
def test_it_accepts_counts_from_1_to_100(api, count):
    assert api.post("tasks/poll/work", {"workerId": "w1", "count": count}).json() == []


def test_it_returns_what_is_ready_for_a_poll_of_10(api):
    register(api, "wf", simple("work", inputParameters={"n": "${workflow.input.n}"}))
    started = [start(api, "wf", {"n": n}) for n in range(3)]
    leased = poll(api, "work", count=10)
    assert len(leased) == 3
    assert {t["executionId"] for t in leased} == {s["id"] for s in started}
    assert all(set(t) >= LEASED_FIELDS for t in leased)
    assert all(t["attempt"] == 1 and t["leaseToken"] for t in leased)
    assert poll(api, "work", count=10) == []


def test_it_answers_a_long_poll_at_once_when_work_is_ready(api):
    one_task(api)
    response = api.post("tasks/poll/work", {"workerId": "w1", "count": 5, "waitSeconds": 30})
    assert response.status_code == 200
    assert len(response.json()) == 1


def test_it_records_the_worker_and_start_on_the_task(api, frozen_clock):
    started = one_task(api)
    leased = poll_one(api, "work", worker="worker-7")
    assert leased["inputData"] == {"n": 1}
    assert leased["idempotencyKey"] == f"{started['id']}:work"
    task = task_at(execution(api, started["id"]), "work")
    assert task["status"] == "IN_PROGRESS"
    assert task["workerId"] == "worker-7"
    assert task["startedAt"] == at(frozen_clock)
    assert task["blockedBy"] is None


def test_it_lets_a_worker_key_poll_and_report(api, api_for):
    one_task(api)
    worker = api_for("worker")
    leased = poll_one(worker, "work")
    assert complete(worker, leased)["status"] == "COMPLETED"


def test_it_leases_only_tasks_of_its_own_namespace(api, api_for):
    one_task(api)
    assert poll(api_for("worker", "other"), "work", count=10) == []


# --- fencing ----------------------------------------------------------------


def test_it_refuses_a_result_with_the_wrong_lease_token_and_changes_nothing(api):
    started = one_task(api)
    leased = poll_one(api, "work")
    before = task_at(execution(api, started["id"]), "work")
    response = report(api, {**leased, "leaseToken": "not-the-token"}, "COMPLETED", {"stolen": True})
    assert response.status_code == 409
    assert response.json()["error"] == "CONFLICT"
    after = task_at(execution(api, started["id"]), "work")
    assert after == before
    assert heartbeat(api, {**leased, "leaseToken": "not-the-token"}).status_code == 409
    complete(api, leased, {"ok": True})
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_refuses_a_second_result_for_a_finished_task(api):
    started = one_task(api)
    leased = poll_one(api, "work")
    complete(api, leased, {"first": True})
    again = report(api, leased, "FAILED")
    assert again.status_code == 409
    assert again.json()["taskStatus"] == "COMPLETED"
    assert heartbeat(api, leased).status_code == 409
    view = execution(api, started["id"])
    assert task_at(view, "work")["outputData"] == {"first": True}
    assert view["status"] == "COMPLETED"


def test_it_answers_404_for_an_unknown_or_malformed_task(api):
    body = {"leaseToken": "x", "status": "COMPLETED"}
    assert api.post("tasks/01a22bcb-f1c0-791e-9b81-4291dca332a1/result", body).status_code == 404
    assert api.post("tasks/nope/result", body).status_code == 404
    assert api.post("tasks/nope/heartbeat", {"leaseToken": "x"}).status_code == 404


def test_it_answers_404_for_another_namespaces_task(api, api_for):
    one_task(api)
    leased = poll_one(api, "work")
    other = api_for("worker", "other")
    assert report(other, leased).status_code == 404
    assert heartbeat(other, leased).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"status": "DONE"}, "status"),
        ({"status": "COMPLETED", "outputData": [1]}, "outputData"),
        ({"status": "CANCELED"}, "status"),
        ({"status": "COMPLETED", "callbackAfterSeconds": -1}, "callbackAfterSeconds"),
    ],
)
def test_it_refuses_malformed_results(api, body, field):
    one_task(api)
    leased = poll_one(api, "work")
    response = api.post(f"tasks/{leased['taskId']}/result", {"leaseToken": leased["leaseToken"], **body})
    assert response.status_code == 400
    assert field in response.json()["message"]


# --- heartbeats and lease expiry --------------------------------------------


def test_it_extends_the_lease_on_heartbeat(api, frozen_clock):
    started = one_task(api, heartbeatTimeout=60, startToCloseTimeout=3600)
    leased = poll_one(api, "work")
    assert leased["leaseExpiresAt"] == at(frozen_clock, 60)
    clock.advance(45)
    response = heartbeat(api, leased, progress={"done": 10})
    assert response.status_code == 200
    assert response.json()["leaseExpiresAt"] == at(frozen_clock, 105)
    task = task_at(execution(api, started["id"]), "work")
    assert task["leaseExpiresAt"] == at(frozen_clock, 105)
    assert task["outputData"] == {"progress": {"done": 10}}
    advance(50)  # past the first expiry, not the extended one
    assert task_at(execution(api, started["id"]), "work")["status"] == "IN_PROGRESS"
    complete(api, leased, {"ok": True})


def test_it_never_extends_the_lease_past_start_to_close(api, frozen_clock):
    one_task(api, heartbeatTimeout=60, startToCloseTimeout=100)
    leased = poll_one(api, "work")
    clock.advance(50)  # in time: the lease ends at 60
    assert heartbeat(api, leased).json()["leaseExpiresAt"] == at(frozen_clock, 100)  # not 110


def test_it_times_out_a_silent_worker_and_retries(api, frozen_clock):
    started = one_task(api, heartbeatTimeout=30, retryCount=1, retryDelaySeconds=5, jitter=0)
    leased = poll_one(api, "work")
    advance(31)
    view = execution(api, started["id"])
    first, second = tasks_at(view, "work")
    assert first["status"] == "TIMED_OUT"
    assert "heartbeatTimeout" in first["reasonForIncompletion"]
    assert (second["attempt"], second["status"]) == (2, "SCHEDULED")
    assert second["availableAt"] == at(frozen_clock, 36)
    assert report(api, leased).status_code == 409
    advance(5)
    assert poll_one(api, "work")["attempt"] == 2


def test_it_times_out_an_attempt_after_start_to_close(api, frozen_clock):
    started = one_task(api, startToCloseTimeout=100, retryCount=0)
    leased = poll_one(api, "work")
    assert leased["leaseExpiresAt"] == at(frozen_clock, 100)
    advance(99)
    assert task_at(execution(api, started["id"]), "work")["status"] == "IN_PROGRESS"
    advance(1)
    view = execution(api, started["id"])
    assert task_at(view, "work")["status"] == "TIMED_OUT"
    assert view["status"] == "FAILED"
    assert report(api, leased).status_code == 409


def test_it_redelivers_the_same_attempt_when_the_default_lease_expires(api, frozen_clock):
    started = one_task(api, startToCloseTimeout=0, heartbeatTimeout=0)
    first = poll_one(api, "work", worker="w1")
    assert first["leaseExpiresAt"] == at(frozen_clock, 300)
    advance(299)
    assert task_at(execution(api, started["id"]), "work")["status"] == "IN_PROGRESS"
    advance(2)
    view = execution(api, started["id"])
    assert len(view["tasks"]) == 1
    assert task_at(view, "work")["status"] == "SCHEDULED"

    second = poll_one(api, "work", worker="w2")
    assert second["taskId"] == first["taskId"]
    assert second["attempt"] == 1
    assert second["idempotencyKey"] == first["idempotencyKey"]
    assert second["leaseToken"] != first["leaseToken"]
    stale = report(api, first)
    assert stale.status_code == 409
    assert heartbeat(api, first).status_code == 409
    complete(api, second, {"by": "w2"})
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert task_at(view, "work")["workerId"] == "w2"


# --- IN_PROGRESS results ----------------------------------------------------


def test_it_puts_a_task_back_for_callback_after_seconds(api, frozen_clock):
    started = one_task(api)
    leased = poll_one(api, "work")
    response = report(api, leased, "IN_PROGRESS", {"step": 1}, callbackAfterSeconds=60)
    assert response.status_code == 200
    task = task_at(execution(api, started["id"]), "work")
    assert task["status"] == "SCHEDULED"
    assert task["availableAt"] == at(frozen_clock, 60)
    assert task["blockedBy"]["control"] == "retryBackoff"
    assert task["blockedBy"]["until"] == task["availableAt"]
    assert task["outputData"] == {"step": 1}
    assert poll(api, "work") == []
    assert report(api, leased).status_code == 409
    clock.advance(60)
    again = poll_one(api, "work")
    assert (again["taskId"], again["attempt"]) == (leased["taskId"], 1)
    complete(api, again, {"step": 2})
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_keeps_the_lease_for_an_in_progress_result_without_callback(api, frozen_clock):
    started = one_task(api, heartbeatTimeout=60)
    leased = poll_one(api, "work")
    clock.advance(30)
    assert report(api, leased, "IN_PROGRESS", {"half": True}).status_code == 200
    task = task_at(execution(api, started["id"]), "work")
    assert task["status"] == "IN_PROGRESS"
    assert task["leaseExpiresAt"] == at(frozen_clock, 90)
    assert task["outputData"] == {"half": True}
    complete(api, leased)


def test_it_does_not_dispatch_a_called_back_task_while_paused(api, frozen_clock):
    started = one_task(api)
    leased = poll_one(api, "work")
    assert api.post(f"executions/{started['id']}/pause").status_code == 200
    assert report(api, leased, "IN_PROGRESS", callbackAfterSeconds=10).status_code == 200
    clock.advance(11)
    assert task_at(execution(api, started["id"]), "work")["blockedBy"]["control"] == "paused"
    assert poll(api, "work") == []
    assert api.post(f"executions/{started['id']}/resume").status_code == 200
    assert poll_one(api, "work")["taskId"] == leased["taskId"]


def test_it_does_not_redeliver_an_expired_lease_while_paused(api, frozen_clock):
    started = one_task(api, startToCloseTimeout=0, heartbeatTimeout=0)
    poll_one(api, "work")
    assert api.post(f"executions/{started['id']}/pause").status_code == 200
    advance(301)
    assert task_at(execution(api, started["id"]), "work")["blockedBy"]["control"] == "paused"
    assert poll(api, "work") == []


# --- batch results ----------------------------------------------------------


def test_it_applies_a_batch_and_answers_each_item_in_order(api):
    register(api, "wf", simple("work"), simple("next"))
    first, second = start(api, "wf"), start(api, "wf")
    leased = {t["executionId"]: t for t in poll(api, "work", count=2)}
    good, stale = leased[first["id"]], leased[second["id"]]
    unknown = "01a22bcb-f1c0-791e-9b81-4291dca332a1"
    response = api.post(
        "tasks/results",
        {
            "results": [
                {
                    "taskId": good["taskId"],
                    "leaseToken": good["leaseToken"],
                    "status": "COMPLETED",
                    "outputData": {"ok": 1},
                },
                {"taskId": stale["taskId"], "leaseToken": "stale", "status": "COMPLETED"},
                {"taskId": unknown, "leaseToken": "x", "status": "COMPLETED"},
            ]
        },
    )
    assert response.status_code == 200
    answers = response.json()["results"]
    assert [(a["taskId"], a["status"]) for a in answers] == [
        (good["taskId"], 200),
        (stale["taskId"], 409),
        (unknown, 404),
    ]
    assert answers[1]["error"] == "CONFLICT"
    assert statuses(execution(api, first["id"])) == {"work": "COMPLETED", "next": "SCHEDULED"}
    assert statuses(execution(api, second["id"])) == {"work": "IN_PROGRESS"}
    complete(api, stale)


def test_it_answers_409_for_the_second_result_of_one_task_in_a_batch(api):
    started = one_task(api)
    leased = poll_one(api, "work")
    item = {"taskId": leased["taskId"], "leaseToken": leased["leaseToken"], "status": "COMPLETED"}
    answers = api.post("tasks/results", {"results": [item, {**item, "status": "FAILED"}]}).json()["results"]
    assert [a["status"] for a in answers] == [200, 409]
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_applies_several_results_of_one_execution_in_a_batch(api):
    register(
        api,
        "wf",
        {
            "name": "split",
            "taskReferenceName": "split",
            "type": "FORK_JOIN",
            "forkTasks": [[simple("work", "work")], [simple("other", "work")]],
        },
        simple("after"),
    )
    started = start(api, "wf")
    leased = poll(api, "work", count=2)
    answers = api.post(
        "tasks/results",
        {"results": [{"taskId": t["taskId"], "leaseToken": t["leaseToken"], "status": "COMPLETED"} for t in leased]},
    ).json()["results"]
    assert [a["status"] for a in answers] == [200, 200]
    assert statuses(execution(api, started["id"]))["after"] == "SCHEDULED"


def test_it_applies_callbacks_and_failures_in_a_batch(api, frozen_clock):
    task_def(api, "work", retryCount=0)
    register(api, "wf", simple("work"))
    first, second = start(api, "wf"), start(api, "wf")
    leased = {t["executionId"]: t for t in poll(api, "work", count=2)}
    a, b = leased[first["id"]], leased[second["id"]]
    answers = api.post(
        "tasks/results",
        {
            "results": [
                {
                    "taskId": a["taskId"],
                    "leaseToken": a["leaseToken"],
                    "status": "IN_PROGRESS",
                    "callbackAfterSeconds": 5,
                },
                {
                    "taskId": b["taskId"],
                    "leaseToken": b["leaseToken"],
                    "status": "FAILED",
                    "reasonForIncompletion": "no",
                },
            ]
        },
    ).json()["results"]
    assert [x["status"] for x in answers] == [200, 200]
    assert task_at(execution(api, first["id"]), "work")["availableAt"] == at(frozen_clock, 5)
    assert execution(api, second["id"])["status"] == "FAILED"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"results": []}, "results"),
        ({"results": [{"taskId": "x", "leaseToken": "t", "status": "COMPLETED"}]}, "taskId"),
        ({"results": [{"taskId": "01a22bcb-f1c0-791e-9b81-4291dca332a1", "status": "COMPLETED"}]}, "leaseToken"),
    ],
)
def test_it_refuses_malformed_batches(api, body, field):
    response = api.post("tasks/results", body)
    assert response.status_code == 400
    assert field in response.json()["message"]


def test_it_refuses_a_batch_of_more_than_100(api):
    item = {"taskId": "01a22bcb-f1c0-791e-9b81-4291dca332a1", "leaseToken": "t", "status": "COMPLETED"}
    response = api.post("tasks/results", {"results": [item] * 101})
    assert response.status_code == 400
    assert "results" in response.json()["message"]


# --- retries ----------------------------------------------------------------


def test_it_retries_a_failed_task_as_attempt_2_after_a_delay(api, frozen_clock):
    started = one_task(api, retryCount=2, retryDelaySeconds=10, jitter=0)
    leased = poll_one(api, "work")
    clock.advance(3)
    fail(api, leased, "flaky")
    view = execution(api, started["id"])
    assert view["status"] == "RUNNING"
    first, second = tasks_at(view, "work")
    assert (first["attempt"], first["status"], first["reasonForIncompletion"]) == (1, "FAILED", "flaky")
    assert (second["attempt"], second["status"]) == (2, "SCHEDULED")
    assert second["availableAt"] > first["endedAt"]
    assert second["availableAt"] == at(frozen_clock, 13)
    assert second["idempotencyKey"] == first["idempotencyKey"]
    assert second["taskId"] != first["taskId"]
    assert second["blockedBy"] == {
        "control": "retryBackoff",
        "limit": None,
        "current": None,
        "since": second["scheduledAt"],
        "until": second["availableAt"],
    }
    assert poll(api, "work") == []
    clock.advance(10)
    retried = poll_one(api, "work")
    assert (retried["taskId"], retried["attempt"]) == (second["taskId"], 2)
    assert retried["idempotencyKey"] == leased["idempotencyKey"]
    complete(api, retried)
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_keeps_the_retry_delay_within_the_jitter(api, frozen_clock):
    started = one_task(api, retryCount=1, retryDelaySeconds=10, jitter=0.2)
    fail(api, poll_one(api, "work"))
    second = tasks_at(execution(api, started["id"]), "work")[1]
    available = dt.datetime.fromisoformat(second["availableAt"].replace("Z", "+00:00"))
    assert frozen_clock + dt.timedelta(seconds=8) <= available <= frozen_clock + dt.timedelta(seconds=12)


def test_it_fails_the_execution_once_retries_are_exhausted(api, frozen_clock):
    started = one_task(api, retryCount=1, retryDelaySeconds=0)
    fail(api, poll_one(api, "work"), "one")
    fail(api, poll_one(api, "work"), "two")
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert [t["status"] for t in view["tasks"]] == ["FAILED", "FAILED"]
    assert "two" in view["reasonForIncompletion"]
    assert poll(api, "work") == []


def test_it_does_not_retry_a_terminal_error(api, frozen_clock):
    started = one_task(api, retryCount=3, retryDelaySeconds=0)
    fail(api, poll_one(api, "work"), "invalid card", terminal=True)
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert [(t["attempt"], t["status"]) for t in view["tasks"]] == [(1, "FAILED_WITH_TERMINAL_ERROR")]
    assert view["failedTaskNames"] == ["work"]
    assert "invalid card" in view["reasonForIncompletion"]


def test_it_does_not_retry_a_non_retryable_error(api, frozen_clock):
    started = one_task(api, retryCount=3, retryDelaySeconds=0, nonRetryableErrors=["INVALID_ACCOUNT"])
    fail(api, poll_one(api, "work"), "bank said INVALID_ACCOUNT 42")
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert len(view["tasks"]) == 1


# --- the execution view -----------------------------------------------------


def test_it_shows_every_execution_and_task_field(api, frozen_clock):
    started = one_task(api)
    view = execution(api, started["id"])
    assert set(view) >= EXECUTION_FIELDS
    assert (view["id"], view["name"], view["version"], view["status"]) == (started["id"], "wf_work", 1, "RUNNING")
    assert view["awaitingAdmission"] is False
    assert (view["input"], view["output"], view["variables"]) == ({"n": 1}, {}, {})
    assert view["reasonForIncompletion"] is None and view["correlationId"] is None
    assert view["parentExecutionId"] is None and view["depth"] == 0
    assert view["createdAt"] == view["startedAt"] == at(frozen_clock)
    assert view["endedAt"] is None and view["deadline"] is None
    task = view["tasks"][0]
    assert set(task) >= TASK_FIELDS
    assert task["executionId"] == started["id"]
    assert (task["referenceTaskName"], task["path"], task["type"], task["taskDefName"]) == (
        "work",
        "work",
        "SIMPLE",
        "work",
    )
    assert (task["status"], task["attempt"]) == ("SCHEDULED", 1)
    assert task["scheduledAt"] == task["availableAt"] == at(frozen_clock)
    assert task["startedAt"] is None and task["endedAt"] is None and task["workerId"] is None
    assert (task["inputData"], task["outputData"]) == ({"n": 1}, {})
    assert task["reasonForIncompletion"] is None
    assert task["idempotencyKey"] == f"{started['id']}:work"
    # Nothing holds it but the want of a worker: no one has polled "work" yet.
    assert task["blockedBy"] == {"control": "noPollers", "limit": None, "current": 0, "since": at(frozen_clock)}

    clock.advance(2)
    leased = poll_one(api, "work", worker="w9")
    clock.advance(3)
    complete(api, leased, {"done": True})
    view = execution(api, started["id"])
    task = view["tasks"][0]
    assert (task["startedAt"], task["endedAt"], task["workerId"]) == (at(frozen_clock, 2), at(frozen_clock, 5), "w9")
    assert view["status"] == "COMPLETED" and view["endedAt"] == at(frozen_clock, 5)
    assert view["output"] == {"done": True}


def test_it_shows_the_deadline_of_a_workflow_with_a_timeout(api, frozen_clock):
    register(api, "slow", simple("work"), timeoutSeconds=600)
    started = start(api, "slow")
    assert started["deadline"] == at(frozen_clock, 600)
    advance(600)
    view = execution(api, started["id"])
    assert view["status"] == "TIMED_OUT"
    assert task_at(view, "work")["status"] == "CANCELED"


@pytest.mark.parametrize(
    "accept, status",
    [
        (None, 200),
        ("*/*", 200),
        ("application/json", 200),
        ("application/json; charset=utf-8", 200),
        ("text/html", 406),
        ("application/yaml", 406),
    ],
)
def test_the_worker_routes_answer_json_to_whoever_accepts_it(api, accept, status):
    register(api, "w", simple("a"))
    start(api, "w")
    headers = {"HTTP_X_API_KEY": api.key}
    if accept is not None:
        headers["HTTP_ACCEPT"] = accept
    response = api.client.post(
        "/v1/ns/default/tasks/poll/a", data='{"workerId": "x"}', content_type="application/json", **headers
    )
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    if status == 200:
        assert [task["referenceTaskName"] for task in response.json()] == ["a"]
    else:
        assert response.json()["error"]


@pytest.mark.parametrize(
    "accept",
    [
        None,
        "",
        "*/*",
        " */* ",
        "application/json",
        "application/json; charset=utf-8",
        "text/html",
        "text/html,application/xhtml+xml,*/*;q=0.8",
        "application/yaml",
        "application/*",
    ],
)
@pytest.mark.parametrize("browsable", [False, True])
def test_every_route_negotiates_as_drf_does_without_parsing_a_plain_accept(rf, accept, browsable):
    # nodeflow.negotiation picks JSON for a plain Accept without DRF's parse
    # of the header: the same renderer and media type DRF's own picks, or
    # the same 406.
    from rest_framework.exceptions import NotAcceptable
    from rest_framework.negotiation import DefaultContentNegotiation
    from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
    from rest_framework.request import Request

    from nodeflow.negotiation import JSONFirstNegotiation

    renderers = [JSONRenderer(), BrowsableAPIRenderer()] if browsable else [JSONRenderer()]
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    request = Request(rf.get("/v1/ns/default/executions", **headers))

    def pick(negotiation):
        try:
            renderer, media_type = negotiation().select_renderer(request, renderers)
        except NotAcceptable:
            return "406"
        return type(renderer).__name__, media_type

    assert pick(JSONFirstNegotiation) == pick(DefaultContentNegotiation)
