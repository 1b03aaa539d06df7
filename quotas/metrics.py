"""Prometheus counters for the controls (served by ``GET /metrics`` with
the others, from the default registry)."""
from __future__ import annotations

from prometheus_client import Counter

LIMIT_REFUSALS = Counter(
    "nodeflow_limit_refusals",
    "Starts refused (429) and polls held back, by the control that refused them.",
    ["control"],
)


def record_refusal(control: str) -> None:
    """Count at once: the refused transaction rolls back, the refusal stands."""
    LIMIT_REFUSALS.labels(control).inc()
