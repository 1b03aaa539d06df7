"""The scheduler role: fires due schedules (``quotas.schedules``), each as an
ordinary start subject to every control on starts. Any number may run: a
firing is claimed with SKIP LOCKED and moved on in the transaction that
starts it, so each happens once."""

from __future__ import annotations

from executions.roles.loop import Role
from quotas import schedules


class SchedulerRole(Role):
    name = "scheduler"
    # Cron has minute resolution (seconds with a sixth field): a second's
    # look is prompt enough and costs one indexed query when idle.
    idle_wait_s = 1.0

    def tick(self) -> bool:
        return schedules.fire_next_schedule()
