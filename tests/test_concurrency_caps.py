"""concurrentExecLimit (per task definition, at dequeue), maxConcurrentTasks
(per execution, in the decider) and maxConcurrentExecutions (per workflow
definition, at start): SPEC §8."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from executions import dispatch
from nodeflow.keys import find_namespace
from tests.controls_helpers import fill
from tests.engine_helpers import complete, execution, fail, poll, register, simple, start, task_def

# --- concurrentExecLimit ------------------------------------------------------


def test_it_leases_no_more_than_the_cap_however_many_are_asked_for(api):
    fill(api, "charge", 5, concurrentExecLimit=2)
    assert len(poll(api, "charge", count=10)) == 2
    assert poll(api, "charge", count=10, worker="w2") == []


def test_a_finished_task_lets_the_next_lease_flow(api):
    fill(api, "charge", 5, concurrentExecLimit=2)
    first, second = poll(api, "charge", count=10)
    complete(api, first)
    assert len(poll(api, "charge", count=10)) == 1
    fail(api, second)  # a failure frees the slot too (its retry waits in the queue)
    assert len(poll(api, "charge", count=10)) == 1
    assert poll(api, "charge", count=10) == []


def test_the_cap_is_live(api):
    fill(api, "charge", 6, concurrentExecLimit=1)
    assert len(poll(api, "charge", count=10)) == 1
    task_def(api, "charge", concurrentExecLimit=3)
    assert len(poll(api, "charge", count=10)) == 2
    task_def(api, "charge", concurrentExecLimit=0)  # none
    assert len(poll(api, "charge", count=10)) == 3


def test_a_cap_set_on_a_queue_without_one_applies_to_the_next_poll(api):
    fill(api, "charge", 6)
    assert len(poll(api, "charge", count=2)) == 2  # the uncontrolled path
    task_def(api, "charge", concurrentExecLimit=3)
    assert len(poll(api, "charge", count=10)) == 1


def test_the_cap_counts_every_execution_and_version(api):
    fill(api, "charge", 2, concurrentExecLimit=1)
    register(api, "other", simple("c", "charge"))
    start(api, "other")
    assert len(poll(api, "charge", count=10)) == 1
    assert poll(api, "charge", count=10) == []


@pytest.mark.django_db(transaction=True)
def test_a_waiting_long_poll_gets_the_freed_slot_at_once(api):
    fill(api, "charge", 3, concurrentExecLimit=1)
    (held,) = poll(api, "charge", count=10)
    namespace = find_namespace("default")
    got: list = []

    def waiter() -> None:
        try:
            got.extend(dispatch.poll(namespace=namespace, queue="charge", worker_id="w2", count=5, wait_s=10))
        finally:
            connection.close()  # the thread's own connection

    thread = threading.Thread(target=waiter)
    began = time.monotonic()
    thread.start()
    time.sleep(0.2)
    assert not got
    complete(api, held)
    thread.join(timeout=10)
    assert len(got) == 1
    assert time.monotonic() - began < 5


# --- maxConcurrentTasks -------------------------------------------------------


def fan_out(api, cap: int, branches: int = 6) -> dict:
    register(
        api,
        "fan_out",
        {
            "name": "fan",
            "taskReferenceName": "fan",
            "type": "FORK_JOIN",
            "forkTasks": [[simple(f"b{i}", "leaf")] for i in range(branches)],
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
        maxConcurrentTasks=cap,
    )
    return start(api, "fan_out")


def open_leaves(view: dict) -> list[dict]:
    return [t for t in view["tasks"] if t["taskDefName"] == "leaf" and t["status"] in ("SCHEDULED", "IN_PROGRESS")]


def test_max_concurrent_tasks_bounds_the_tasks_of_one_run(api):
    started = fan_out(api, cap=2)
    view = execution(api, started["id"])
    assert len(open_leaves(view)) == 2
    assert view["blockedBy"]["control"] == "maxConcurrentTasks"
    assert (view["blockedBy"]["limit"], view["blockedBy"]["current"]) == (2, 2)
    for _ in range(2):
        for leased in poll(api, "leaf", count=10):
            complete(api, leased)
        assert len(open_leaves(execution(api, started["id"]))) == 2
    leased = poll(api, "leaf", count=10)
    for item in leased:
        complete(api, item)
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED" and view["blockedBy"] is None


def test_operators_and_waiting_tasks_are_exempt_from_max_concurrent_tasks(api):
    register(
        api,
        "waits",
        {
            "name": "fork",
            "taskReferenceName": "fork",
            "type": "FORK_JOIN",
            "forkTasks": [
                [{"name": "h1", "taskReferenceName": "h1", "type": "HUMAN"}],
                [{"name": "h2", "taskReferenceName": "h2", "type": "HUMAN"}],
                [simple("w1", "leaf")],
            ],
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
        maxConcurrentTasks=1,
    )
    view = execution(api, start(api, "waits")["id"])
    types = sorted(t["type"] for t in view["tasks"] if t["status"] in ("SCHEDULED", "IN_PROGRESS"))
    assert types == ["FORK_JOIN", "HUMAN", "HUMAN", "SIMPLE"]


def test_a_run_with_room_under_its_cap_is_not_blocked(api):
    started = fan_out(api, cap=10, branches=3)
    assert execution(api, started["id"])["blockedBy"] is None


# --- maxConcurrentExecutions -------------------------------------------------


def test_max_concurrent_executions_refuses_a_start_before_the_row_exists(api):
    from executions.models import Execution

    register(api, "nightly_reconcile", simple("t", "reconcile"), maxConcurrentExecutions=1)
    first = start(api, "nightly_reconcile")
    response = api.post("executions", {"name": "nightly_reconcile"})
    assert response.status_code == 429
    body = response.json()
    assert body["error"] == "LIMIT_EXCEEDED"
    assert (body["control"], body["limit"], body["current"]) == ("maxConcurrentExecutions", 1, 1)
    assert Execution.objects.filter(name="nightly_reconcile").count() == 1
    complete(api, poll(api, "reconcile")[0])
    assert execution(api, first["id"])["status"] == "COMPLETED"
    start(api, "nightly_reconcile")


def test_an_idempotent_repeat_is_not_refused_by_max_concurrent_executions(api):
    register(api, "nightly", simple("t", "reconcile"), maxConcurrentExecutions=1)
    first = start(api, "nightly", idempotencyKey="run-1")
    again = start(api, "nightly", idempotencyKey="run-1", expect=200)
    assert again["id"] == first["id"]


@pytest.mark.parametrize("status", ["terminate", "pause"])
def test_paused_runs_count_and_ended_ones_do_not(api, status):
    register(api, "nightly", simple("t", "reconcile"), maxConcurrentExecutions=1)
    first = start(api, "nightly")
    assert api.post(f"executions/{first['id']}/{status}", {}).status_code == 200
    expected = 201 if status == "terminate" else 429
    assert api.post("executions", {"name": "nightly"}).status_code == expected


def test_refusals_are_counted_by_control(api):
    from tests.timeout_helpers import metric

    def count(control: str) -> float:
        return metric("nodeflow_limit_refusals_total", control=control)

    register(api, "nightly", simple("t", "reconcile"), maxConcurrentExecutions=1)
    fill(api, "charge", 2, concurrentExecLimit=1)
    before = count("maxConcurrentExecutions"), count("concurrentExecLimit")
    start(api, "nightly")
    api.post("executions", {"name": "nightly"})
    poll(api, "charge", count=5)
    poll(api, "charge", count=5)
    assert (count("maxConcurrentExecutions"), count("concurrentExecLimit")) == (before[0] + 1, before[1] + 1)
    assert (
        'nodeflow_limit_refusals_total{control="maxConcurrentExecutions",namespace="default"}'
        in api.client.get("/metrics").content.decode()
    )
