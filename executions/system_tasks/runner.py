"""Runs system tasks: lease one, call its hook, report the result.

The database stays the truth. The runner leases a task as a worker does
(``dispatch.lease_system_tasks``: a lease token, SKIP LOCKED, through the
gate of the task definition the task names), runs the
type's hook in this process, and reports through
``results.report_result`` with that token; the result and the decision it
causes commit together. The lease is short and renewed while the hook runs
(``renewals``), so if the runner dies it lapses within
NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS and the attempt is offered again; how
long the hook may take is a separate limit (``call_seconds``). If two
runners ever run one attempt, the second report names a stale token, gets
409 and changes nothing.

Circuit breakers (``executions.breakers``) sit around the hook: an open
breaker fails the task retryably without calling, with ``circuitOpen`` and
``retryAfterSeconds`` (until the breaker may let a probe through) in the
output, so the next attempt waits for it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

from django.conf import settings

from executions import breakers, dispatch, results
from executions.models import Task
from executions.system_tasks import celery_handoff, registry, renewals
from executions.system_tasks.base import Context, Outcome, RetryableError, TaskFailure
from nodeflow import clock
from nodeflow.errors import Conflict, NotFound
from nodeflow.models import Namespace
from quotas import diagnostics

log = logging.getLogger(__name__)

# A hook must answer this long before its attempt's startToCloseTimeout ends
# (the latest its lease is renewed to), so its report is not stale.
REPORT_MARGIN_S = 5.0
# A task held by a rate window is offered again this long after the window ends.
WINDOW_MARGIN_S = 0.01

# Renews the lease of every call this process runs (the role's pool, Celery's threads).
keeper = renewals.LeaseKeeper()


def worker_id(role: str) -> str:
    return f"{role}@{socket.gethostname()}:{os.getpid()}"


def run_next(*, worker: str) -> bool:
    """Lease and run one ready system task; False when none is ready."""
    leased = dispatch.lease_system_tasks(worker_id=worker, count=1)
    for task in leased:
        run_leased(task)
    return bool(leased)


def run_task(task_id: uuid.UUID | str, *, worker: str) -> Outcome | TaskFailure | None:
    """Lease and run the task ``task_id`` if it is ready and its task
    definition's controls let it through (a Celery message names it). None
    when not: already run, leased, canceled, not due yet, or held. A task
    held by a used-up rate window gets a message for when the window ends;
    one held for a slot or permits gets one when they are freed
    (``celery_handoff.send_freed``)."""
    diagnostics.record_system_poll(worker_id=worker, threads=celery_handoff.pool_size())
    lease = dispatch.lease_system_task(task_id, worker_id=worker)
    if lease.tasks:
        return run_leased(lease.tasks[0])
    retry_at = lease.gate.retry_at if lease.gate is not None else None
    if retry_at is not None:
        celery_handoff.send_later(task_id, max((retry_at - clock.now()).total_seconds(), 0.0) + WINDOW_MARGIN_S)
    return None


def run_leased(task: Task) -> Outcome | TaskFailure:
    """Run one leased task, renewing its lease while the hook runs, and
    report what happened."""
    namespace = Namespace.objects.get(pk=task.namespace_id)
    ctx = context_of(task, namespace)
    with keeper.keep(task, namespace):
        outcome = execute(ctx, namespace_id=namespace.id, first=task.deliveries <= 1)
    report(task, namespace, ctx, outcome)
    return outcome


def context_of(task: Task, namespace: Namespace) -> Context:
    return Context(
        task_id=str(task.id),
        type=task.type,
        namespace=namespace.name,
        input=task.input or {},
        output=task.output or {},
        attempt=task.attempt,
        idempotency_key=task.idempotency_key,
        deadline=time.monotonic() + call_seconds(task.policy),
    )


def call_seconds(policy: dict) -> float:
    """How long one call of a hook may take: NODE_FLOW_SYSTEM_TASK_CALL_SECONDS,
    whatever the lease's length (it is renewed), but short enough to report
    before the attempt's startToCloseTimeout, past which no renewal goes."""
    limit_s = float(settings.NODE_FLOW_SYSTEM_TASK_CALL_SECONDS)
    start_to_close = float(policy.get("startToCloseTimeout") or 0)
    if start_to_close > 0:
        limit_s = min(limit_s, max(start_to_close - REPORT_MARGIN_S, start_to_close / 2))
    return limit_s


def execute(ctx: Context, *, namespace_id: int, first: bool) -> Outcome | TaskFailure:
    """Call the hook behind the task's circuit breaker; never raises."""
    try:
        handler = registry.get(ctx.type)
        key = handler.breaker_key(ctx)
    except TaskFailure as failure:
        return failure
    except KeyError:
        return RetryableError(f"no system task implementation for {ctx.type}")
    permit = breakers.registry().acquire(key, namespace_id)
    if permit is None:
        # Only a named breaker refuses: a call without a key always gets a permit.
        return circuit_open(key)  # type: ignore[arg-type]  # mypy cannot tie key to permit being None
    counts: bool | None = None
    try:
        outcome = handler.start(ctx) if first else handler.execute(ctx)
        counts = False
        return outcome
    except TaskFailure as failure:
        counts = failure.counts
        return failure
    except Exception as exc:
        log.exception("system task %s (%s) raised", ctx.task_id, ctx.type)
        return RetryableError(f"internal error in {ctx.type}: {type(exc).__name__}: {exc}")
    finally:
        permit.release(counts)


def circuit_open(key: str) -> RetryableError:
    wait = breakers.registry().get(key).open_remaining_s()
    return RetryableError(
        f"circuitOpen:{key}: the circuit breaker for {key} is open; the call was not made",
        output={"circuitOpen": key},
        retry_after_s=round(wait, 3),
    )


def report(task: Task, namespace: Namespace, ctx: Context, outcome: Outcome | TaskFailure) -> None:
    try:
        results.report_result(namespace=namespace, result=to_result(task, outcome))
    except Conflict as conflict:
        # Stale: the lease expired and the attempt went to another runner, or
        # the task was canceled while it ran (then undo what we can).
        log.info("system task %s: result not taken: %s", task.id, conflict.message)
        if conflict.fields.get("taskStatus") == "CANCELED":
            cancel(ctx)
    except NotFound:
        log.info("system task %s is gone", task.id)


def to_result(task: Task, outcome: Outcome | TaskFailure) -> results.Result:
    if isinstance(outcome, TaskFailure):
        return results.Result(
            task_id=task.id,
            status=outcome.status,
            lease_token=task.lease_token,
            output=outcome.output,
            reason=outcome.reason[:10_000],
        )
    return results.Result(
        task_id=task.id,
        status=outcome.status,
        lease_token=task.lease_token,
        output=outcome.output,
        callback_after_s=outcome.callback_after_s,
    )


def cancel(ctx: Context) -> None:
    try:
        registry.get(ctx.type).cancel(ctx)
    except Exception:
        log.exception("cancel hook of %s (%s) failed", ctx.task_id, ctx.type)
