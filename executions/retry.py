"""The retry policy, as pure functions (SPEC §3, seed 000 "Retries").

``retry_delay`` is the seed's formula; ``should_retry`` says whether a failed
attempt gets another, and if not, why not. Neither reads a clock or a
database: the caller passes the random draw and the budget counters.
"""

from __future__ import annotations

from dataclasses import dataclass

BUDGET_WINDOW_S = 300.0
BUDGET_MIN_EXECUTIONS = 20

DEFAULT_POLICY: dict = {
    "retryCount": 3,
    "retryLogic": "EXPONENTIAL_BACKOFF",
    "retryDelaySeconds": 1.0,
    "backoffScaleFactor": 2.0,
    "maxRetryDelaySeconds": 3600.0,
    "jitter": 0.2,
    "retryBudget": 1.0,
    "nonRetryableErrors": [],
    "scheduleToStartTimeout": 0.0,
    "startToCloseTimeout": 3600.0,
    "heartbeatTimeout": 0.0,
    "timeoutSeconds": 0.0,
    "timeoutPolicy": "RETRY",
}


def base_delay(policy: dict, attempt: int) -> float:
    """The delay before retry ``attempt`` (1-based), before the cap."""
    delay = float(policy["retryDelaySeconds"])
    factor = float(policy["backoffScaleFactor"])
    logic = policy["retryLogic"]
    if delay <= 0:
        return 0.0  # also spares 0 × inf below
    if logic == "LINEAR_BACKOFF":
        return delay * factor * attempt
    if logic == "EXPONENTIAL_BACKOFF":
        # Exponent overflow would raise; past the cap the value no longer matters.
        try:
            return delay * factor ** (attempt - 1)
        except OverflowError:
            return float("inf")
    return delay


def retry_delay(policy: dict, attempt: int, rand: float, *, at_least: float = 0.0) -> float:
    """Seconds to wait before retry ``attempt`` (1-based). ``rand`` is a draw
    from [0, 1) that places the jitter inside ±delay·jitter (0 → the bottom of
    the band, 0.5 → the middle). The cap applies before and after jitter, so
    upward jitter never crosses it. ``at_least`` (a server's Retry-After) can
    lengthen the delay, never past the cap. Monotonic in ``rand``."""
    cap = max(float(policy["maxRetryDelaySeconds"]), 0.0)
    delay = min(base_delay(policy, attempt), cap)
    jitter = float(policy["jitter"])
    if jitter > 0:
        delay += (2.0 * rand - 1.0) * delay * jitter
    delay = max(delay, at_least)
    return min(max(delay, 0.0), cap)


def shortest_delay(policy: dict, attempt: int, *, at_least: float = 0.0) -> float:
    """The bottom of the jitter band: no draw gives a shorter delay."""
    return retry_delay(policy, attempt, 0.0, at_least=at_least)


@dataclass(frozen=True)
class Verdict:
    retry: bool
    reason: str = ""  # why not, when not
    budget_refused: bool = False


def budget_allows(policy: dict, executions: int, retries: int) -> bool:
    """The retry budget: refuse once enough attempts were seen in the window
    and the share of retries among them has reached ``retryBudget``."""
    budget = float(policy["retryBudget"])
    if budget >= 1.0 or executions < BUDGET_MIN_EXECUTIONS:
        return True
    return retries / executions < budget


def should_retry(policy: dict, *, status: str, reason: str, attempt: int, budget: tuple[int, int] = (0, 0)) -> Verdict:
    """Whether the failed ``attempt`` (1-based) of a task is retried."""
    if status == "FAILED_WITH_TERMINAL_ERROR":
        return Verdict(False, "terminal error")
    if status == "CANCELED":
        return Verdict(False, "canceled")
    if status == "TIMED_OUT" and policy["timeoutPolicy"] != "RETRY":
        return Verdict(False, f"timed out (timeoutPolicy {policy['timeoutPolicy']})")
    for needle in policy["nonRetryableErrors"]:
        if needle and needle in reason:
            return Verdict(False, f"non-retryable error '{needle}'")
    if attempt > int(policy["retryCount"]):
        return Verdict(False, f"retries exhausted ({policy['retryCount']})")
    if not budget_allows(policy, *budget):
        executions, retries = budget
        return Verdict(
            False,
            f"retry budget spent: {retries} of {executions} attempts in the last "
            f"{int(BUDGET_WINDOW_S)} s were retries (retryBudget {policy['retryBudget']})",
            budget_refused=True,
        )
    return Verdict(True)
