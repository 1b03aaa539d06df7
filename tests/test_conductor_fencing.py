"""Conductor's task updates carry no lease token: on the Conductor-compatible
routes the server fences by the leased attempt and the polling worker's id
(conductor_api/updates.py). A stale or foreign update gets 409 and changes
nothing, as a stale lease token does on Node Flow's own routes
(tests/test_lease_fencing.py)."""

from __future__ import annotations

import pytest

from executions.models import Task
from nodeflow import clock
from tests.conftest import Api
from tests.engine_helpers import register, simple, start, sweep, task_def

API = "api"


@pytest.fixture
def admin(api) -> Api:
    return api


@pytest.fixture
def worker(api_for) -> Api:
    return api_for("worker")


def poll(worker: Api, task_type: str, worker_id: str, *, count: int = 1) -> list[dict]:
    response = worker.get(f"{API}/tasks/poll/batch/{task_type}?workerid={worker_id}&count={count}&timeout=0")
    assert response.status_code == 200, response.json()
    return response.json()


def update(worker: Api, task: dict, status: str, *, worker_id: str | None, **fields):
    body = {"taskId": task["taskId"], "workflowInstanceId": task["workflowInstanceId"], "status": status, **fields}
    if worker_id is not None:
        body["workerId"] = worker_id
    return worker.post(f"{API}/tasks", body)


def row(task: dict) -> tuple:
    found = Task.objects.get(pk=task["taskId"])
    return found.status, found.lease_token, found.lease_expires_at, found.output, found.worker_id


@pytest.fixture
def leased(admin, worker) -> dict:
    task_def(admin, "charge", retryCount=0, heartbeatTimeout=30)
    register(admin, "pay", simple("charge"))
    start(admin, "pay")
    [task] = poll(worker, "charge", "w1")
    return task


def test_an_update_from_another_worker_gets_409_and_changes_nothing(worker, leased):
    before = row(leased)
    for status, fields in [
        ("COMPLETED", {"outputData": {"x": 1}}),
        ("FAILED", {"reasonForIncompletion": "no"}),
        ("FAILED_WITH_TERMINAL_ERROR", {}),
        ("IN_PROGRESS", {"callbackAfterSeconds": 5}),
        ("IN_PROGRESS", {"extendLease": True}),
    ]:
        response = update(worker, leased, status, worker_id="w2", **fields)
        assert response.status_code == 409, (status, response.content)
        body = response.json()
        assert body["status"] == 409 and body["error"] == "CONFLICT" and body["message"]
        assert "w1" not in body["message"]  # the holder is not named to a foreign worker
    assert row(leased) == before


def test_a_second_update_of_an_ended_attempt_gets_409_and_changes_nothing(worker, leased):
    assert update(worker, leased, "COMPLETED", worker_id="w1", outputData={"id": 1}).status_code == 200
    before = row(leased)
    for status in ("COMPLETED", "FAILED", "IN_PROGRESS"):
        response = update(worker, leased, status, worker_id="w1", outputData={"id": 2})
        assert response.status_code == 409, response.content
    # A heartbeat with no worker id is fenced by the attempt alone: still 409.
    assert update(worker, leased, "IN_PROGRESS", worker_id=None, extendLease=True).status_code == 409
    assert row(leased) == before


def test_an_update_after_the_lease_expired_gets_409_and_changes_nothing(worker, leased):
    clock.advance(31)  # past the 30 s lease, before any sweep
    before = row(leased)
    response = update(worker, leased, "COMPLETED", worker_id="w1", outputData={"late": True})
    assert response.status_code == 409, response.content
    assert "expired" in response.json()["message"]
    assert row(leased) == before


def test_after_redelivery_the_first_workers_update_is_stale(admin, worker, leased):
    task_def(admin, "charge", retryCount=0, heartbeatTimeout=30, timeoutSeconds=0)
    clock.advance(31)
    sweep()  # the lease expired: the attempt is timed out or offered again
    again = poll(worker, "charge", "w2")
    before = [row(t) for t in again] + [row(leased)]
    response = update(worker, leased, "COMPLETED", worker_id="w1", outputData={"stale": True})
    assert response.status_code == 409, response.content
    assert [row(t) for t in again] + [row(leased)] == before


def test_the_leasing_worker_reports_and_a_heartbeat_without_worker_id_extends(worker, leased):
    lease_before = Task.objects.get(pk=leased["taskId"]).lease_expires_at
    clock.advance(10)
    response = update(worker, leased, "IN_PROGRESS", worker_id=None, extendLease=True)
    assert response.status_code == 200 and response.content.decode() == leased["taskId"]
    assert response["content-type"].startswith("text/plain")
    assert Task.objects.get(pk=leased["taskId"]).lease_expires_at > lease_before
    assert update(worker, leased, "COMPLETED", worker_id="w1", outputData={"id": 7}).status_code == 200
    assert row(leased)[0] == "COMPLETED" and row(leased)[3] == {"id": 7}


def test_a_final_update_must_name_its_worker(worker, leased):
    before = row(leased)
    response = update(worker, leased, "COMPLETED", worker_id=None)
    assert response.status_code == 400
    assert response.json()["field"] == "workerId"
    assert response.json()["validationErrors"] == [{"path": "workerId", "message": response.json()["message"]}]
    assert row(leased) == before


def test_an_update_naming_another_workflow_is_not_found(worker, leased):
    response = update(
        worker, {**leased, "workflowInstanceId": "00000000-0000-0000-0000-000000000001"}, "COMPLETED", worker_id="w1"
    )
    assert response.status_code == 404
