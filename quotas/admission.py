"""Workflow admission by key (``rateLimitConfig``).

At most ``concurrentExecLimit`` executions of one workflow that share the
resolved ``rateLimitKey`` run at once. A start past that is created RUNNING
with ``awaitingAdmission: true`` and no decision at all (its first decision,
which also arms its timeout, is deferred), and waits in line. When a holder
ends, the first in line are admitted and decided, in start order.

The line is the ``Admission`` table, in the database: a restart of every
process changes nothing. A bucket is (workflow name, key): different keys
never contend. A key that resolves to nothing (null or "") is the bucket
named by the expression itself, so an unkeyed run still counts against the
limit. Each bucket is serialised by a transaction-scoped lock on its name.

The same table holds each namespace's line of held starts (``HELD_LINE``):
engine starts that a start control would have refused (quotas.starts). A
ticket there has no admission key; its run is awaiting admission all the
same, and lines up in its bucket, if it has one, when it leaves.

Retry and restart line up like a start (``place_reopened``); a retry's new
attempts are held while the run waits, and released when it is admitted.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from executions import attempts, runs, snapshots
from executions.models import Execution, ExecutionStatus
from metadata.expressions import resolve
from nodeflow import clock
from quotas import locks
from quotas.models import HELD_LINE, Admission

MAX_KEY_LENGTH = 256


def admission_key(*, workflow: dict, execution: Execution) -> str | None:
    """The execution's resolved key, or None when the workflow has no
    ``rateLimitConfig``. Only ``${workflow.…}`` may appear in it (checked at
    registration): no task has run yet."""
    config = workflow.get("rateLimitConfig")
    if not config:
        return None
    expression = config["rateLimitKey"]
    context = {
        "workflow": {
            "input": execution.input,
            "variables": execution.variables,
            "output": {},
            "executionId": str(execution.id),
            "workflowId": str(execution.id),
            "correlationId": execution.correlation_id,
            "name": execution.name,
            "version": execution.version,
            "parentExecutionId": None,
        }
    }
    value: Any = resolve(expression, context)
    if value is None or value == "":
        value = expression
    key = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    return key[:MAX_KEY_LENGTH]


def _bucket(name: str, key: str) -> str:
    return f"{name}:{key}"


def _limit(execution: Execution) -> int:
    config = snapshots.workflow_of(execution).get("rateLimitConfig") or {}
    return int(config.get("concurrentExecLimit") or 1)


def _admitted(namespace_id: int, bucket: str) -> int:
    return Admission.objects.filter(namespace_id=namespace_id, bucket=bucket, admitted=True).count()


def line_up(*, execution: Execution, workflow: dict) -> bool | None:
    """Before a new execution is inserted (or an ended one reopened, or a
    held one let go): lock its bucket and say whether it runs now (True),
    waits in line (False), or is not rate-limited (None). Sets
    ``admission_key`` and ``awaiting_admission`` on it. The caller then
    writes it and calls ``take_ticket`` in the same transaction."""
    key = admission_key(workflow=workflow, execution=execution)
    if key is None:
        return None
    bucket = _bucket(execution.name, key)
    locks.lock_name(locks.admission_lock(execution.namespace_id, bucket))
    limit = int(workflow["rateLimitConfig"]["concurrentExecLimit"])
    waiting = Admission.objects.filter(namespace_id=execution.namespace_id, bucket=bucket, admitted=False)
    if waiting.exists() and _admitted(execution.namespace_id, bucket) < limit:
        _admit_next(execution.namespace_id, bucket)  # the limit was raised: those in line go first
    admitted = not waiting.exists() and _admitted(execution.namespace_id, bucket) < limit
    execution.admission_key, execution.awaiting_admission = key, not admitted
    return admitted


def _line_of(execution: Execution) -> str:
    """The bucket of the execution's admission key; without a key, a run
    awaiting admission is a held start."""
    return HELD_LINE if execution.admission_key is None else _bucket(execution.name, execution.admission_key)


def take_ticket(*, execution: Execution, admitted: bool) -> None:
    """Record an inserted (or reopened) execution's place, as placed by
    ``line_up`` or held by quotas.starts (skipped for one that already ended
    in its first decision: it holds nothing)."""
    if not execution.active:
        return
    Admission.objects.create(
        namespace_id=execution.namespace_id,
        bucket=_line_of(execution),
        execution=execution,
        admitted=admitted,
        created_at=clock.now(),
    )


def place_reopened(*, execution: Execution, admitted: bool | None, now: dt.datetime) -> None:
    """Record where quotas.starts.check_start placed a run that a retry or
    restart reopened (locked, RUNNING again): its admission fields and its
    ticket. While it waits in line, a retry's new attempts are inserted
    held (lifecycle): ``admit`` releases them."""
    runs.update(
        execution,
        {"awaiting_admission": execution.awaiting_admission, "admission_key": execution.admission_key},
        now=now,
    )
    if admitted is not None:
        take_ticket(execution=execution, admitted=admitted)


def take_held_ticket(ticket_id: int) -> bool:
    """A held start (its run locked) leaves the held line: its ticket goes.
    False when it is gone already: the run ended (terminated) meanwhile, or
    another pass placed it."""
    return bool(Admission.objects.filter(pk=ticket_id, bucket=HELD_LINE).delete()[0])


def leave_held_line(*, execution: Execution, workflow: dict, now: dt.datetime) -> bool:
    """A held start (locked; its held ticket gone) passed the start controls:
    it lines up in its admission bucket like a start, admitted at once if
    there is room. True when admitted."""
    admitted = line_up(execution=execution, workflow=workflow)
    if admitted is not None:
        runs.update(execution, {"admission_key": execution.admission_key}, now=now)
        take_ticket(execution=execution, admitted=admitted)
    if admitted is False:
        return False
    admit(execution)
    return True


def admit(execution: Execution) -> None:
    """Let a locked execution that awaited admission in: its held tasks (a
    retry's new attempts) may be dispatched, unless it is paused (resume
    releases them), and its first decision is queued."""
    runs.admit(execution.id)
    execution.awaiting_admission = False
    if execution.status == ExecutionStatus.RUNNING:
        attempts.release_held(execution_id=execution.id)
    runs.request_decision(execution.id, now=clock.now())


def release(execution: Execution) -> list[uuid.UUID]:
    """An execution ended: give up its ticket; if it held a slot, admit the
    next in line. Returns the ids admitted (each gets a decide request)."""
    if execution.admission_key is None and not execution.awaiting_admission:
        return []  # it never stood in a line
    ticket = Admission.objects.filter(execution_id=execution.id).values_list("admitted", "bucket").first()
    if ticket is None:
        return []
    admitted, bucket = ticket
    Admission.objects.filter(execution_id=execution.id).delete()
    if not admitted:
        return []  # a waiting execution ended (terminated): it freed no slot
    locks.lock_name(locks.admission_lock(execution.namespace_id, bucket))
    return _admit_next(execution.namespace_id, bucket)


def _admit_next(namespace_id: int, bucket: str) -> list[uuid.UUID]:
    """Admit waiting executions in start order while their limit allows.
    Each is marked admitted and queued for its first decision."""
    admitted_ids: list[uuid.UUID] = []
    running = _admitted(namespace_id, bucket)
    waiting = Admission.objects.filter(namespace_id=namespace_id, bucket=bucket, admitted=False).order_by("id")
    for ticket in waiting.select_related("execution")[:100]:
        if running >= _limit(ticket.execution):
            break
        # Its row before its ticket: a run that ends deletes its ticket under
        # its row lock (``release``), so the other order could deadlock.
        execution = runs.lock(ticket.execution_id)
        if execution is None or not Admission.objects.filter(pk=ticket.pk, admitted=False).update(admitted=True):
            continue  # it ended (terminated) meanwhile
        admit(execution)
        admitted_ids.append(execution.id)
        running += 1
    return admitted_ids


def use_of(execution: Execution) -> tuple[int, int]:
    """(limit, executions admitted) of the execution's bucket."""
    bucket = _bucket(execution.name, execution.admission_key or "")
    return _limit(execution), _admitted(execution.namespace_id, bucket)


def waiting_since(execution: Execution) -> dt.datetime | None:
    """When the execution took its place in line (None: it has no ticket)."""
    return Admission.objects.filter(execution_id=execution.id).values_list("created_at", flat=True).first()
