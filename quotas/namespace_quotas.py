"""Namespace quotas: platform limits an administrator sets per namespace.

Each check runs in the transaction of the insert it guards, after locking
the namespace's quota row, and counts in a statement after that lock: two
concurrent starts queue on the row, and the second counts the first. A
namespace without a quota row takes no lock at all. Absent is unlimited.
"""
from __future__ import annotations

import datetime as dt


from executions import sql
from executions.models import ACTIVE_EXECUTION, Execution
from metadata.models import WorkflowDefinition
from nodeflow import clock
from nodeflow.errors import QuotaExceeded
from nodeflow.models import Namespace
from quotas import metrics, rate_limits
from quotas.models import NamespaceQuota, Schedule

# camelCase name in the API → column.
QUOTAS = {
    "maxConcurrentExecutions": "max_concurrent_executions",
    "maxExecutionsPerMinute": "max_executions_per_minute",
    "maxWorkflowDefinitions": "max_workflow_definitions",
    "maxSchedules": "max_schedules",
}
# Retry-After for quotas that time alone does not free: a hint to look again.
CONCURRENT_RETRY_AFTER_S = 1
COUNT_RETRY_AFTER_S = 60


def get_quotas(*, namespace: Namespace) -> dict[str, int | None]:
    row = NamespaceQuota.objects.filter(namespace=namespace).first()
    return {name: getattr(row, column) if row else None for name, column in QUOTAS.items()}


def set_quotas(*, namespace: Namespace, values: dict[str, int | None]) -> dict[str, int | None]:
    """Replace every quota: one not given becomes unlimited."""
    fields = {column: values.get(name) for name, column in QUOTAS.items()}
    NamespaceQuota.objects.bulk_create(
        [NamespaceQuota(namespace=namespace, updated_at=clock.now(), **fields)],
        update_conflicts=True, unique_fields=["namespace"], update_fields=[*fields, "updated_at"],
    )
    return get_quotas(namespace=namespace)


def _locked(namespace_id: int) -> NamespaceQuota | None:
    """The namespace's quotas, row-locked (every start reads them: one fixed
    statement, not an ORM query compiled anew)."""
    found = sql.rows(
        NamespaceQuota,
        f"SELECT {sql.columns(NamespaceQuota)} FROM {sql.table(NamespaceQuota)} WHERE namespace_id = %s{sql.for_update()}",
        [namespace_id],
    )
    return found[0] if found else None


def _refuse(quota: str, limit: int, current: int, retry_after_s: float, what: str) -> QuotaExceeded:
    """The refusal to raise, counted now (its transaction rolls back)."""
    metrics.record_refusal(f"quota:{quota}")
    return QuotaExceeded(
        f"namespace quota {quota} ({limit}) reached: {current} {what}",
        quota=quota, limit=limit, current=current, retryAfterSeconds=round(retry_after_s, 3),
    )


def check_start(*, namespace_id: int, now: dt.datetime) -> None:
    """Refuse a start over maxConcurrentExecutions or maxExecutionsPerMinute
    (and count it in the minute's window). Call inside the start's transaction."""
    quota = _locked(namespace_id)
    if quota is None:
        return
    limit = quota.max_concurrent_executions
    if limit is not None:
        current = Execution.objects.filter(namespace_id=namespace_id, status__in=ACTIVE_EXECUTION).count()
        if current >= limit:
            raise _refuse("maxConcurrentExecutions", limit, current, CONCURRENT_RETRY_AFTER_S, "running")
    limit = quota.max_executions_per_minute
    if limit is not None:
        start = rate_limits.window_start(now, rate_limits.STARTS_WINDOW_S)
        used = rate_limits.used_in(namespace_id=namespace_id, key=rate_limits.STARTS_KEY, start=start)
        if used >= limit:
            wait = (rate_limits.window_end(start, rate_limits.STARTS_WINDOW_S) - now).total_seconds()
            raise _refuse("maxExecutionsPerMinute", limit, used, wait, "started this minute")
        rate_limits.spend(namespace_id=namespace_id, key=rate_limits.STARTS_KEY, start=start, count=1)


def check_new_workflow_definition(*, namespace: Namespace, name: str) -> None:
    """Refuse registering a new workflow name over maxWorkflowDefinitions (a
    new version of an existing one is always allowed)."""
    if WorkflowDefinition.objects.filter(namespace=namespace, name=name).exists():
        return
    quota = _locked(namespace.id)
    if quota is None or quota.max_workflow_definitions is None:
        return
    current = WorkflowDefinition.objects.filter(namespace=namespace).count()
    if current >= quota.max_workflow_definitions:
        raise _refuse("maxWorkflowDefinitions", quota.max_workflow_definitions, current, COUNT_RETRY_AFTER_S, "defined")


def check_new_schedule(*, namespace: Namespace) -> None:
    """Refuse a new schedule over maxSchedules. Call in the creating transaction."""
    quota = _locked(namespace.id)
    if quota is None or quota.max_schedules is None:
        return
    current = Schedule.objects.filter(namespace=namespace).count()
    if current >= quota.max_schedules:
        raise _refuse("maxSchedules", quota.max_schedules, current, COUNT_RETRY_AFTER_S, "defined")
