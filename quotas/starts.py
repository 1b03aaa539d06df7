"""The controls on a root run becoming RUNNING, checked before anything
changes: a start (and a schedule's firing, which is one), a retry, a
restart, and a failure workflow, which the engine starts itself. One
function, ``check_start``, for every one of them.

In lock order (the same everywhere, so these never deadlock each other):
the namespace's quota row (quotas), the definition's name
(``maxConcurrentExecutions``), the admission bucket (``rateLimitConfig``).
Each lock is held until the caller commits, so a concurrent start counts
this one. Only root runs are subject to these controls and only root runs
count in them: a SUB_WORKFLOW child runs under its root's admission, and
neither takes a slot nor waits for one.

Refusals are 429s naming the control, raised before anything is written;
admission never refuses, it queues. Nor is an engine start refused: where a
control would refuse it, it is inserted RUNNING, awaiting admission, with a
ticket in its namespace's line of held starts (``HELD_LINE``), and
``admit_held`` lets it in, in ticket order, once the controls allow it: at
the end of a root run that may have made room, and from the sweeper
(``sweep_held``) for what time frees (``maxExecutionsPerMinute``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from executions import runs, snapshots
from executions.models import Execution
from nodeflow import clock, transactions
from nodeflow.errors import ApiError, LimitExceeded
from quotas import admission, locks, metrics, namespace_quotas
from quotas.models import HELD_LINE, Admission

# Held starts looked at by one pass over a line; the next pass carries on.
MAX_HELD_PER_PASS = 100


def check_start(*, execution: Execution, workflow: dict, now: dt.datetime, hold: bool = False) -> bool | None:
    """Place a root run about to become RUNNING (a new one, or an ended one
    that a retry or restart reopens), before anything is written. Refuse it
    (QuotaExceeded, LimitExceeded: counted, raised) or answer True (runs now,
    in a slot of its admission key), False (waits in line, undecided) or
    None (runs now; no admission key). ``hold``: an engine start, which is
    held in line (False) where it would be refused. Sets
    ``awaiting_admission`` and ``admission_key`` on ``execution`` (the
    caller writes them). A SUB_WORKFLOW child is subject to none of it."""
    execution.awaiting_admission, execution.admission_key = False, None
    if execution.parent_execution_id is not None:
        return None
    quota, refusal = namespace_quotas.start_refusal(namespace_id=execution.namespace_id, now=now)
    if refusal is None:
        refusal = _over_max_concurrent(execution, workflow)
    if refusal is not None:
        if not hold:
            metrics.record_refusal(_control(refusal), execution.namespace_id)
            raise refusal
        execution.awaiting_admission = True
        return False
    namespace_quotas.count_start(quota, now=now)
    return admission.line_up(execution=execution, workflow=workflow)


def _control(refusal: ApiError) -> str:
    """The control a refusal names, as the 429 body and the metrics do."""
    return refusal.fields.get("control") or f"quota:{refusal.fields['quota']}"


def _over_max_concurrent(
    execution: Execution, workflow: dict, *, held: bool = True, lock: bool = True
) -> LimitExceeded | None:
    """The refusal of a root run over its definition's
    ``maxConcurrentExecutions``: at most that many active root runs of one
    definition (any version), counted under the definition's lock
    (``lock=False``: a diagnostic's committed view). ``held``: as in
    ``namespace_quotas.active_roots``."""
    limit = int(workflow.get("maxConcurrentExecutions") or 0)
    if not limit:
        return None
    if lock:
        locks.lock_name(locks.definition_lock(execution.namespace_id, execution.name))
    current = namespace_quotas.active_roots(execution.namespace_id, name=execution.name, held=held)
    if current < limit:
        return None
    return LimitExceeded(
        f"workflow '{execution.name}' already has {current} running execution(s); maxConcurrentExecutions is {limit}",
        control="maxConcurrentExecutions",
        limit=limit,
        current=current,
    )


def after_root_end(execution: Execution, *, now: dt.datetime) -> list[uuid.UUID]:
    """A root run ended, in the caller's transaction: admit the held starts
    that the room it made may let in (``admit_held``). Only where it could
    have made room for one: its definition has a cap or its namespace a
    concurrency quota (this process's hint), and only once something is held
    (one indexed query). A run that itself awaited admission is left to the
    sweeper: a pass admitting it would hold the locks it would ask for."""
    if execution.parent_execution_id is not None or execution.awaiting_admission:
        return []
    capped = bool(snapshots.workflow_of(execution).get("maxConcurrentExecutions"))
    if not capped and not namespace_quotas.limits_concurrency(execution.namespace_id):
        return []
    if not Admission.objects.filter(namespace_id=execution.namespace_id, bucket=HELD_LINE).exists():
        return []
    return admit_held(namespace_id=execution.namespace_id, now=now)


def admit_held(*, namespace_id: int, now: dt.datetime) -> list[uuid.UUID]:
    """Let the namespace's held starts that the start controls now allow
    leave their line, in ticket order, in the caller's transaction, under
    the locks of a start and in its order: the quota row, then for each its
    definition's name, its row, its admission bucket. The counts leave held
    starts out: they are what is being placed. The quota refusing one ends
    the pass (it would refuse the rest); a definition at its cap holds back
    only its own. Returns the ids that left (admitted, or in their bucket's
    line: ``admission.leave_held_line``)."""
    tickets = Admission.objects.filter(namespace_id=namespace_id, bucket=HELD_LINE).order_by("id")
    placed: list[uuid.UUID] = []
    capped: set[str] = set()
    for ticket in tickets.select_related("execution")[:MAX_HELD_PER_PASS]:
        quota, refusal = namespace_quotas.start_refusal(namespace_id=namespace_id, now=now, held=False)
        if refusal is not None:
            break
        held, workflow = ticket.execution, snapshots.workflow_of(ticket.execution)
        if held.name in capped or _over_max_concurrent(held, workflow, held=False) is not None:
            capped.add(held.name)
            continue
        execution = runs.lock(held.id)
        if execution is None or not admission.take_held_ticket(ticket.pk):
            continue  # it ended (terminated) meanwhile, or another pass placed it
        namespace_quotas.count_start(quota, now=now)
        admission.leave_held_line(execution=execution, workflow=workflow, now=now)
        placed.append(execution.id)
    return placed


def sweep_held() -> bool:
    """The sweeper's pass over every held line: maxExecutionsPerMinute frees
    with time, not with an end, and some ends leave the re-check to it
    (``after_root_end``). One indexed query when nothing is held; True when
    a held start left its line."""
    namespaces = list(Admission.objects.filter(bucket=HELD_LINE).values_list("namespace_id", flat=True).distinct())
    placed = False
    for namespace_id in namespaces:
        with transactions.outermost():
            placed = bool(admit_held(namespace_id=namespace_id, now=clock.now())) or placed
    return placed


@dataclass(frozen=True)
class Holder:
    """The control a held start waits on, with its figures."""

    control: str
    limit: int
    current: int
    until: dt.datetime | None = None


def held_by(*, execution: Execution, now: dt.datetime) -> Holder | None:
    """What holds a held start back, from committed state (no locks: a
    diagnostic). The first start control, in the order they are checked,
    that would refuse it now; when none would (room has just appeared and
    the next pass admits it), the first that applies to it."""
    quota, refusal = namespace_quotas.start_refusal(
        namespace_id=execution.namespace_id, now=now, held=False, lock=False
    )
    workflow = snapshots.workflow_of(execution)
    if refusal is None:
        refusal = _over_max_concurrent(execution, workflow, held=False, lock=False)
    if refusal is not None:
        per_minute = refusal.fields.get("quota") == "maxExecutionsPerMinute"
        until = now + dt.timedelta(seconds=refusal.fields["retryAfterSeconds"]) if per_minute else None
        return Holder(_control(refusal), refusal.fields["limit"], refusal.fields["current"], until)
    if quota is not None and quota.max_concurrent_executions is not None:
        current = namespace_quotas.active_roots(execution.namespace_id, held=False)
        return Holder("quota:maxConcurrentExecutions", quota.max_concurrent_executions, current)
    if workflow.get("maxConcurrentExecutions"):
        current = namespace_quotas.active_roots(execution.namespace_id, name=execution.name, held=False)
        return Holder("maxConcurrentExecutions", int(workflow["maxConcurrentExecutions"]), current)
    return None
