"""The five timeouts (SPEC §3, §6; seed 000 "Timeouts"), end to end through
the API and the sweeper with a moved clock: scheduleToStart, startToClose,
heartbeat, the task's total timeoutSeconds and the workflow's timeoutSeconds;
each timeoutPolicy; waiting tasks get only timeoutSeconds; timers fire
exactly once however many sweepers run, and after a sweeper is killed."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.db import connection, transaction

from executions import timers
from executions.models import Execution, ExecutionStatus, Task, Timer
from nodeflow import clock
from nodeflow.keys import create_api_key
from tests.conftest import Api
from tests.engine_helpers import (
    advance,
    complete,
    execution,
    fail,
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
from tests.procs.stack import Stack, live_database_url
from tests.timeout_helpers import act, at, counting, timers_of

TIMEOUTS = "nodeflow_timeouts_total"


def one_task(api, name: str = "work", *, workflow: dict | None = None, **definition) -> dict:
    task_def(api, name, **definition)
    register(api, f"wf_{name}", simple(name), **(workflow or {}))
    return start(api, f"wf_{name}")


def heartbeat(api, leased: dict):
    return api.post(f"tasks/{leased['taskId']}/heartbeat", {"leaseToken": leased["leaseToken"]})


# --- scheduleToStartTimeout ---------------------------------------------------


def test_it_times_out_each_attempt_no_worker_picks_up_in_time(api, frozen_clock):
    started = one_task(api, scheduleToStartTimeout=120, retryCount=1, retryDelaySeconds=5, jitter=0)
    advance(119)
    assert statuses(execution(api, started["id"])) == {"work": "SCHEDULED"}
    advance(1)
    first, second = tasks_at(execution(api, started["id"]), "work")
    assert (first["status"], first["endedAt"]) == ("TIMED_OUT", at(frozen_clock, 120))
    assert "scheduleToStartTimeout (120 s)" in first["reasonForIncompletion"]
    assert (second["attempt"], second["status"], second["availableAt"]) == (2, "SCHEDULED", at(frozen_clock, 125))
    advance(124)  # the retry's own 120 s count from its availableAt
    assert task_at(execution(api, started["id"]), "work")["status"] == "SCHEDULED"
    advance(1)
    view = execution(api, started["id"])
    assert [t["status"] for t in view["tasks"]] == ["TIMED_OUT", "TIMED_OUT"]
    assert view["status"] == "FAILED"


def test_it_does_not_time_out_a_task_picked_up_in_time(api, frozen_clock):
    started = one_task(api, scheduleToStartTimeout=120)
    clock.advance(119)
    leased = poll_one(api, "work")
    advance(600)
    assert task_at(execution(api, started["id"]), "work")["status"] == "IN_PROGRESS"
    complete(api, leased)
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_does_not_count_a_callback_as_a_missed_pickup(api, frozen_clock):
    started = one_task(api, scheduleToStartTimeout=120)
    leased = poll_one(api, "work")
    response = report(api, leased, "IN_PROGRESS", callbackAfterSeconds=200)
    assert response.status_code == 200
    advance(150)  # the timer armed for the first pickup is due, but the task was picked up
    assert task_at(execution(api, started["id"]), "work")["status"] == "SCHEDULED"
    advance(50)
    complete(api, poll_one(api, "work"))
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_does_not_time_out_a_task_held_by_a_pause(api, frozen_clock):
    started = one_task(api, scheduleToStartTimeout=120, retryCount=0)
    act(api, started["id"], "pause")
    advance(1000)
    assert task_at(execution(api, started["id"]), "work")["status"] == "SCHEDULED"
    act(api, started["id"], "resume")
    advance(119)  # the count starts again from the last check while paused
    assert task_at(execution(api, started["id"]), "work")["status"] == "SCHEDULED"
    advance(120)
    assert execution(api, started["id"])["status"] == "FAILED"


# --- startToCloseTimeout and heartbeatTimeout (the lease) ----------------------


def test_it_times_out_an_attempt_that_runs_past_start_to_close_despite_heartbeats(api, frozen_clock):
    started = one_task(api, startToCloseTimeout=60, heartbeatTimeout=30, retryCount=0)
    leased = poll_one(api, "work")
    for _ in range(2):
        advance(25)
        assert heartbeat(api, leased).status_code == 200
    advance(9)
    assert task_at(execution(api, started["id"]), "work")["status"] == "IN_PROGRESS"
    advance(1)
    view = execution(api, started["id"])
    assert task_at(view, "work")["status"] == "TIMED_OUT"
    assert "startToCloseTimeout (60 s)" in task_at(view, "work")["reasonForIncompletion"]
    assert heartbeat(api, leased).status_code == 409
    assert report(api, leased).status_code == 409


def test_it_times_out_a_silent_worker_after_heartbeat_timeout(api, frozen_clock):
    started = one_task(api, startToCloseTimeout=600, heartbeatTimeout=30, retryCount=1, retryDelaySeconds=0)
    leased = poll_one(api, "work")
    advance(20)
    heartbeat(api, leased)
    advance(29)
    assert task_at(execution(api, started["id"]), "work")["status"] == "IN_PROGRESS"
    advance(1)
    first, second = tasks_at(execution(api, started["id"]), "work")
    assert first["status"] == "TIMED_OUT" and "heartbeatTimeout (30 s)" in first["reasonForIncompletion"]
    assert (second["attempt"], second["status"]) == (2, "SCHEDULED")
    assert heartbeat(api, leased).status_code == 409


def test_it_times_out_the_workflow_with_time_out_wf(api, frozen_clock):
    started = one_task(api, heartbeatTimeout=30, timeoutPolicy="TIME_OUT_WF", retryCount=3)
    poll_one(api, "work")
    advance(30)
    view = execution(api, started["id"])
    assert view["status"] == "TIMED_OUT"
    assert [t["status"] for t in view["tasks"]] == ["TIMED_OUT"]  # TIME_OUT_WF is not retried
    assert "heartbeatTimeout" in view["reasonForIncompletion"]


def test_it_does_not_let_optional_absorb_a_time_out_wf(api, frozen_clock):
    task_def(api, "extra", heartbeatTimeout=30, timeoutPolicy="TIME_OUT_WF")
    register(api, "wf", simple("extra", optional=True), simple("after"))
    started = start(api, "wf")
    poll_one(api, "extra")
    advance(30)
    view = execution(api, started["id"])
    assert view["status"] == "TIMED_OUT"
    assert "after" not in statuses(view)


def test_it_redelivers_instead_of_timing_out_when_neither_is_set(api, frozen_clock):
    started = one_task(api, startToCloseTimeout=0, heartbeatTimeout=0)
    first = poll_one(api, "work")
    advance(301)
    view = execution(api, started["id"])
    assert [(t["attempt"], t["status"]) for t in view["tasks"]] == [(1, "SCHEDULED")]
    assert poll_one(api, "work")["taskId"] == first["taskId"]


# --- the task's total timeoutSeconds --------------------------------------------


@pytest.mark.parametrize(("policy", "status"), [("RETRY", "FAILED"), ("TIME_OUT_WF", "TIMED_OUT")])
def test_it_bounds_every_attempt_and_retry_delay_by_timeout_seconds(api, frozen_clock, policy, status):
    started = one_task(
        api, timeoutSeconds=100, timeoutPolicy=policy, retryCount=50, retryLogic="FIXED", retryDelaySeconds=30, jitter=0
    )
    for number in range(4):  # attempts fail at 0, 30, 60 and 90; attempt 5 waits until 120
        if number:
            advance(30)
        fail(api, poll_one(api, "work"), "flaky")
    view = execution(api, started["id"])
    assert view["status"] == "RUNNING"
    assert task_at(view, "work")["availableAt"] == at(frozen_clock, 120)
    advance(9)
    assert execution(api, started["id"])["status"] == "RUNNING"
    advance(1)  # t = 100, inside the retry delay
    view = execution(api, started["id"])
    latest = task_at(view, "work")
    assert (latest["attempt"], latest["status"], latest["endedAt"]) == (5, "TIMED_OUT", at(frozen_clock, 100))
    assert "timeoutSeconds (100 s) over all attempts" in latest["reasonForIncompletion"]
    assert view["status"] == status
    assert len(view["tasks"]) == 5  # no retry after the total budget


def test_it_arms_one_total_timer_per_logical_task(api, frozen_clock):
    started = one_task(api, timeoutSeconds=100, retryCount=3, retryDelaySeconds=0)
    fail(api, poll_one(api, "work"))
    fail(api, poll_one(api, "work"))
    assert len(timers_of(started["id"], "TASK_TOTAL")) == 1


# --- timeoutPolicy ALERT_ONLY ---------------------------------------------------


def test_it_only_alerts_on_a_missed_schedule_to_start(api, frozen_clock, django_capture_on_commit_callbacks):
    started = one_task(api, scheduleToStartTimeout=60, timeoutPolicy="ALERT_ONLY")
    with (
        counting(TIMEOUTS, timeout="scheduleToStart", policy="ALERT_ONLY") as alerted,
        django_capture_on_commit_callbacks(execute=True),
    ):
        advance(600)
    assert alerted == [1]
    complete(api, poll_one(api, "work"))
    assert execution(api, started["id"])["status"] == "COMPLETED"


@pytest.mark.parametrize(
    ("definition", "timeout"), [({"startToCloseTimeout": 60}, "startToClose"), ({"heartbeatTimeout": 30}, "heartbeat")]
)
def test_it_only_alerts_on_a_slow_attempt(api, frozen_clock, django_capture_on_commit_callbacks, definition, timeout):
    started = one_task(api, timeoutPolicy="ALERT_ONLY", **definition)
    leased = poll_one(api, "work")
    with (
        counting(TIMEOUTS, timeout=timeout, policy="ALERT_ONLY") as alerted,
        django_capture_on_commit_callbacks(execute=True),
    ):
        advance(61)
    assert alerted == [1]  # once per period, not at every sweep
    assert task_at(execution(api, started["id"]), "work")["status"] == "IN_PROGRESS"
    complete(api, leased)
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_keeps_retrying_past_an_alert_only_total_budget(api, frozen_clock):
    started = one_task(
        api,
        timeoutSeconds=100,
        timeoutPolicy="ALERT_ONLY",
        retryCount=5,
        retryLogic="FIXED",
        retryDelaySeconds=60,
        jitter=0,
    )
    fail(api, poll_one(api, "work"))
    advance(120)
    assert task_at(execution(api, started["id"]), "work")["status"] == "SCHEDULED"
    fail(api, poll_one(api, "work"))  # at 120, past the budget: an alert is no budget
    assert [t["attempt"] for t in execution(api, started["id"])["tasks"]] == [1, 2, 3]


# --- zero arms nothing ----------------------------------------------------------


def test_it_arms_no_timer_for_a_timeout_of_zero(api, frozen_clock):
    started = one_task(api, scheduleToStartTimeout=0, startToCloseTimeout=0, heartbeatTimeout=0, timeoutSeconds=0)
    assert timers_of(started["id"]) == []
    poll_one(api, "work")
    advance(10 * 86400)
    assert [t["status"] for t in execution(api, started["id"])["tasks"]] == ["SCHEDULED"]  # re-offered, not timed out


def test_it_arms_one_timer_per_non_zero_timeout(api, frozen_clock):
    started = one_task(api, scheduleToStartTimeout=120, timeoutSeconds=300, workflow={"timeoutSeconds": 3600})
    assert sorted(t.kind for t in timers_of(started["id"])) == ["SCHEDULE_TO_START", "TASK_TOTAL", "WORKFLOW_TIMEOUT"]


# --- waiting tasks get only timeoutSeconds ----------------------------------------

WAITING = {
    "WAIT": {"duration": "1d"},
    "WAIT_FOR_WEBHOOK": {"matches": {"$.id": 1}},
    "HUMAN": {},
    "PULL_WORKFLOW_MESSAGES": {},
}
TIGHT = {"scheduleToStartTimeout": 1, "startToCloseTimeout": 1, "heartbeatTimeout": 1}


def waiting_task(task_type: str, **policy) -> dict:
    return {
        "name": "waiter",
        "taskReferenceName": "waiter",
        "type": task_type,
        "inputParameters": WAITING[task_type],
        **TIGHT,
        **policy,
    }


@pytest.mark.parametrize("task_type", sorted(WAITING))
def test_it_arms_only_timeout_seconds_on_a_waiting_task(api, frozen_clock, task_type):
    register(api, "waits", waiting_task(task_type, timeoutSeconds=100, timeoutPolicy="TIME_OUT_WF"))
    started = start(api, "waits")
    assert [t.kind for t in timers_of(started["id"]) if t.kind != "WAIT"] == ["TASK_TOTAL"]
    advance(99)
    assert statuses(execution(api, started["id"])) == {"waiter": "IN_PROGRESS"}
    advance(1)
    view = execution(api, started["id"])
    assert task_at(view, "waiter")["status"] == "TIMED_OUT"
    assert view["status"] == "TIMED_OUT"


@pytest.mark.parametrize("task_type", sorted(set(WAITING) - {"WAIT"}))
def test_it_lets_a_waiting_task_without_timeout_seconds_wait_for_ever(api, frozen_clock, task_type):
    register(api, "waits", waiting_task(task_type))
    started = start(api, "waits")
    advance(30 * 86400)
    assert statuses(execution(api, started["id"])) == {"waiter": "IN_PROGRESS"}
    assert Task.objects.filter(execution_id=started["id"], lease_expires_at__isnull=False).count() == 0


def test_it_times_out_a_human_task_and_refuses_the_late_answer(api, api_for, frozen_clock):
    register(api, "approval", waiting_task("HUMAN", timeoutSeconds=3600, retryCount=0))
    started = start(api, "approval")
    advance(3600)
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    late = api_for("developer").post(f"tasks/{task_at(view, 'waiter')['taskId']}/result", {"status": "COMPLETED"})
    assert late.status_code == 409


# --- the workflow's timeoutSeconds ------------------------------------------------


def test_it_times_out_the_workflow_at_its_deadline_and_starts_the_failure_workflow(api, frozen_clock):
    register(api, "on_failure", simple("cleanup", inputParameters={"status": "${workflow.input.status}"}))
    register(api, "slow", simple("first"), simple("second"), timeoutSeconds=600, failureWorkflow="on_failure")
    started = start(api, "slow")
    assert started["deadline"] == at(frozen_clock, 600)
    clock.advance(100)
    complete(api, poll_one(api, "first"))
    leased = poll_one(api, "second")
    advance(499)
    assert execution(api, started["id"])["status"] == "RUNNING"
    advance(1)
    view = execution(api, started["id"])
    assert (view["status"], view["endedAt"]) == ("TIMED_OUT", at(frozen_clock, 600))
    assert "deadline 2026-06-01T12:10:00Z passed" in view["reasonForIncompletion"]
    assert task_at(view, "second")["status"] == "CANCELED"
    assert report(api, leased).status_code == 409
    failure = api.get("executions?name=on_failure").json()["results"]
    assert len(failure) == 1
    assert failure[0]["input"]["executionId"] == started["id"]
    assert failure[0]["input"]["status"] == "TIMED_OUT"


def test_it_arms_the_workflow_timeout_once_on_the_first_evaluation(api, frozen_clock):
    register(api, "slow", simple("a"), simple("b"), simple("c"), timeoutSeconds=600)
    started = start(api, "slow")
    for queue in ("a", "b"):
        clock.advance(100)
        complete(api, poll_one(api, queue))
    act(api, started["id"], "decide")
    view = execution(api, started["id"])
    assert view["deadline"] == at(frozen_clock, 600)
    assert len(timers_of(started["id"], "WORKFLOW_TIMEOUT")) == 1


def test_it_only_alerts_when_the_workflow_policy_is_alert_only(api, frozen_clock, django_capture_on_commit_callbacks):
    register(api, "slow", simple("work"), timeoutSeconds=600, timeoutPolicy="ALERT_ONLY")
    started = start(api, "slow")
    assert started["deadline"] is None  # an alert is not a budget
    with (
        counting(TIMEOUTS, timeout="workflow", policy="ALERT_ONLY") as alerted,
        django_capture_on_commit_callbacks(execute=True),
    ):
        advance(3600)
    assert alerted == [1]
    assert execution(api, started["id"])["status"] == "RUNNING"
    complete(api, poll_one(api, "work"))
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_does_not_alert_for_a_timer_armed_by_an_earlier_run(api, frozen_clock, django_capture_on_commit_callbacks):
    register(api, "slow", simple("work"), timeoutSeconds=600, timeoutPolicy="ALERT_ONLY")
    started = start(api, "slow")
    act(api, started["id"], "terminate")
    clock.advance(100)
    act(api, started["id"], "restart")  # alerts at 700 now
    # The first run's timer, as if a sweeper had held it while restart re-armed.
    Timer.objects.create(
        kind="WORKFLOW_TIMEOUT", execution_id=started["id"], due_at=frozen_clock + dt.timedelta(seconds=600)
    )
    with (
        counting(TIMEOUTS, timeout="workflow", policy="ALERT_ONLY") as alerted,
        django_capture_on_commit_callbacks(execute=True),
    ):
        advance(500)
    assert alerted == [0]
    assert timers_of(started["id"], "WORKFLOW_TIMEOUT") != []
    with (
        counting(TIMEOUTS, timeout="workflow", policy="ALERT_ONLY") as alerted,
        django_capture_on_commit_callbacks(execute=True),
    ):
        advance(100)
    assert alerted == [1]


def test_it_has_no_deadline_without_a_workflow_timeout(api, frozen_clock):
    register(api, "plain", simple("work"))
    started = start(api, "plain")
    assert started["deadline"] is None
    assert timers_of(started["id"], "WORKFLOW_TIMEOUT") == []


def test_it_rearms_the_workflow_timeout_when_a_timed_out_execution_is_retried(api, frozen_clock):
    register(api, "slow", simple("work"), timeoutSeconds=600)
    started = start(api, "slow")
    advance(600)
    assert execution(api, started["id"])["status"] == "TIMED_OUT"
    clock.advance(1000)
    view = act(api, started["id"], "retry")
    assert view["status"] == "RUNNING"
    assert view["deadline"] == at(frozen_clock, 2200)
    assert task_at(view, "work")["status"] == "SCHEDULED"
    advance(599)
    assert execution(api, started["id"])["status"] == "RUNNING"
    advance(1)
    assert execution(api, started["id"])["status"] == "TIMED_OUT"


def test_it_rearms_the_workflow_timeout_on_restart(api, frozen_clock):
    register(api, "slow", simple("work"), timeoutSeconds=600)
    started = start(api, "slow")
    advance(600)
    clock.advance(50)
    view = act(api, started["id"], "restart")
    assert view["deadline"] == at(frozen_clock, 1250)
    advance(599)
    assert execution(api, started["id"])["status"] == "RUNNING"


def test_it_gives_a_manually_retried_task_a_fresh_total_budget(api, frozen_clock):
    started = one_task(api, timeoutSeconds=100, retryCount=0)
    clock.advance(10)
    fail(api, poll_one(api, "work"), "bad", terminal=True)
    clock.advance(40)
    act(api, started["id"], "retry")  # at 50: the new attempt's budget ends at 150
    advance(50)  # the first budget's timer fires at 100 and leaves the new attempt alone
    assert task_at(execution(api, started["id"]), "work")["status"] == "SCHEDULED"
    advance(50)
    latest = task_at(execution(api, started["id"]), "work")
    assert (latest["attempt"], latest["status"]) == (2, "TIMED_OUT")


# --- firing: once, durably ---------------------------------------------------------


def test_it_retries_a_failing_timer_later_instead_of_losing_it(api, frozen_clock, monkeypatch):
    register(api, "slow", simple("work"), timeoutSeconds=60)
    started = start(api, "slow")

    def broken(execution, timer, now):
        raise RuntimeError("handler bug")

    monkeypatch.setitem(timers.HANDLERS, "WORKFLOW_TIMEOUT", broken)
    clock.advance(60)
    assert timers.fire_next_timer() is True
    assert timers.fire_next_timer() is False  # pushed back, not retried hot
    [timer] = timers_of(started["id"], "WORKFLOW_TIMEOUT")
    assert timer.due_at == frozen_clock + dt.timedelta(seconds=60 + timers.FAILED_TIMER_BACKOFF_S)
    monkeypatch.undo()
    advance(timers.FAILED_TIMER_BACKOFF_S)
    assert execution(api, started["id"])["status"] == "TIMED_OUT"


def race_sweepers(count: int) -> None:
    """``count`` threads fire due timers side by side until none is left."""
    go = threading.Barrier(count)
    errors: list = []

    def sweeper() -> None:
        try:
            go.wait()
            while timers.fire_next_timer():
                pass
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweeper) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors


def register_timeout_flow(api) -> None:
    register(api, "on_failure", simple("cleanup"))
    register(
        api,
        "timed",
        {"name": "nap", "taskReferenceName": "nap", "type": "WAIT", "inputParameters": {"duration": 30}},
        simple("after"),
        timeoutSeconds=60,
        failureWorkflow="on_failure",
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_fires_each_timer_once_with_two_sweepers_racing(api, frozen_clock, is_postgres, monkeypatch):
    if not is_postgres:
        pytest.skip("concurrent sweepers need PostgreSQL's row locks")
    register_timeout_flow(api)
    ids = [start(api, "timed")["id"] for _ in range(30)]
    due = set(Timer.objects.filter(execution_id__in=ids).values_list("id", flat=True))
    assert len(due) == 60  # a WAIT and a workflow timeout each
    acted: list = []
    guard = threading.Lock()

    def counted(handler):
        def handle(execution, timer, now):
            handler(execution, timer, now)
            timer_id = timer.id  # the row is deleted (and its pk cleared) before the commit

            def record() -> None:
                with guard:
                    acted.append(timer_id)

            transaction.on_commit(record)

        return handle

    for kind, handler in list(timers.HANDLERS.items()):
        monkeypatch.setitem(timers.HANDLERS, kind, counted(handler))
    clock.advance(31)
    race_sweepers(4)  # the WAITs are due
    clock.advance(30)
    race_sweepers(4)  # the deadlines are due
    assert sorted(map(str, acted)) == sorted(map(str, due))  # every timer acted on, none twice
    assert not Timer.objects.filter(id__in=due).exists()
    assert set(Execution.objects.filter(id__in=ids).values_list("status", flat=True)) == {"TIMED_OUT"}
    assert Execution.objects.filter(name="on_failure").count() == 30
    # Each WAIT completed once and scheduled "after" once; the deadline canceled it.
    assert Task.objects.filter(execution_id__in=ids, ref="after").count() == 30


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_fires_a_killed_sweepers_due_timers_after_a_restart():
    key = create_api_key(role="admin", namespace="default")[1]
    api = Api(key)
    register_timeout_flow(api)
    with clock.travel_to(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)):
        ids = [start(api, "timed")["id"] for _ in range(150)]  # deadlines an hour ago, in real time
    stack = Stack(live_database_url())
    try:
        stack.add_role("sweeper-1", "nodeflow_sweeper")
        stack.add_role("sweeper-2", "nodeflow_sweeper")
        ended = Execution.objects.filter(id__in=ids, status=ExecutionStatus.TIMED_OUT)
        give_up = time.monotonic() + 60
        while not ended.exists() and time.monotonic() < give_up:
            time.sleep(0.02)
        stack.kill("sweeper-1")
        stack.kill("sweeper-2")
        # A COMMIT a sweeper sent just before it died still commits: read
        # once their sessions have ended, or an execution read as running
        # may time out between the two reads below.
        stack.sessions_ended("sweeper-1", "sweeper-2")
        # Killed mid-way: an execution still running has lost none of its
        # timers (a timer goes only with the change it made).
        timed_out = set(ended.values_list("id", flat=True))
        running = set(ids) - {str(pk) for pk in timed_out}
        for kind in ("WAIT", "WORKFLOW_TIMEOUT"):
            pending = Timer.objects.filter(execution_id__in=running, kind=kind).values_list("execution_id", flat=True)
            assert {str(pk) for pk in pending} == running, kind
        print(f"\nkilled two sweepers after {len(timed_out)} of {len(ids)} executions timed out")
        stack.start("sweeper-1")
        give_up = time.monotonic() + 90
        while Timer.objects.filter(execution_id__in=ids).exists() and time.monotonic() < give_up:
            time.sleep(0.2)
        assert not Timer.objects.filter(execution_id__in=ids).exists(), stack.logs()
        assert ended.count() == len(ids)
        assert Execution.objects.filter(name="on_failure").count() == len(ids)
    finally:
        stack.stop()
