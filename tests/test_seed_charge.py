"""Seed 000's two example "charge" definitions, posted as the seed's curls
post them, behave as the seed describes — end to end through the API, with
the sweeper run by hand and the clock moved instead of slept through."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from nodeflow import clock
from tests.engine_helpers import (
    TASK_DEFS,
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
    task_at,
    tasks_at,
)
from tests.timeout_helpers import at, parse, seconds_between

RETRY_CURL = {
    "name": "charge",
    "retryCount": 5,
    "retryLogic": "EXPONENTIAL_BACKOFF",
    "retryDelaySeconds": 2,
    "backoffScaleFactor": 2,
    "maxRetryDelaySeconds": 300,
    "jitter": 0.2,
    "retryBudget": 0.3,
    "nonRetryableErrors": ["card_declined", "INVALID_ARGUMENT"],
}
TIMEOUT_CURL = {
    "name": "charge",
    "scheduleToStartTimeout": 120,
    "startToCloseTimeout": 60,
    "timeoutSeconds": 300,
    "heartbeatTimeout": 30,
    "timeoutPolicy": "TIME_OUT_WF",
}


def post_definition(api, body: dict) -> dict:
    response = api.post(TASK_DEFS, body)
    assert response.status_code in (200, 201), response.json()
    return response.json()


def checkout(api, **entry) -> None:
    register(
        api,
        "checkout",
        simple("charge", inputParameters={"amount": "${workflow.input.amount}"}, **entry),
        simple("ship"),
    )


def fail_when_due(api, execution_id: str, reason: str = "503 upstream") -> dict:
    """Wait out the backoff (moving the clock to the retry's availableAt),
    then fail the attempt."""
    waiting = task_at(execution(api, execution_id), "charge")
    assert waiting["status"] == "SCHEDULED", waiting
    clock.advance(max(0.0, seconds_between(at(clock.now()), waiting["availableAt"])))
    return fail(api, poll_one(api, "charge"), reason)


# --- the retry curl --------------------------------------------------------------


@pytest.fixture
def retrying(api, frozen_clock) -> dict:
    posted = post_definition(api, RETRY_CURL)
    assert {key: posted[key] for key in RETRY_CURL} == RETRY_CURL
    checkout(api)
    return start(api, "checkout", {"amount": 42})


def test_it_retries_five_times_with_exponential_backoff_and_jitter(api, retrying):
    for _ in range(6):
        fail_when_due(api, retrying["id"])
    view = execution(api, retrying["id"])
    attempts = tasks_at(view, "charge")
    assert [t["attempt"] for t in attempts] == [1, 2, 3, 4, 5, 6]
    assert len({t["idempotencyKey"] for t in attempts}) == 1
    delays = [seconds_between(a["endedAt"], b["availableAt"]) for a, b in itertools.pairwise(attempts)]
    for delay, base in zip(delays, [2, 4, 8, 16, 32], strict=False):
        assert base * 0.8 <= delay <= base * 1.2, delays
    assert view["status"] == "FAILED"  # the sixth failure leaves no retry
    assert view["failedTaskNames"] == ["charge"]


def test_it_caps_the_backoff_at_300_seconds(api, frozen_clock):
    post_definition(api, RETRY_CURL)
    checkout(api, retryCount=10)  # the workflow entry allows more retries; the cap stays the definition's
    started = start(api, "checkout", {"amount": 42})
    for _ in range(10):
        fail_when_due(api, started["id"])
    attempts = tasks_at(execution(api, started["id"]), "charge")
    delays = [seconds_between(a["endedAt"], b["availableAt"]) for a, b in itertools.pairwise(attempts)]
    assert all(delay <= 300 for delay in delays), delays
    assert all(240 <= delay <= 300 for delay in delays[8:]), delays  # 512 and 1024 capped, ±20 %, capped


@pytest.mark.parametrize(
    "reason",
    ["Stripe error: card_declined (do_not_honor)", "rpc error: code = INVALID_ARGUMENT desc = amount must be positive"],
)
def test_it_does_not_retry_a_non_retryable_error(api, retrying, reason):
    fail(api, poll_one(api, "charge"), reason)
    view = execution(api, retrying["id"])
    assert view["status"] == "FAILED"
    assert [t["attempt"] for t in view["tasks"]] == [1]
    assert reason in view["reasonForIncompletion"]


def test_it_retries_a_transient_error(api, retrying):
    fail(api, poll_one(api, "charge"), "Stripe error: rate_limit")
    view = execution(api, retrying["id"])
    assert view["status"] == "RUNNING"
    assert [t["attempt"] for t in view["tasks"]] == [1, 2]


def test_it_stops_retrying_once_30_percent_of_recent_attempts_are_retries(api, retrying):
    # 20 checkouts in all; 6 fail twice: 32 attempts, 12 of them retries.
    for _ in range(19):
        start(api, "checkout", {"amount": 1})
    first = poll(api, "charge", count=20)
    for leased in first[:6]:
        fail(api, leased, "503")
    clock.advance(3)  # past the first backoff (2 s ± 20 %)
    for leased in poll(api, "charge", count=10):
        fail(api, leased, "503")  # 6 of 26 attempts were retries: retried
    clock.advance(5)  # past the second backoff (4 s ± 20 %)
    third = poll(api, "charge", count=10)
    assert [t["attempt"] for t in third] == [3] * 6
    fail(api, third[0], "503")  # 12 of 32: the budget is spent, though 3 retries remain
    view = execution(api, third[0]["executionId"])
    assert view["status"] == "FAILED"
    assert [t["attempt"] for t in view["tasks"]] == [1, 2, 3]
    assert "retry budget spent" in view["reasonForIncompletion"]
    clock.advance(300)  # a recovered service is not punished for an old burst
    fail(api, third[1], "503")
    assert [t["attempt"] for t in execution(api, third[1]["executionId"])["tasks"]] == [1, 2, 3, 4]


# --- the timeout curl --------------------------------------------------------------


@pytest.fixture
def timing(api, frozen_clock) -> dict:
    posted = post_definition(api, TIMEOUT_CURL)
    assert {key: posted[key] for key in TIMEOUT_CURL} == TIMEOUT_CURL
    assert posted["retryCount"] == 3  # a POST replaces: the retry fields are back to their defaults
    register(api, "on_failure", simple("refund", inputParameters={"reason": "${workflow.input.reason}"}))
    register(api, "checkout", simple("charge"), simple("ship"), failureWorkflow="on_failure")
    return start(api, "checkout")


def assert_timed_out(api, started: dict, cause: str) -> None:
    view = execution(api, started["id"])
    assert view["status"] == "TIMED_OUT"
    assert task_at(view, "charge")["status"] == "TIMED_OUT"
    assert cause in view["reasonForIncompletion"]
    assert "ship" not in {t["referenceTaskName"] for t in view["tasks"]}
    failure = api.get("executions?name=on_failure").json()["results"]
    assert [f["input"]["status"] for f in failure] == ["TIMED_OUT"]


def test_it_times_out_the_workflow_when_no_worker_picks_up_within_120_s(api, timing):
    advance(119)
    assert execution(api, timing["id"])["status"] == "RUNNING"
    advance(1)
    assert_timed_out(api, timing, "scheduleToStartTimeout (120 s)")


def test_it_times_out_the_workflow_when_a_worker_goes_silent_for_30_s(api, timing):
    clock.advance(10)
    poll_one(api, "charge")
    advance(29)
    assert execution(api, timing["id"])["status"] == "RUNNING"
    advance(1)
    assert_timed_out(api, timing, "heartbeatTimeout (30 s)")


def test_it_times_out_the_workflow_when_an_attempt_runs_past_60_s(api, timing):
    leased = poll_one(api, "charge")
    for _ in range(2):
        advance(25)
        assert api.post(f"tasks/{leased['taskId']}/heartbeat", {"leaseToken": leased["leaseToken"]}).status_code == 200
    advance(10)
    assert_timed_out(api, timing, "startToCloseTimeout (60 s)")
    assert report(api, leased).status_code == 409


def test_it_times_out_the_workflow_after_300_s_over_all_attempts(api, timing):
    # A worker that keeps saying "not yet, call me back in 50 s" stays inside
    # every per-attempt limit, but not inside the task's total budget.
    started_at = parse(timing["createdAt"])
    while clock.now() < started_at + dt.timedelta(seconds=300):
        leased = poll(api, "charge")
        if leased:
            assert report(api, leased[0], "IN_PROGRESS", callbackAfterSeconds=50).status_code == 200
        advance(25)
    assert_timed_out(api, timing, "timeoutSeconds (300 s) over all attempts")
    assert task_at(execution(api, timing["id"]), "charge")["endedAt"] == at(started_at, 300)


def test_it_completes_a_charge_inside_every_limit(api, timing):
    clock.advance(100)
    leased = poll_one(api, "charge")
    advance(20)
    api.post(f"tasks/{leased['taskId']}/heartbeat", {"leaseToken": leased["leaseToken"]})
    advance(20)
    complete(api, leased, {"chargeId": "ch_1"})
    complete(api, poll_one(api, "ship"))
    assert execution(api, timing["id"])["status"] == "COMPLETED"


def test_it_still_retries_a_failed_attempt_with_the_default_policy(api, timing):
    fail(api, poll_one(api, "charge"), "503")
    first, second = tasks_at(execution(api, timing["id"]), "charge")
    assert second["attempt"] == 2
    assert 0.8 <= seconds_between(first["endedAt"], second["availableAt"]) <= 1.2
