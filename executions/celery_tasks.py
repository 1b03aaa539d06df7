"""Celery tasks (when CELERY_BROKER_URL is set): run one system task, and the
beat sweeps. Thin: each calls services. Messages carry ids only and every
task is safe to run twice (the lease decides who runs a system task; timers
and leases are claimed with SKIP LOCKED)."""

from __future__ import annotations

from celery import shared_task

from executions import breakers
from executions.roles.sweeper import SweeperRole
from executions.system_tasks import celery_handoff, runner
from executions.system_tasks.base import Outcome

# One beat sweep works at most this long; the next one carries on.
SWEEP_BUDGET_S = 10.0


@shared_task(name=celery_handoff.RUN_TASK)
def run_system_task(task_id: str) -> None:
    """Run the system task ``task_id`` if it is still ready."""
    outcome = runner.run_task(task_id, worker=runner.worker_id("celery"))
    if isinstance(outcome, Outcome) and outcome.callback_after_s > 0:
        celery_handoff.send_later(task_id, outcome.callback_after_s)  # the next poll of HTTP_POLL
    breakers.report_if_due()


@shared_task(name="nodeflow.sweep")
def sweep() -> None:
    """The sweeper role's ticks (``SweeperRole.tick``: due timers, expired
    leases, held starts, stale semaphore holders) until none finds work, or
    for SWEEP_BUDGET_S; the next beat (a second later) carries on."""
    SweeperRole().run_once(budget_s=SWEEP_BUDGET_S)


@shared_task(name="nodeflow.recover_system_tasks")
def recover_system_tasks() -> None:
    """Re-send system tasks whose message may have been lost."""
    celery_handoff.send_overdue()
    breakers.report_if_due()
