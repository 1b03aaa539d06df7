"""Retries through the API (SPEC §3, §6; seed 000 "Retries"): each retry is
a new attempt row whose availableAt carries the delay; what is retried; the
optional task; the retry budget and its metrics."""

from __future__ import annotations

import itertools

import pytest

from nodeflow import clock
from tests.engine_helpers import (
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
from tests.timeout_helpers import at, counting, seconds_between

BUDGET_REFUSALS = "nodeflow_retry_budget_refusals_total"
RETRIES = "nodeflow_task_retries_total"


def one_task(api, name: str = "work", **definition) -> dict:
    task_def(api, name, **definition)
    register(api, f"wf_{name}", simple(name))
    return start(api, f"wf_{name}")


def fail_n_times(api, queue: str, n: int) -> None:
    for number in range(n):
        clock.advance(3600)  # past any backoff
        fail(api, poll_one(api, queue), f"failure {number + 1}")


# --- attempts and delays ------------------------------------------------------


@pytest.mark.parametrize(
    ("logic", "delays"),
    [
        ("FIXED", [10, 10, 10]),
        ("LINEAR_BACKOFF", [30, 60, 90]),  # 10 × 3 × attempt
        ("EXPONENTIAL_BACKOFF", [10, 30, 90]),  # 10 × 3 ^ (attempt − 1)
    ],
)
def test_it_makes_each_retry_a_new_attempt_available_after_its_delay(api, frozen_clock, logic, delays):
    started = one_task(api, retryCount=3, retryLogic=logic, retryDelaySeconds=10, backoffScaleFactor=3, jitter=0)
    for _ in delays:
        leased = poll_one(api, "work")
        clock.advance(7)  # the attempt runs a while: the delay counts from its end
        fail(api, leased)
        latest = task_at(execution(api, started["id"]), "work")
        assert poll(api, "work") == []  # not before availableAt
        clock.advance(seconds_between(at(clock.now()), latest["availableAt"]))
    attempts = tasks_at(execution(api, started["id"]), "work")
    assert [t["attempt"] for t in attempts] == [1, 2, 3, 4]
    assert len({t["taskId"] for t in attempts}) == 4
    assert len({t["idempotencyKey"] for t in attempts}) == 1
    for previous, retry, delay in zip(attempts, attempts[1:], delays, strict=False):
        assert retry["scheduledAt"] == previous["endedAt"]
        assert seconds_between(previous["endedAt"], retry["availableAt"]) == delay
    assert poll_one(api, "work")["attempt"] == 4


def test_it_caps_the_delay_at_max_retry_delay_seconds(api, frozen_clock):
    started = one_task(
        api, retryCount=5, retryDelaySeconds=10, backoffScaleFactor=10, maxRetryDelaySeconds=250, jitter=0.2
    )
    fail_n_times(api, "work", 4)
    attempts = tasks_at(execution(api, started["id"]), "work")
    delays = [seconds_between(a["endedAt"], b["availableAt"]) for a, b in itertools.pairwise(attempts)]
    assert 8 <= delays[0] <= 12 and 80 <= delays[1] <= 120
    assert all(200 <= delay <= 250 for delay in delays[2:]), delays  # 1000 and 10000 capped, jittered, capped


def test_it_lets_a_retry_after_from_the_worker_lengthen_the_delay(api, frozen_clock):
    started = one_task(api, retryCount=1, retryDelaySeconds=1, jitter=0)
    response = report(api, poll_one(api, "work"), "FAILED", {"retryAfterSeconds": 45}, reasonForIncompletion="429")
    assert response.status_code == 200
    assert task_at(execution(api, started["id"]), "work")["availableAt"] == at(frozen_clock, 45)


# --- what is retried ----------------------------------------------------------


def test_it_matches_non_retryable_errors_as_substrings(api, frozen_clock):
    started = one_task(api, retryCount=3, nonRetryableErrors=["card_declined", "INVALID_ARGUMENT"])
    fail(api, poll_one(api, "work"), "Stripe error: card_declined (do_not_honor)")
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert [(t["attempt"], t["status"]) for t in view["tasks"]] == [(1, "FAILED")]
    assert "card_declined" in view["reasonForIncompletion"]


def test_it_retries_an_error_that_matches_no_entry(api, frozen_clock):
    started = one_task(api, retryCount=3, nonRetryableErrors=["card_declined"])
    fail(api, poll_one(api, "work"), "Stripe error: CARD_DECLINED")  # substrings are case-sensitive
    view = execution(api, started["id"])
    assert view["status"] == "RUNNING"
    assert [t["attempt"] for t in view["tasks"]] == [1, 2]


def test_it_never_retries_a_terminal_error_whatever_the_retry_count(api, frozen_clock):
    started = one_task(api, retryCount=100, retryDelaySeconds=0)
    fail(api, poll_one(api, "work"), "this input will never succeed", terminal=True)
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert [(t["attempt"], t["status"]) for t in view["tasks"]] == [(1, "FAILED_WITH_TERMINAL_ERROR")]
    assert poll(api, "work") == []


def test_it_fails_after_exactly_retry_count_retries(api, frozen_clock):
    started = one_task(api, retryCount=2, retryDelaySeconds=0)
    fail_n_times(api, "work", 3)
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert [(t["attempt"], t["status"]) for t in view["tasks"]] == [(1, "FAILED"), (2, "FAILED"), (3, "FAILED")]
    assert view["failedTaskNames"] == ["work"]


def test_it_absorbs_an_optional_task_only_after_its_retries(api, frozen_clock):
    # Seed 000's entry: optional with its own retryCount on the workflow task.
    register(
        api,
        "report",
        {
            "name": "log_to_analytics",
            "taskReferenceName": "analytics",
            "type": "SIMPLE",
            "optional": True,
            "retryCount": 1,
            "retryDelaySeconds": 0,
        },
        simple("after"),
    )
    started = start(api, "report")
    fail(api, poll_one(api, "log_to_analytics"), "analytics down")
    view = execution(api, started["id"])
    assert [(t["attempt"], t["status"]) for t in tasks_at(view, "analytics")] == [(1, "FAILED"), (2, "SCHEDULED")]
    assert "after" not in statuses(view)
    fail(api, poll_one(api, "log_to_analytics"), "still down")
    view = execution(api, started["id"])
    assert [(t["attempt"], t["status"]) for t in tasks_at(view, "analytics")] == [
        (1, "FAILED"),
        (2, "COMPLETED_WITH_ERRORS"),
    ]
    assert task_at(view, "analytics")["reasonForIncompletion"] == "still down"
    complete(api, poll_one(api, "after"))
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_absorbs_an_optional_tasks_terminal_error_at_once(api, frozen_clock):
    task_def(api, "extra", retryCount=5)
    register(api, "report", simple("extra", optional=True), simple("after"))
    started = start(api, "report")
    fail(api, poll_one(api, "extra"), "bad input", terminal=True)
    view = execution(api, started["id"])
    assert statuses(view) == {"extra": "COMPLETED_WITH_ERRORS", "after": "SCHEDULED"}
    assert len(tasks_at(view, "extra")) == 1


# --- the retry budget ---------------------------------------------------------


def start_many(api, name: str, count: int) -> list[str]:
    return [start(api, f"wf_{name}")["id"] for _ in range(count)]


def trip_traffic(api, name: str) -> list[dict]:
    """20 first attempts, 6 failing twice: 32 dispatched attempts of which 12
    are retries (0.375) in the window; returns the 6 leased third attempts."""
    start_many(api, name, 20)
    first = poll(api, name, count=20)
    for leased in first[:6]:
        fail(api, leased, "503")
    second = poll(api, name, count=10)
    assert [t["attempt"] for t in second] == [2] * 6
    for leased in second:
        fail(api, leased, "503")  # 6 of 26 (0.23): retried
    third = poll(api, name, count=10)
    assert [t["attempt"] for t in third] == [3] * 6
    return third


def budget_workflow(api, name: str, budget: float) -> None:
    task_def(api, name, retryCount=5, retryDelaySeconds=0, jitter=0, retryBudget=budget)
    register(api, f"wf_{name}", simple(name))


def test_it_refuses_a_retry_once_the_budget_is_spent(api, frozen_clock, django_capture_on_commit_callbacks):
    budget_workflow(api, "flaky", 0.3)
    third = trip_traffic(api, "flaky")
    with counting(BUDGET_REFUSALS, task_type="flaky") as refused, django_capture_on_commit_callbacks(execute=True):
        fail(api, third[0], "503 again")  # 12 of 32 (0.375 ≥ 0.3): refused, though 3 retries remain
    view = execution(api, third[0]["executionId"])
    assert view["status"] == "FAILED"
    assert [t["attempt"] for t in view["tasks"]] == [1, 2, 3]
    reason = task_at(view, "flaky")["reasonForIncompletion"]
    assert "retry budget spent" in reason and "retryBudget 0.3" in reason and "503 again" in reason
    assert "retry budget" in view["reasonForIncompletion"]
    assert refused == [1]


def test_it_never_refuses_with_a_budget_of_1(api, frozen_clock):
    budget_workflow(api, "flaky", 1)
    third = trip_traffic(api, "flaky")
    fail(api, third[0], "503 again")
    view = execution(api, third[0]["executionId"])
    assert view["status"] == "RUNNING"
    assert [t["attempt"] for t in view["tasks"]] == [1, 2, 3, 4]


def test_it_never_refuses_below_20_executions_in_the_window(api, frozen_clock):
    budget_workflow(api, "flaky", 0.3)
    ids = start_many(api, "flaky", 4)
    for _ in range(3):
        for leased in poll(api, "flaky", count=10):
            fail(api, leased, "503")
    # 16 attempts, 12 of them retries (0.75): still fewer than 20.
    for execution_id in ids:
        view = execution(api, execution_id)
        assert view["status"] == "RUNNING"
        assert [t["attempt"] for t in view["tasks"]] == [1, 2, 3, 4]


def test_it_forgets_attempts_older_than_300_seconds(api, frozen_clock):
    budget_workflow(api, "flaky", 0.3)
    third = trip_traffic(api, "flaky")
    clock.advance(301)  # nothing dispatched in the last 300 s but the attempt about to fail
    fail(api, third[0], "503 again")
    assert [t["attempt"] for t in execution(api, third[0]["executionId"])["tasks"]] == [1, 2, 3, 4]


def test_it_counts_the_window_up_to_300_seconds(api, frozen_clock):
    budget_workflow(api, "flaky", 0.3)
    third = trip_traffic(api, "flaky")
    clock.advance(300)
    fail(api, third[0], "503 again")
    assert execution(api, third[0]["executionId"])["status"] == "FAILED"


def test_it_keeps_a_budget_per_task_definition(api, frozen_clock):
    budget_workflow(api, "flaky", 0.3)
    budget_workflow(api, "other", 0.3)
    trip_traffic(api, "other")  # "other" has spent its budget…
    start_many(api, "flaky", 1)
    fail(api, poll_one(api, "flaky"), "503")  # …which says nothing about "flaky"
    assert [t["attempt"] for t in poll(api, "flaky")] == [2]


def test_it_lets_an_optional_task_absorb_a_refused_retry(api, frozen_clock):
    budget_workflow(api, "flaky", 0.3)
    register(api, "wf_optional", simple("flaky", optional=True), simple("after"))
    trip_traffic(api, "flaky")
    started = start(api, "wf_optional")
    leased = poll_one(api, "flaky")
    fail(api, leased, "503")  # 12 of 33 attempts were retries: refused
    view = execution(api, started["id"])
    assert statuses(view) == {"flaky": "COMPLETED_WITH_ERRORS", "after": "SCHEDULED"}
    assert "retry budget spent" in task_at(view, "flaky")["reasonForIncompletion"]


def test_it_counts_retries_per_task_type(api, frozen_clock, django_capture_on_commit_callbacks):
    task_def(api, "work", retryCount=3, retryDelaySeconds=0)
    register(api, "wf_work", simple("work"))
    start(api, "wf_work")
    with counting(RETRIES, task_type="work") as retried, django_capture_on_commit_callbacks(execute=True):
        fail(api, poll_one(api, "work"))
        fail(api, poll_one(api, "work"))
    assert retried == [2]
    text = api.client.get("/metrics").content.decode()
    assert 'nodeflow_task_retries_total{namespace="default",task_type="work"}' in text
