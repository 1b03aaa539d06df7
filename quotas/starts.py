"""The controls on starting an execution, checked before its row exists.

In lock order (the same everywhere, so starts never deadlock each other):
the namespace's quota row (quotas), the definition's name
(``maxConcurrentExecutions``), the admission bucket (``rateLimitConfig``).
Each lock is held until the start commits, so a concurrent start counts
this one. Refusals are 429s naming the control; admission never refuses,
it queues.
"""
from __future__ import annotations

import datetime as dt

from executions.models import ACTIVE_EXECUTION, Execution
from nodeflow.errors import LimitExceeded
from quotas import admission, locks, metrics, namespace_quotas


def check_start(*, execution: Execution, workflow: dict, now: dt.datetime) -> bool | None:
    """Refuse the start (QuotaExceeded, LimitExceeded) or place it: True runs
    now, False waits for admission, None has no admission key."""
    try:
        namespace_quotas.check_start(namespace_id=execution.namespace_id, now=now)
        check_max_concurrent_executions(execution=execution, workflow=workflow)
    except LimitExceeded as exc:  # a quota's refusal is counted where it is made
        metrics.record_refusal(exc.fields["control"])
        raise
    return admission.line_up(execution=execution, workflow=workflow)


def check_max_concurrent_executions(*, execution: Execution, workflow: dict) -> None:
    """At most ``maxConcurrentExecutions`` active runs of one definition (any
    version; runs awaiting admission count: they are RUNNING)."""
    limit = int(workflow.get("maxConcurrentExecutions") or 0)
    if not limit:
        return
    locks.lock_name(locks.definition_lock(execution.namespace_id, execution.name))
    current = Execution.objects.filter(
        namespace_id=execution.namespace_id, name=execution.name, status__in=ACTIVE_EXECUTION
    ).count()
    if current >= limit:
        raise LimitExceeded(
            f"workflow '{execution.name}' already has {current} running execution(s); maxConcurrentExecutions is {limit}",
            control="maxConcurrentExecutions", limit=limit, current=current,
        )
