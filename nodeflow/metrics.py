"""Prometheus metrics: the counters, what records them, and ``GET /metrics``.

Counters move only when the transaction that did the counted thing commits
(``transaction.on_commit``): a decision rolled back and made again is
counted once. Each process counts its own; exposing every process's counts
through one ``/metrics`` (prometheus_client's multi-process mode) is for the
deployment to switch on.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest

if TYPE_CHECKING:
    from executions.state import Decision

TASK_RETRIES = Counter(
    "nodeflow_task_retries", "Retries scheduled (attempts after the first), by task definition.", ["task_type"]
)
RETRY_BUDGET_REFUSALS = Counter(
    "nodeflow_retry_budget_refusals",
    "Failures not retried because the task definition's retry budget was spent.",
    ["task_type"],
)
TIMEOUTS = Counter(
    "nodeflow_timeouts",
    "Timeouts that fired, by class (workflow, scheduleToStart, startToClose, heartbeat, total) and policy.",
    ["timeout", "policy"],
)


def _count(counter: Counter, labels: Iterable[str]) -> None:
    for label in labels:
        counter.labels(label).inc()


def record_decision(decision: Decision) -> None:
    """Count a decision's retries and budget refusals once it commits."""
    retries, refusals = list(decision.retries), list(decision.budget_refusals)
    if retries or refusals:
        transaction.on_commit(lambda: (_count(TASK_RETRIES, retries), _count(RETRY_BUDGET_REFUSALS, refusals)))


def record_timeout(timeout: str, policy: str) -> None:
    """Count a timeout that fired (ALERT_ONLY ones included) once it commits."""
    transaction.on_commit(lambda: TIMEOUTS.labels(timeout, policy).inc())


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: this process's counters in the Prometheus text format."""
    return HttpResponse(generate_latest(), content_type=CONTENT_TYPE_LATEST)
