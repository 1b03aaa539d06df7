"""One budget (SPEC §6; seed 004 "One budget"): a child inherits its
parent's remaining deadline and can only shorten it; retry delays, waits and
loop iterations all spend it; nothing is scheduled past it, and the
execution ends TIMED_OUT at it."""

from __future__ import annotations

import pytest

from executions import decider, executor
from executions.models import Task, Timer
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
    sweep,
    task_at,
    task_def,
    tasks_at,
)
from tests.timeout_helpers import act, at, child_of, loop, parse, sub_workflow


def nothing_scheduled_after(execution_id: str, instant: str) -> None:
    late = Task.objects.filter(execution_id=execution_id, available_at__gte=parse(instant))
    assert not late.exists(), list(late)


# --- the child's budget ---------------------------------------------------------


def test_it_gives_a_child_the_parents_remaining_deadline(api, frozen_clock):
    register(api, "grandchild", simple("leaf"))
    register(api, "child", sub_workflow("sub", "grandchild"))
    register(api, "parent", simple("first"), sub_workflow("sub", "child"), timeoutSeconds=600)
    started = start(api, "parent")
    clock.advance(100)
    complete(api, poll_one(api, "first"))
    child = child_of(api, started)
    grandchild = execution(api, task_at(child, "sub.sub")["subWorkflowId"])
    # Started at 100, they get what is left (500 s), not a fresh window.
    assert child["deadline"] == grandchild["deadline"] == at(frozen_clock, 600)


@pytest.mark.parametrize(("own", "deadline"), [(60, 160), (500, 600), (10_000, 600)])
def test_it_lets_a_childs_own_timeout_shorten_but_never_extend(api, frozen_clock, own, deadline):
    register(api, "child", simple("leaf"), timeoutSeconds=own)
    register(api, "parent", simple("first"), sub_workflow("sub", "child"), timeoutSeconds=600)
    started = start(api, "parent")
    clock.advance(100)
    complete(api, poll_one(api, "first"))
    assert child_of(api, started)["deadline"] == at(frozen_clock, deadline)


def test_it_times_out_parent_and_child_together_at_the_inherited_deadline(api, frozen_clock):
    register(api, "child", simple("leaf"))
    register(api, "parent", sub_workflow("sub", "child"), timeoutSeconds=600)
    started = start(api, "parent")
    child = child_of(api, started)
    leased = poll_one(api, "leaf")
    advance(599)
    assert execution(api, child["id"])["status"] == "RUNNING"
    advance(1)
    parent, child = execution(api, started["id"]), execution(api, child["id"])
    assert parent["status"] == "TIMED_OUT"
    assert child["status"] in ("TIMED_OUT", "TERMINATED")
    assert task_at(child, "sub.leaf")["status"] == "CANCELED"
    assert report(api, leased).status_code == 409


def test_it_does_not_retry_a_child_past_the_parents_deadline_before_its_timer_fires(api, frozen_clock):
    register(api, "child", simple("leaf"))
    register(api, "parent", sub_workflow("sub", "child", retryCount=3, retryDelaySeconds=0), timeoutSeconds=600)
    started = start(api, "parent")
    # A lagging sweeper: the parent's own timer has not fired when its child's
    # has, and the parent decides first.
    Timer.objects.filter(execution_id=started["id"], kind="WORKFLOW_TIMEOUT").delete()
    advance(600)
    view = execution(api, started["id"])
    assert view["status"] == "TIMED_OUT"
    assert len(tasks_at(view, "sub")) == 1  # no new child
    assert len(api.get("executions?name=child").json()["results"]) == 1


def test_it_gives_no_budget_from_an_alert_only_parent(api, frozen_clock):
    register(api, "child", simple("leaf"))
    register(api, "parent", sub_workflow("sub", "child"), timeoutSeconds=100, timeoutPolicy="ALERT_ONLY")
    started = start(api, "parent")
    assert child_of(api, started)["deadline"] is None
    advance(1000)
    assert execution(api, started["id"])["status"] == "RUNNING"
    assert child_of(api, started)["status"] == "RUNNING"


def test_it_holds_an_alert_only_child_to_the_budget_it_inherited(api, frozen_clock):
    register(api, "child", simple("leaf"), timeoutSeconds=50, timeoutPolicy="ALERT_ONLY")
    register(api, "parent", sub_workflow("sub", "child"), timeoutSeconds=600)
    started = start(api, "parent")
    child = child_of(api, started)
    assert child["deadline"] == at(frozen_clock, 600)
    advance(100)
    assert execution(api, child["id"])["status"] == "RUNNING"  # its own 50 s only alerted
    advance(500)
    assert execution(api, child["id"])["status"] in ("TIMED_OUT", "TERMINATED")
    assert execution(api, started["id"])["status"] == "TIMED_OUT"


# --- retry delays spend it ----------------------------------------------------------


def flaky_flow(api, *, timeout: float = 100, **definition) -> dict:
    task_def(api, "work", **{"retryCount": 5, "retryLogic": "FIXED", "jitter": 0, **definition})
    register(api, "flow", simple("work"), simple("after"), timeoutSeconds=timeout)
    return start(api, "flow")


def test_it_schedules_a_retry_that_starts_before_the_deadline(api, frozen_clock):
    started = flaky_flow(api, retryDelaySeconds=40)
    clock.advance(59)
    fail(api, poll_one(api, "work"))
    assert task_at(execution(api, started["id"]), "work")["availableAt"] == at(frozen_clock, 99)


def test_it_schedules_no_retry_past_the_deadline_and_times_out_at_it(api, frozen_clock):
    started = flaky_flow(api, retryDelaySeconds=40)
    clock.advance(60)
    fail(api, poll_one(api, "work"), "503")
    view = execution(api, started["id"])
    assert view["status"] == "RUNNING"
    assert [(t["attempt"], t["status"]) for t in view["tasks"]] == [(1, "FAILED")]
    reason = task_at(view, "work")["reasonForIncompletion"]
    assert reason.startswith("503; ") and decider.PAST_DEADLINE in reason
    act(api, started["id"], "decide")  # deciding again changes nothing
    assert task_at(execution(api, started["id"]), "work")["reasonForIncompletion"] == reason
    advance(39)
    assert execution(api, started["id"])["status"] == "RUNNING"
    advance(1)
    view = execution(api, started["id"])
    assert (view["status"], view["endedAt"]) == ("TIMED_OUT", at(frozen_clock, 100))
    nothing_scheduled_after(started["id"], view["deadline"])


def test_it_draws_the_delay_from_the_part_of_the_jitter_band_before_the_deadline(api, frozen_clock, monkeypatch):
    monkeypatch.setattr(executor, "draw", lambda: 0.99)  # the top of the band
    started = flaky_flow(api, retryDelaySeconds=40, jitter=0.5)  # 20–60 s
    clock.advance(60)
    fail(api, poll_one(api, "work"))  # 60 + 59.6 passes the deadline; 60 + 20 does not
    assert task_at(execution(api, started["id"]), "work")["availableAt"] == at(frozen_clock, 80)


def test_it_absorbs_an_optional_task_whose_retry_cannot_fit(api, frozen_clock):
    task_def(api, "extra", retryCount=5, retryLogic="FIXED", retryDelaySeconds=300, jitter=0)
    register(api, "flow", simple("extra", optional=True), simple("after"), timeoutSeconds=100)
    started = start(api, "flow")
    fail(api, poll_one(api, "extra"), "analytics down")
    view = execution(api, started["id"])
    assert statuses(view) == {"extra": "COMPLETED_WITH_ERRORS", "after": "SCHEDULED"}
    complete(api, poll_one(api, "after"))
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_schedules_no_retry_of_a_child_past_the_inherited_deadline(api, frozen_clock):
    task_def(api, "leaf", retryCount=5, retryLogic="FIXED", retryDelaySeconds=300, jitter=0)
    register(api, "child", simple("leaf"))
    register(api, "parent", sub_workflow("sub", "child"), timeoutSeconds=600)
    started = start(api, "parent")
    child = child_of(api, started)
    clock.advance(400)
    fail(api, poll_one(api, "leaf"))
    assert [t["status"] for t in execution(api, child["id"])["tasks"]] == ["FAILED"]
    advance(200)
    assert execution(api, started["id"])["status"] == "TIMED_OUT"
    nothing_scheduled_after(child["id"], child["deadline"])


def test_it_refuses_a_retry_when_the_failure_arrives_after_the_deadline(api, frozen_clock):
    started = flaky_flow(api, retryDelaySeconds=0)
    leased = poll_one(api, "work")
    clock.advance(150)  # the sweeper has not run: the deadline timer is due but unfired
    fail(api, leased, "late failure")
    view = execution(api, started["id"])
    assert view["status"] == "TIMED_OUT"
    assert [t["attempt"] for t in view["tasks"]] == [1]
    assert poll(api, "work") == []


# --- waits and loop iterations spend it --------------------------------------------------


def test_it_times_out_a_wait_longer_than_the_budget(api, frozen_clock):
    register(
        api,
        "flow",
        {"name": "nap", "taskReferenceName": "nap", "type": "WAIT", "inputParameters": {"duration": "1h"}},
        simple("after"),
        timeoutSeconds=600,
    )
    started = start(api, "flow")
    advance(600)
    view = execution(api, started["id"])
    assert view["status"] == "TIMED_OUT"
    assert statuses(view) == {"nap": "CANCELED"}


def test_it_starts_no_loop_iteration_after_the_deadline(api, frozen_clock):
    register(api, "flow", loop("repeat", "true", simple("step")), timeoutSeconds=100)
    started = start(api, "flow")
    clock.advance(50)
    complete(api, poll_one(api, "step"))
    assert task_at(execution(api, started["id"]), "repeat[2].step")["status"] == "SCHEDULED"
    leased = poll_one(api, "step")
    clock.advance(60)  # past the deadline; the sweeper has not run
    complete(api, leased)
    view = execution(api, started["id"])
    assert view["status"] == "TIMED_OUT"
    assert "repeat[3].step" not in statuses(view)
    assert poll(api, "step") == []
    sweep()
    assert execution(api, started["id"])["status"] == "TIMED_OUT"


def test_it_runs_loop_iterations_while_the_budget_lasts(api, frozen_clock):
    register(api, "flow", loop("repeat", "$.iteration < 3", simple("step")), timeoutSeconds=100)
    started = start(api, "flow")
    for _ in range(3):
        clock.advance(30)
        complete(api, poll_one(api, "step"))
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_spends_the_budget_while_paused(api, frozen_clock):
    register(api, "flow", simple("work"), timeoutSeconds=100)
    started = start(api, "flow")
    act(api, started["id"], "pause")
    advance(100)
    view = execution(api, started["id"])
    assert view["status"] == "TIMED_OUT"
    assert statuses(view) == {"work": "CANCELED"}


def test_it_times_out_on_resume_after_the_deadline(api, frozen_clock):
    register(api, "flow", simple("work"), simple("after"), timeoutSeconds=100)
    started = start(api, "flow")
    leased = poll_one(api, "work")
    act(api, started["id"], "pause")
    complete(api, leased)  # kept while paused
    Timer.objects.filter(execution_id=started["id"], kind="WORKFLOW_TIMEOUT").delete()  # a sweeper running late
    clock.advance(150)
    view = act(api, started["id"], "resume")
    assert view["status"] == "TIMED_OUT"
    assert "after" not in statuses(view)


# --- a re-run gets a budget afresh ---------------------------------------------------------


def test_it_gives_a_retried_child_its_active_parents_deadline(api, frozen_clock):
    task_def(api, "leaf", retryCount=0)
    register(api, "child", simple("leaf"))
    register(api, "parent", sub_workflow("sub", "child"), timeoutSeconds=600)
    started = start(api, "parent")
    child = child_of(api, started)
    act(api, started["id"], "pause")  # the parent waits; its child fails and is retried by hand
    fail(api, poll_one(api, "leaf"))
    clock.advance(100)
    view = act(api, child["id"], "retry")
    assert view["deadline"] == at(frozen_clock, 600)
