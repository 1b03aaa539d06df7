"""Namespace quotas: platform limits an administrator sets per namespace.

Each check runs in the transaction of the insert it guards, after locking
the namespace's quota row, and counts in a statement after that lock: two
concurrent starts queue on the row, and the second counts the first. A
namespace without a quota row takes no lock at all. Absent is unlimited.

Only root runs count for ``maxConcurrentExecutions``: a SUB_WORKFLOW child
runs under its root's admission.
"""

from __future__ import annotations

import datetime as dt
import time

from executions import sql
from executions.models import ACTIVE_EXECUTION, Execution
from metadata.models import WorkflowDefinition
from nodeflow import clock, transactions
from nodeflow.errors import QuotaExceeded
from nodeflow.models import Namespace
from quotas import metrics, rate_limits
from quotas.models import HELD_LINE, Admission, NamespaceQuota, Schedule

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
        update_conflicts=True,
        unique_fields=["namespace"],
        update_fields=[*fields, "updated_at"],
    )
    _remember(namespace.id, fields["max_concurrent_executions"])
    return get_quotas(namespace=namespace)


def _locked(namespace_id: int) -> NamespaceQuota | None:
    """The namespace's quotas, row-locked."""
    return _read(namespace_id, lock=True)


def quota_key(namespace_id: int) -> str:
    """The ``transactions.once`` key of the namespace's quotas, read unlocked."""
    return f"quota:{namespace_id}"


def read_with(namespace_id: int, statement: str, params: list, width: int) -> tuple[NamespaceQuota | None, tuple]:
    """The namespace's quotas, unlocked (as ``start_refusal`` reads them
    first), and in the same statement the ``width`` columns of the one row
    ``statement`` (with ``params``) gives, or Nones: one round trip for two
    reads a service makes in a row."""
    found = sql.rows(
        NamespaceQuota,
        f"SELECT {sql.columns(NamespaceQuota, 'q')}, w.* "
        f"FROM (SELECT 1) AS one LEFT JOIN {sql.table(NamespaceQuota)} q ON q.namespace_id = %s "
        f"LEFT JOIN ({statement}) AS w ON 1 = 1",
        [namespace_id, *params],
        extra=width,
    )
    quota, other = found[0]
    _remember(namespace_id, quota.max_concurrent_executions if quota else None)
    return quota, other


def _read(namespace_id: int, *, lock: bool) -> NamespaceQuota | None:
    """The namespace's quotas (every start reads them: one fixed statement,
    not an ORM query compiled anew), row-locked with ``lock``."""
    found = sql.rows(
        NamespaceQuota,
        f"SELECT {sql.columns(NamespaceQuota)} FROM {sql.table(NamespaceQuota)} WHERE namespace_id = %s"
        + (sql.for_update() if lock else ""),
        [namespace_id],
    )
    quota = found[0] if found else None
    _remember(namespace_id, quota.max_concurrent_executions if quota else None)
    return quota


# Whether each namespace has a maxConcurrentExecutions quota, as this process
# last read it (every start reads the row anyway). A root run's end asks it
# before looking for held starts that the slot it freed could admit; a hint
# only, since the sweeper re-checks every held line each tick.
QUOTA_HINT_S = 60.0
_MAX_HINTS = 10_000
_concurrency_hints: dict[int, tuple[float, bool]] = {}


def _remember(namespace_id: int, max_concurrent_executions: int | None) -> None:
    if len(_concurrency_hints) > _MAX_HINTS:
        _concurrency_hints.clear()
    _concurrency_hints[namespace_id] = (time.monotonic(), max_concurrent_executions is not None)


def limits_concurrency(namespace_id: int) -> bool:
    """Whether the namespace has a maxConcurrentExecutions quota (at most
    QUOTA_HINT_S old; read, unlocked, when older)."""
    hint = _concurrency_hints.get(namespace_id)
    if hint is not None and time.monotonic() - hint[0] < QUOTA_HINT_S:
        return hint[1]
    limit = (
        NamespaceQuota.objects.filter(namespace_id=namespace_id)
        .values_list("max_concurrent_executions", flat=True)
        .first()
    )
    _remember(namespace_id, limit)
    return limit is not None


def active_roots(namespace_id: int, *, name: str | None = None, held: bool = True) -> int:
    """RUNNING and PAUSED root runs of the namespace (of workflow ``name``):
    what ``maxConcurrentExecutions`` counts, as quota and as a definition's
    cap. Runs awaiting admission are RUNNING and count; ``held=False``
    leaves out the held engine starts, as re-checking their line does."""
    runs = Execution.objects.filter(
        namespace_id=namespace_id, status__in=ACTIVE_EXECUTION, parent_execution__isnull=True
    )
    if name is not None:
        runs = runs.filter(name=name)
    current = runs.count()
    if not held:
        line = Admission.objects.filter(namespace_id=namespace_id, bucket=HELD_LINE)
        current -= (line.filter(execution__name=name) if name is not None else line).count()
    return current


def _refusal(quota: str, limit: int, current: int, retry_after_s: float, what: str) -> QuotaExceeded:
    return QuotaExceeded(
        f"namespace quota {quota} ({limit}) reached: {current} {what}",
        quota=quota,
        limit=limit,
        current=current,
        retryAfterSeconds=round(retry_after_s, 3),
    )


def _refuse(
    quota: str, limit: int, current: int, retry_after_s: float, what: str, namespace_id: int | None = None
) -> QuotaExceeded:
    """The refusal to raise, counted now (its transaction rolls back)."""
    metrics.record_refusal(f"quota:{quota}", namespace_id)
    return _refusal(quota, limit, current, retry_after_s, what)


def start_refusal(
    *, namespace_id: int, now: dt.datetime, held: bool = True, lock: bool = True
) -> tuple[NamespaceQuota | None, QuotaExceeded | None]:
    """(the namespace's quotas, the refusal a root run becoming RUNNING now
    meets: over maxConcurrentExecutions or maxExecutionsPerMinute, or None).
    Neither raised nor counted, and nothing spent: a start that passes every
    control then calls ``count_start``. Locks the quota row (``lock=False``:
    a diagnostic's committed view); ``held``: as in ``active_roots``."""
    # Once per transaction (a bulk start's hundred starts read it once); the
    # locked read below is made by each start that needs it.
    quota = transactions.once(quota_key(namespace_id), lambda: _read(namespace_id, lock=False))
    if quota is None or (quota.max_concurrent_executions is None and quota.max_executions_per_minute is None):
        # No start quota: nothing to count under the row's lock, which
        # would make every start of the namespace wait for the one before.
        return quota, None
    if lock:
        quota = _locked(namespace_id)
        if quota is None:
            return None, None
    limit = quota.max_concurrent_executions
    if limit is not None:
        current = active_roots(namespace_id, held=held)
        if current >= limit:
            return quota, _refusal("maxConcurrentExecutions", limit, current, CONCURRENT_RETRY_AFTER_S, "running")
    limit = quota.max_executions_per_minute
    if limit is not None:
        start = rate_limits.window_start(now, rate_limits.STARTS_WINDOW_S)
        used = rate_limits.used_in(namespace_id=namespace_id, key=rate_limits.STARTS_KEY, start=start)
        if used >= limit:
            wait = (rate_limits.window_end(start, rate_limits.STARTS_WINDOW_S) - now).total_seconds()
            return quota, _refusal("maxExecutionsPerMinute", limit, used, wait, "started this minute")
    return quota, None


def count_start(quota: NamespaceQuota | None, *, now: dt.datetime) -> None:
    """Spend the start in the minute's window (when the namespace has a
    maxExecutionsPerMinute), in the start's transaction: a rolled-back start
    spends nothing."""
    if quota is None or quota.max_executions_per_minute is None:
        return
    start = rate_limits.window_start(now, rate_limits.STARTS_WINDOW_S)
    rate_limits.spend(namespace_id=quota.namespace_id, key=rate_limits.STARTS_KEY, start=start, count=1)


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
        raise _refuse(
            "maxWorkflowDefinitions",
            quota.max_workflow_definitions,
            current,
            COUNT_RETRY_AFTER_S,
            "defined",
            namespace.id,
        )


def check_new_schedule(*, namespace: Namespace) -> None:
    """Refuse a new schedule over maxSchedules. Call in the creating transaction."""
    quota = _locked(namespace.id)
    if quota is None or quota.max_schedules is None:
        return
    current = Schedule.objects.filter(namespace=namespace).count()
    if current >= quota.max_schedules:
        raise _refuse("maxSchedules", quota.max_schedules, current, COUNT_RETRY_AFTER_S, "defined", namespace.id)
