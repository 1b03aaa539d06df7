"""Prometheus counters for the controls, served by ``GET /metrics`` with the
others (``nodeflow.metrics``; multi-process like them, docs/metrics.md)."""

from __future__ import annotations

import logging

from prometheus_client import Counter

log = logging.getLogger(__name__)

LIMIT_REFUSALS = Counter(
    "nodeflow_limit_refusals",
    "Starts and registrations refused (429) and dequeues held back, by the control that refused them.",
    ["namespace", "control"],
)


def record_refusal(control: str, namespace_id: int | None = None) -> None:
    """Count at once, not on commit: the refused transaction rolls back, the
    refusal stands. ``control`` is the name the 429 or ``blockedBy`` gives
    (``concurrentExecLimit``, ``semaphore:<name>``, ``quota:<quota>``, and
    ``runnerCapacity`` when the system-task role has no free thread, the one
    control of no namespace…). The namespace is recorded as ``#<id>``, like
    ``nodeflow.metrics.ns``: a scrape shows its name."""
    try:
        LIMIT_REFUSALS.labels("" if namespace_id is None else f"#{namespace_id}", control).inc()
    except Exception:  # metrics must never fail the work they count
        log.exception("metrics: could not record a refusal")
