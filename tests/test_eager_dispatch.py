"""Eager dispatch: a result may ask for the worker's next tasks
(``"next": {"workerId", "count", "taskType"}``), leased in the result's own
transaction through the same gate as a poll. A sequential step is then one
round trip (and one commit) instead of a result and a poll."""

from __future__ import annotations

import pytest

from executions.models import Task
from metadata.models import TaskDefinition
from tests.controls_helpers import fill
from tests.engine_helpers import (
    complete,
    execution,
    fail,
    no_retries,
    poll,
    poll_one,
    register,
    report,
    simple,
    start,
    sweep,
    task_at,
)

pytestmark = pytest.mark.django_db

NEXT = {"workerId": "w1", "count": 1}


def test_a_result_leases_the_next_step_of_its_flow(api):
    register(api, "steps", simple("a", "step"), simple("b", "step"), simple("c", "step"))
    started = start(api, "steps")
    leased = poll_one(api, "step")
    for following in ("b", "c"):
        answer = report(api, leased, output={"done": leased["referenceTaskName"]}, next=NEXT)
        assert answer.status_code == 200, answer.json()
        body = answer.json()
        assert body["status"] == "COMPLETED" and body["taskId"] == leased["taskId"]
        (leased,) = body["next"]
        assert (leased["referenceTaskName"], leased["inputData"]) == (following, {})
        assert leased["leaseToken"] and Task.objects.get(pk=leased["taskId"]).worker_id == "w1"
        assert Task.objects.get(pk=leased["taskId"]).status == "IN_PROGRESS"
    last = report(api, leased, next=NEXT).json()
    assert last["next"] == []
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_without_next_the_answer_is_as_before(api):
    fill(api, "step", 2)
    answer = report(api, poll_one(api, "step")).json()
    assert "next" not in answer


def test_it_leases_from_the_queue_it_names(api):
    fill(api, "other", 1)
    register(api, "one", simple("a", "step"))
    start(api, "one")
    answer = report(api, poll_one(api, "step"), next={**NEXT, "taskType": "other"}).json()
    assert [t["taskType"] for t in answer["next"]] == ["other"]


def test_the_concurrency_cap_holds(api):
    fill(api, "capped", 4, concurrentExecLimit=2)
    first, _ = poll(api, "capped", count=2)
    # One slot frees with this result; a count of 4 still leases only one.
    answer = report(api, first, next={"workerId": "w1", "count": 4}).json()
    assert len(answer["next"]) == 1
    assert poll(api, "capped", count=4) == []


def test_a_semaphore_holds(api):
    api.put("semaphores/pool", {"permits": 1})
    fill(api, "guarded", 3, semaphores=["pool"])
    (first,) = poll(api, "guarded", count=3)
    answer = report(api, first, next={"workerId": "w1", "count": 3}).json()
    assert len(answer["next"]) == 1
    assert api.get("semaphores/pool").json()["held"] == 1


def test_a_rate_limit_holds(api, frozen_clock):
    fill(api, "metered", 3, rateLimitPerFrequency=1, rateLimitFrequencySeconds=60)
    (first,) = poll(api, "metered", count=3)
    answer = report(api, first, next={"workerId": "w1", "count": 3}).json()
    assert answer["next"] == []  # the window's one dispatch is spent
    waiting = list(Task.objects.filter(task_def_name="metered", status="SCHEDULED"))
    assert len(waiting) == 2
    blocked = task_at(execution(api, str(waiting[0].execution_id)), "t")["blockedBy"]
    assert blocked["control"] == "rateLimit"


def test_it_leases_no_task_of_a_paused_run(api):
    register(api, "one", simple("a", "step"))
    paused = start(api, "one")["id"]
    assert api.post(f"executions/{paused}/pause", {}).status_code == 200
    start(api, "one")
    leased = poll_one(api, "step")
    other = start(api, "one")["id"]
    answer = report(api, leased, next={"workerId": "w1", "count": 5}).json()
    assert [t["executionId"] for t in answer["next"]] == [other]
    assert api.post(f"executions/{paused}/resume", {}).status_code == 200
    assert [t["executionId"] for t in poll(api, "step", count=5)] == [paused]


def test_it_leases_no_held_attempt_of_a_retry_that_awaits_admission(api):
    no_retries(api, "step")
    key = "${workflow.input.tenant}"
    register(api, "tenant", simple("a", "step"), rateLimitConfig={"rateLimitKey": key, "concurrentExecLimit": 1})
    register(api, "free", simple("f", "step"))
    failed = start(api, "tenant", {"tenant": "acme"})["id"]
    fail(api, poll_one(api, "step"), terminal=True)
    start(api, "tenant", {"tenant": "acme"})
    holder = poll_one(api, "step")
    assert api.post(f"executions/{failed}/retry", {}).status_code == 200
    assert execution(api, failed)["awaitingAdmission"] is True  # its new attempt is held
    start(api, "free")
    answer = report(api, poll_one(api, "step"), next={"workerId": "w1", "count": 5}).json()
    assert answer["next"] == []
    complete(api, holder)
    sweep()
    assert poll_one(api, "step")["executionId"] == failed


def test_a_stale_result_leases_nothing(api):
    fill(api, "step", 2)
    leased = poll_one(api, "step")
    answer = report(api, {**leased, "leaseToken": "not-the-token"}, next=NEXT)
    assert answer.status_code == 409
    assert Task.objects.filter(task_def_name="step", status="SCHEDULED").count() == 1


def test_a_batch_of_results_leases_the_next_tasks_once(api):
    fill(api, "step", 5)
    leased = poll(api, "step", count=2)
    items = [{"taskId": t["taskId"], "leaseToken": t["leaseToken"], "status": "COMPLETED"} for t in leased]
    answer = api.post("tasks/results", {"results": items, "next": {"workerId": "w1", "count": 3}})
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert [item["status"] for item in body["results"]] == [200, 200]
    assert len(body["next"]) == 3 and all(t["taskType"] == "step" for t in body["next"])


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"next": {"count": 0}}, "next.count"),
        ({"next": {"count": 101}}, "next.count"),
        ({"next": {"taskType": "not a name"}}, "next.taskType"),
        ({"next": {"unknown": 1}}, "next.unknown"),
        ({"next": []}, "next"),
    ],
)
def test_it_refuses_a_bad_next_naming_the_field(api, extra, field):
    fill(api, "step", 2)
    leased = poll_one(api, "step")
    answer = report(api, leased, **extra)
    assert answer.status_code == 400, answer.json()
    assert answer.json()["field"] == field
    assert Task.objects.get(pk=leased["taskId"]).status == "IN_PROGRESS"  # nothing was written


def test_a_human_completion_cannot_lease(api, make_key):
    register(api, "approve", {"name": "ok", "taskReferenceName": "ok", "type": "HUMAN"})
    started = start(api, "approve")
    task_id = task_at(execution(api, started["id"]), "ok")["taskId"]
    answer = api.post(f"tasks/{task_id}/result", {"status": "COMPLETED", "next": NEXT})
    assert answer.status_code == 400 and answer.json()["field"] == "next"


# --- the step a result made, leased as it is inserted (attempts.lease_own) ------


def _unleased(task: Task) -> bool:
    return (task.status, task.deliveries, task.worker_id, task.lease_token, task.started_at) == (
        "SCHEDULED",
        0,
        "",
        None,
        None,
    )


def test_the_step_a_result_made_is_leased_as_it_is_inserted(api):
    """Its row is written once, already leased (PostgreSQL: no lease
    statement follows its insert; tests/test_hot_path.py counts them), with
    what a lease writes."""
    register(api, "pair", simple("a", "step"), simple("b", "step"))
    start(api, "pair")
    (leased,) = report(api, poll_one(api, "step"), next=NEXT).json()["next"]
    row = Task.objects.get(pk=leased["taskId"])
    assert (row.status, row.deliveries, row.worker_id, row.lease_token) == (
        "IN_PROGRESS",
        1,
        "w1",
        leased["leaseToken"],
    )
    assert row.started_at == row.last_heartbeat_at
    assert (row.lease_expires_at - row.started_at).total_seconds() == row.lease_seconds
    assert report(api, leased).status_code == 200


def test_an_older_ready_task_of_the_queue_is_leased_before_the_step_a_result_made(api):
    register(api, "pair", simple("a", "step"), simple("b", "step"))
    start(api, "pair")
    first = poll_one(api, "step")
    (older,) = fill(api, "step", 1)
    (leased,) = report(api, first, next=NEXT).json()["next"]
    assert leased["executionId"] == older
    (made,) = Task.objects.filter(ref="b")
    assert _unleased(made), made.__dict__
    assert poll_one(api, "step")["taskId"] == str(made.id)


def test_a_control_set_by_another_process_holds_on_the_step_a_result_made(api):
    """The cap was set where this process did not see it (its hint says the
    queue has no controls): the look that goes with the step's insert finds
    it, the step is put back as it was and leased through the gate, which
    the cap refuses."""
    register(api, "pair", simple("a", "capped"), simple("b", "capped"))
    start(api, "pair")
    first = poll_one(api, "capped")
    fill(api, "capped", 1)
    in_flight = poll_one(api, "capped")
    TaskDefinition.objects.filter(name="capped").update(concurrent_exec_limit=1)  # no signal: no hint cleared
    answer = report(api, first, next=NEXT).json()
    assert answer["next"] == []
    (made,) = Task.objects.filter(ref="b")
    assert _unleased(made), made.__dict__
    assert poll(api, "capped") == []
    assert report(api, in_flight).status_code == 200
    assert poll_one(api, "capped")["taskId"] == str(made.id)
