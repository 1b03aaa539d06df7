"""Cancellation (SPEC §6; seed 004 "Cancellation and parallel failure"):
terminate cancels every open task and every child, is checked before each
scheduling, retry and loop iteration, cannot be swallowed by ``optional``,
and a worker holding a canceled task learns it through 409."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from executions import executor
from executions.models import DecideRequest, Execution, Task
from executions.roles.decider import DeciderRole
from nodeflow.keys import create_api_key
from tests.conftest import Api
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
    sweep,
    task_at,
    task_def,
    tasks_at,
)
from tests.timeout_helpers import act, child_of, loop, sub_workflow

OPEN = ("SCHEDULED", "IN_PROGRESS")


def heartbeat(api, leased: dict):
    return api.post(f"tasks/{leased['taskId']}/heartbeat", {"leaseToken": leased["leaseToken"]})


def open_tasks(execution_id: str) -> list[Task]:
    return list(Task.objects.filter(execution_id=execution_id, status__in=OPEN))


def test_it_cancels_every_open_task_and_fences_their_workers(api, frozen_clock):
    register(
        api,
        "orders",
        {
            "name": "split",
            "taskReferenceName": "split",
            "type": "FORK_JOIN",
            "forkTasks": [
                [simple("running")],
                [simple("queued")],
                [{"name": "approve", "taskReferenceName": "approve", "type": "HUMAN"}],
            ],
        },
    )
    started = start(api, "orders")
    leased = poll_one(api, "running")
    view = act(api, started["id"], "terminate", {"reason": "customer cancelled"})
    assert (view["status"], view["reasonForIncompletion"]) == ("TERMINATED", "customer cancelled")
    assert {path: s for path, s in statuses(view).items() if path != "split"} == {
        "running": "CANCELED",
        "queued": "CANCELED",
        "approve": "CANCELED",
    }
    for response in (
        heartbeat(api, leased),
        report(api, leased),
        report(api, leased, "IN_PROGRESS", callbackAfterSeconds=5),
    ):
        assert response.status_code == 409
        assert response.json()["taskStatus"] == "CANCELED"
    assert poll(api, "queued") == []
    assert open_tasks(started["id"]) == []


def test_it_terminates_children_and_grandchildren(api, frozen_clock):
    register(api, "grandchild", simple("leaf"))
    register(api, "child", sub_workflow("sub", "grandchild"))
    register(api, "parent", sub_workflow("sub", "child"))
    started = start(api, "parent")
    child = child_of(api, started)
    grandchild = execution(api, task_at(child, "sub.sub")["subWorkflowId"])
    leased = poll_one(api, "leaf")
    act(api, started["id"], "terminate", {"reason": "stop"})
    sweep()
    for execution_id in (started["id"], child["id"], grandchild["id"]):
        assert execution(api, execution_id)["status"] == "TERMINATED"
        assert open_tasks(execution_id) == []
    assert heartbeat(api, leased).status_code == 409
    assert report(api, leased).status_code == 409


def test_it_schedules_nothing_for_a_result_that_arrives_after_terminate(api, frozen_clock):
    register(api, "orders", simple("charge"), simple("ship"))
    started = start(api, "orders")
    leased = poll_one(api, "charge")
    act(api, started["id"], "terminate")
    assert report(api, leased).status_code == 409
    sweep()
    view = execution(api, started["id"])
    assert statuses(view) == {"charge": "CANCELED"}
    assert poll(api, "ship") == []


def test_it_schedules_nothing_for_a_decision_queued_before_terminate(api, frozen_clock):
    register(api, "orders", simple("charge"), simple("ship"))
    started = start(api, "orders")
    leased = poll_one(api, "charge")
    # A result written whose decision was deferred to the decider role.
    Task.objects.filter(pk=leased["taskId"]).update(status="COMPLETED")
    executor.request_decision(started["id"])
    act(api, started["id"], "terminate")
    assert DeciderRole().tick() is True
    assert statuses(execution(api, started["id"])) == {"charge": "COMPLETED"}
    assert not DecideRequest.objects.filter(execution_id=started["id"]).exists()


def test_it_cancels_a_retry_waiting_out_its_backoff(api, frozen_clock):
    task_def(api, "charge", retryCount=3, retryLogic="FIXED", retryDelaySeconds=60, jitter=0)
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    fail(api, poll_one(api, "charge"))
    assert [t["status"] for t in execution(api, started["id"])["tasks"]] == ["FAILED", "SCHEDULED"]
    act(api, started["id"], "terminate")
    advance(3600)
    assert [t["status"] for t in execution(api, started["id"])["tasks"]] == ["FAILED", "CANCELED"]
    assert poll(api, "charge") == []


def test_it_starts_no_child_when_a_delayed_sub_workflow_retry_comes_due_after_terminate(api, frozen_clock):
    task_def(api, "leaf", retryCount=0)
    register(api, "child", simple("leaf"))
    register(
        api, "parent", sub_workflow("sub", "child", retryCount=2, retryLogic="FIXED", retryDelaySeconds=60, jitter=0)
    )
    started = start(api, "parent")
    fail(api, poll_one(api, "leaf"))
    sweep()
    assert [t["status"] for t in tasks_at(execution(api, started["id"]), "sub")] == ["FAILED", "SCHEDULED"]
    act(api, started["id"], "terminate")
    advance(60)  # the delayed decision fires
    assert len(api.get("executions?name=child").json()["results"]) == 1
    assert execution(api, started["id"])["status"] == "TERMINATED"


def test_it_starts_no_loop_iteration_after_terminate(api, frozen_clock):
    register(api, "flow", loop("repeat", "true", simple("step")))
    started = start(api, "flow")
    complete(api, poll_one(api, "step"))
    leased = poll_one(api, "step")
    act(api, started["id"], "terminate")
    assert report(api, leased).status_code == 409
    sweep()
    view = execution(api, started["id"])
    assert "repeat[3].step" not in statuses(view)
    assert task_at(view, "repeat[2].step")["status"] == "CANCELED"


def test_it_does_not_redeliver_a_canceled_task_whose_lease_expires(api, frozen_clock):
    task_def(api, "charge", startToCloseTimeout=0, heartbeatTimeout=0)
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    leased = poll_one(api, "charge")
    act(api, started["id"], "terminate")
    advance(3600)
    assert poll(api, "charge") == []
    assert task_at(execution(api, started["id"]), "charge")["status"] == "CANCELED"
    assert report(api, leased).status_code == 409


def test_it_does_not_let_optional_swallow_terminate(api, frozen_clock):
    register(api, "orders", simple("extra", optional=True), simple("after"))
    started = start(api, "orders")
    leased = poll_one(api, "extra")
    act(api, started["id"], "terminate")
    assert report(api, leased, "FAILED", reasonForIncompletion="late").status_code == 409
    sweep()
    view = execution(api, started["id"])
    assert view["status"] == "TERMINATED"
    assert statuses(view) == {"extra": "CANCELED"}


def test_it_neither_retries_nor_absorbs_an_optional_child_that_was_terminated(api, frozen_clock):
    register(api, "child", simple("leaf"))
    register(
        api, "parent", sub_workflow("sub", "child", optional=True, retryCount=3, retryDelaySeconds=0), simple("after")
    )
    started = start(api, "parent")
    act(api, child_of(api, started)["id"], "terminate", {"reason": "by hand"})
    sweep()
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert [t["status"] for t in tasks_at(view, "sub")] == ["CANCELED"]
    assert "after" not in statuses(view)


def test_it_terminates_a_paused_execution(api, frozen_clock):
    register(api, "orders", simple("charge"), simple("ship"))
    started = start(api, "orders")
    act(api, started["id"], "pause")
    view = act(api, started["id"], "terminate")
    assert view["status"] == "TERMINATED"
    assert statuses(view) == {"charge": "CANCELED"}
    act(api, started["id"], "resume", expect=409)
    assert poll(api, "charge") == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_schedules_nothing_after_a_terminate_racing_results(is_postgres):
    if not is_postgres:
        pytest.skip("the race needs PostgreSQL's concurrent transactions")
    api = Api(create_api_key(role="admin", namespace="default")[1])
    task_def(api, "charge", retryCount=5, retryDelaySeconds=0)
    register(api, "orders", simple("charge"), simple("ship"), simple("notify"))
    outcomes = {200: 0, 409: 0}
    for round_number in range(12):
        started = start(api, "orders")
        leased = poll_one(api, "charge")
        go = threading.Barrier(2)
        answers: dict = {}

        def worker() -> None:
            go.wait()
            status = "FAILED" if round_number % 2 else "COMPLETED"
            answers["result"] = report(Api(api.key), leased, status, reasonForIncompletion="x").status_code
            connection.close()

        def operator() -> None:
            go.wait()
            answers["terminate"] = Api(api.key).post(f"executions/{started['id']}/terminate").status_code
            connection.close()

        threads = [threading.Thread(target=worker), threading.Thread(target=operator)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert answers["terminate"] == 200
        outcomes[answers["result"]] += 1
        ended = Execution.objects.get(pk=started["id"])
        assert ended.status == "TERMINATED"
        assert open_tasks(started["id"]) == []
        # Whatever the result caused (the next task, a retry) was canceled with the rest.
        assert not Task.objects.filter(execution_id=started["id"], scheduled_at__gt=ended.ended_at).exists()
        if answers["result"] == 409:
            assert Task.objects.filter(execution_id=started["id"]).count() == 1
        for queue in ("charge", "ship"):
            assert poll(api, queue) == []
    print(f"\nterminate vs result: the result won {outcomes[200]} times, lost {outcomes[409]}")
