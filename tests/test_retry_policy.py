"""The retry policy as pure functions (SPEC §3, seed 000 "Retries"): the
delay formula in tables, its bounds as properties, and what is retried."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executions.retry import (
    BUDGET_MIN_EXECUTIONS,
    BUDGET_WINDOW_S,
    DEFAULT_POLICY,
    base_delay,
    budget_allows,
    retry_delay,
    shortest_delay,
    should_retry,
)


def policy(**fields) -> dict:
    return {**DEFAULT_POLICY, **fields}


# The seed's example definition.
CHARGE = policy(
    retryCount=5,
    retryLogic="EXPONENTIAL_BACKOFF",
    retryDelaySeconds=2,
    backoffScaleFactor=2,
    maxRetryDelaySeconds=300,
    jitter=0.2,
    retryBudget=0.3,
    nonRetryableErrors=["card_declined", "INVALID_ARGUMENT"],
)


# --- the formula, without jitter ----------------------------------------------


@pytest.mark.parametrize(
    ("fields", "delays"),
    [
        # FIXED: retryDelaySeconds every time.
        ({"retryLogic": "FIXED", "retryDelaySeconds": 5}, [5, 5, 5, 5]),
        # LINEAR_BACKOFF: retryDelaySeconds × backoffScaleFactor × attempt.
        ({"retryLogic": "LINEAR_BACKOFF", "retryDelaySeconds": 2, "backoffScaleFactor": 3}, [6, 12, 18, 24]),
        ({"retryLogic": "LINEAR_BACKOFF", "retryDelaySeconds": 1, "backoffScaleFactor": 1}, [1, 2, 3, 4]),
        # EXPONENTIAL_BACKOFF: retryDelaySeconds × backoffScaleFactor ^ (attempt − 1); attempt 1 is the base.
        ({"retryLogic": "EXPONENTIAL_BACKOFF", "retryDelaySeconds": 1, "backoffScaleFactor": 2}, [1, 2, 4, 8]),
        ({"retryLogic": "EXPONENTIAL_BACKOFF", "retryDelaySeconds": 3, "backoffScaleFactor": 10}, [3, 30, 300, 3000]),
        # Fractions are allowed.
        (
            {"retryLogic": "EXPONENTIAL_BACKOFF", "retryDelaySeconds": 0.5, "backoffScaleFactor": 1.5},
            [0.5, 0.75, 1.125, 1.6875],
        ),
        # A zero delay stays zero whatever the logic.
        ({"retryLogic": "EXPONENTIAL_BACKOFF", "retryDelaySeconds": 0, "backoffScaleFactor": 100}, [0, 0, 0, 0]),
    ],
)
def test_it_computes_each_retry_logic(fields, delays):
    table = policy(jitter=0, **fields)
    assert [retry_delay(table, attempt, 0.5) for attempt in range(1, len(delays) + 1)] == pytest.approx(delays)


def test_it_follows_the_seeds_defaults_up_to_the_cap():
    # retryDelaySeconds 1, factor 2, cap 3600: 1, 2, 4, … 2048, then 3600 (4096 capped).
    defaults = policy(jitter=0)
    assert [retry_delay(defaults, attempt, 0.5) for attempt in range(1, 14)] == [
        1,
        2,
        4,
        8,
        16,
        32,
        64,
        128,
        256,
        512,
        1024,
        2048,
        3600,
    ]


def test_it_caps_the_charge_backoff_at_300():
    assert [retry_delay({**CHARGE, "jitter": 0}, a, 0.5) for a in range(1, 11)] == [
        2,
        4,
        8,
        16,
        32,
        64,
        128,
        256,
        300,
        300,
    ]


@pytest.mark.parametrize(
    ("logic", "attempt"), [("EXPONENTIAL_BACKOFF", 100), ("EXPONENTIAL_BACKOFF", 5000), ("LINEAR_BACKOFF", 100)]
)
def test_it_never_overflows_on_huge_attempts(logic, attempt):
    huge = policy(retryLogic=logic, retryDelaySeconds=1e6, backoffScaleFactor=100, maxRetryDelaySeconds=60, jitter=0)
    assert retry_delay(huge, attempt, 0.5) == 60


# --- jitter and the two caps ----------------------------------------------------


@pytest.mark.parametrize(
    ("rand", "expected"),
    [
        (0.0, 8.0),  # the bottom of the band: 10 − 10·0.2
        (0.25, 9.0),
        (0.5, 10.0),  # the middle: no jitter
        (0.75, 11.0),
        (0.999999, 11.99999),  # the top: 10 + 10·0.2
    ],
)
def test_it_spreads_the_delay_across_plus_or_minus_delay_times_jitter(rand, expected):
    assert retry_delay(policy(retryLogic="FIXED", retryDelaySeconds=10, jitter=0.2), 1, rand) == pytest.approx(expected)


def test_it_caps_before_jitter_so_jitter_spreads_around_the_cap():
    # 2·2^9 = 1024 is capped to 300 first; the band is then 240–360, capped again to 300.
    capped = {**CHARGE, "jitter": 0.2}
    assert retry_delay(capped, 10, 0.0) == pytest.approx(240)
    assert retry_delay(capped, 10, 0.25) == pytest.approx(270)


def test_it_caps_after_jitter_so_upward_jitter_never_crosses_the_cap():
    capped = {**CHARGE, "jitter": 0.2}
    assert retry_delay(capped, 10, 0.999) == 300
    assert retry_delay(capped, 9, 0.999) == 300  # 256 + up to 51.2 would be 307


def test_it_lets_retry_after_lengthen_the_delay_but_not_past_the_cap():
    fixed = policy(retryLogic="FIXED", retryDelaySeconds=1, jitter=0, maxRetryDelaySeconds=30)
    assert retry_delay(fixed, 1, 0.5, at_least=20) == 20
    assert retry_delay(fixed, 1, 0.5, at_least=90) == 30
    assert retry_delay(fixed, 1, 0.5, at_least=0.2) == 1


def test_it_gives_zero_when_the_cap_is_zero():
    assert retry_delay(policy(maxRetryDelaySeconds=0), 3, 0.9) == 0


def test_it_names_the_bottom_of_the_band_as_the_shortest_delay():
    fixed = policy(retryLogic="FIXED", retryDelaySeconds=10, jitter=0.2)
    assert shortest_delay(fixed, 1) == pytest.approx(8)
    assert shortest_delay(fixed, 1, at_least=9) == 9


# --- properties -------------------------------------------------------------------

policies = st.fixed_dictionaries(
    {
        "retryLogic": st.sampled_from(["FIXED", "LINEAR_BACKOFF", "EXPONENTIAL_BACKOFF"]),
        "retryDelaySeconds": st.floats(0, 31_536_000),
        "backoffScaleFactor": st.floats(1, 100),
        "maxRetryDelaySeconds": st.floats(0, 31_536_000),
        "jitter": st.floats(0, 1),
    }
).map(lambda fields: policy(**fields))
attempts = st.integers(1, 101)
draws = st.floats(0, 1, exclude_max=True)


@settings(max_examples=500)
@given(policies, attempts, draws, st.floats(0, 100_000))
def test_it_never_goes_above_the_cap_or_below_zero(table, attempt, rand, at_least):
    delay = retry_delay(table, attempt, rand, at_least=at_least)
    assert math.isfinite(delay)
    assert 0 <= delay <= table["maxRetryDelaySeconds"]


@settings(max_examples=500)
@given(policies, attempts, draws)
def test_it_stays_inside_the_jitter_band(table, attempt, rand):
    capped = min(base_delay(table, attempt), table["maxRetryDelaySeconds"])
    spread = capped * table["jitter"]
    delay = retry_delay(table, attempt, rand)
    slack = 1e-9 * max(1.0, capped)
    assert capped - spread - slack <= delay <= min(capped + spread, table["maxRetryDelaySeconds"]) + slack


@settings(max_examples=300)
@given(policies, attempts, draws, draws)
def test_it_grows_with_the_draw_and_never_beats_the_shortest(table, attempt, low, high):
    low, high = sorted((low, high))
    assert retry_delay(table, attempt, low) <= retry_delay(table, attempt, high)
    assert shortest_delay(table, attempt) <= retry_delay(table, attempt, low)


@settings(max_examples=300)
@given(policies, st.integers(1, 100), draws)
def test_it_never_shortens_the_backoff_from_one_attempt_to_the_next_without_jitter(table, attempt, rand):
    steady = {**table, "jitter": 0}
    assert retry_delay(steady, attempt, rand) <= retry_delay(steady, attempt + 1, rand)


@given(policies, attempts)
def test_it_is_exact_without_jitter(table, attempt):
    steady = {**table, "jitter": 0}
    expected = min(base_delay(steady, attempt), steady["maxRetryDelaySeconds"])
    assert retry_delay(steady, attempt, 0.0) == retry_delay(steady, attempt, 0.99) == expected


# --- what is retried ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "reason", "attempt", "fields", "retried", "why"),
    [
        ("FAILED", "boom", 1, {}, True, ""),
        ("FAILED", "boom", 3, {"retryCount": 3}, True, ""),  # attempt 3 of 1 + 3
        ("FAILED", "boom", 4, {"retryCount": 3}, False, "retries exhausted (3)"),
        ("FAILED", "boom", 1, {"retryCount": 0}, False, "retries exhausted (0)"),
        ("FAILED_WITH_TERMINAL_ERROR", "nope", 1, {}, False, "terminal error"),
        ("CANCELED", "canceled", 1, {}, False, "canceled"),
        ("TIMED_OUT", "slow", 1, {"timeoutPolicy": "RETRY"}, True, ""),
        ("TIMED_OUT", "slow", 1, {"timeoutPolicy": "TIME_OUT_WF"}, False, "timed out (timeoutPolicy TIME_OUT_WF)"),
        # nonRetryableErrors are substrings of reasonForIncompletion, case and all.
        (
            "FAILED",
            "Stripe error: card_declined (do_not_honor)",
            1,
            CHARGE,
            False,
            "non-retryable error 'card_declined'",
        ),
        ("FAILED", "rpc error: INVALID_ARGUMENT amount", 1, CHARGE, False, "non-retryable error 'INVALID_ARGUMENT'"),
        ("FAILED", "Stripe error: CARD_DECLINED", 1, CHARGE, True, ""),
        ("FAILED", "rate limited", 1, CHARGE, True, ""),
        ("TIMED_OUT", "card_declined", 1, CHARGE, False, "non-retryable error 'card_declined'"),
        ("FAILED", "anything", 1, {"nonRetryableErrors": [""]}, True, ""),  # an empty needle matches nothing
    ],
)
def test_it_says_what_is_retried(status, reason, attempt, fields, retried, why):
    verdict = should_retry(policy(**fields), status=status, reason=reason, attempt=attempt)
    assert (verdict.retry, verdict.reason) == (retried, why)
    assert not verdict.budget_refused


# --- the retry budget ------------------------------------------------------------------


def test_it_uses_a_300_second_window_and_20_executions():
    assert (BUDGET_WINDOW_S, BUDGET_MIN_EXECUTIONS) == (300.0, 20)


@pytest.mark.parametrize(
    ("budget", "executions", "retries", "allowed"),
    [
        (0.3, 19, 19, True),  # fewer than 20 executions never trips it
        (0.3, 20, 5, True),  # 0.25 < 0.3
        (0.3, 20, 6, False),  # 0.30 ≥ 0.3
        (0.3, 100, 29, True),
        (0.3, 100, 30, False),
        (1.0, 1000, 999, True),  # 1 disables it
        (0.0, 20, 0, False),  # 0: no retries at all once there is traffic
        (0.0, 19, 0, True),
    ],
)
def test_it_applies_the_budget(budget, executions, retries, allowed):
    assert budget_allows(policy(retryBudget=budget), executions, retries) is allowed


def test_it_refuses_a_retry_over_budget_with_a_reason_naming_the_budget():
    verdict = should_retry(CHARGE, status="FAILED", reason="503", attempt=1, budget=(40, 12))
    assert not verdict.retry and verdict.budget_refused
    assert "retry budget" in verdict.reason and "retryBudget 0.3" in verdict.reason
    assert "12 of 40" in verdict.reason and "300 s" in verdict.reason


def test_it_checks_the_budget_only_for_failures_that_would_otherwise_be_retried():
    spent = (100, 100)
    for status, reason, attempt in [
        ("FAILED_WITH_TERMINAL_ERROR", "x", 1),
        ("FAILED", "card_declined", 1),
        ("FAILED", "x", 6),
    ]:
        assert not should_retry(CHARGE, status=status, reason=reason, attempt=attempt, budget=spent).budget_refused


@given(st.floats(0, 1), st.integers(0, 10_000), st.integers(0, 10_000))
def test_it_never_trips_below_20_executions_or_when_disabled(budget, executions, retries):
    retries = min(retries, executions)
    allowed = budget_allows(policy(retryBudget=budget), executions, retries)
    if executions < BUDGET_MIN_EXECUTIONS or budget >= 1:
        assert allowed
    else:
        assert allowed == (retries / executions < budget)
