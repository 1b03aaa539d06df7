"""Celery tasks (when CELERY_BROKER_URL is set): run one system task, and the
beat sweeps. Thin: each calls services. Messages carry ids only and every
task is safe to run twice (the lease decides who runs a system task; timers
and leases are claimed with SKIP LOCKED)."""
from __future__ import annotations

import time

from celery import shared_task

from executions import breakers, timers
from executions.system_tasks import enqueue, runner
from executions.system_tasks.base import Outcome
from quotas import starts

# One beat sweep works at most this long; the next one carries on.
SWEEP_BUDGET_S = 10.0


@shared_task(name=enqueue.RUN_TASK)
def run_system_task(task_id: str) -> None:
    """Run the system task ``task_id`` if it is still ready."""
    outcome = runner.run_task(task_id, worker=runner.worker_id("celery"))
    if isinstance(outcome, Outcome) and outcome.callback_after_s > 0:
        enqueue.send_later(task_id, outcome.callback_after_s)  # the next poll of HTTP_POLL
    breakers.report_if_due()


@shared_task(name="nodeflow.sweep")
def sweep() -> None:
    """Fire due timers, handle expired leases and let in the held starts
    there is room for now (the sweeper role's work)."""
    give_up = time.monotonic() + SWEEP_BUDGET_S
    while time.monotonic() < give_up:
        fired = timers.fire_next_timer()
        expired = timers.expire_next_lease()
        if not (fired or expired):
            break
    starts.sweep_held()


@shared_task(name="nodeflow.recover_system_tasks")
def recover_system_tasks() -> None:
    """Re-send system tasks whose message may have been lost."""
    enqueue.send_overdue()
    breakers.report_if_due()
