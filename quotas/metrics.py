"""Prometheus counters for the controls, served by ``GET /metrics`` with the
others (``nodeflow.metrics``; multi-process like them, docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import Counter

LIMIT_REFUSALS = Counter(
    "nodeflow_limit_refusals",
    "Starts and registrations refused (429) and dequeues held back, by the control that refused them.",
    ["control"],
)


def record_refusal(control: str) -> None:
    """Count at once, not on commit: the refused transaction rolls back, the
    refusal stands. ``control`` is the name the 429 or ``blockedBy`` gives
    (``concurrentExecLimit``, ``semaphore:<name>``, ``quota:<quota>``, and
    ``runnerCapacity`` when the system-task role has no free thread…)."""
    LIMIT_REFUSALS.labels(control).inc()
