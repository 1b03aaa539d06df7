"""The sweeper role: fires due timers (timeouts, waits, delayed decisions) and
handles expired leases (start-to-close and heartbeat timeouts, re-delivery).
Any number may run; see ``executions.timers`` for why each fires once."""

from __future__ import annotations

import time

from executions import timers
from executions.roles.loop import Role
from quotas import semaphores, starts

HOLDER_SWEEP_S = 5.0
HELD_SWEEP_S = 1.0


class SweeperRole(Role):
    name = "sweeper"
    idle_wait_s = 0.5

    _next_holder_sweep = 0.0
    _next_held_sweep = 0.0

    def tick(self) -> bool:
        fired = timers.fire_next_timer()
        expired = timers.expire_next_lease()
        self._sweep_holders()
        admitted = self._sweep_held()
        return fired or expired or admitted

    def _sweep_held(self) -> bool:
        """Every HELD_SWEEP_S, let in held starts that time (the per-minute
        quota) or an end the re-check skipped made room for (one indexed
        query when none is held)."""
        if time.monotonic() < self._next_held_sweep:
            return False
        self._next_held_sweep = time.monotonic() + HELD_SWEEP_S
        return starts.sweep_held()

    def _sweep_holders(self) -> None:
        """Every HOLDER_SWEEP_S, delete semaphore holders whose task ended or
        whose lease expired. Tidiness only: they already count for nothing."""
        if time.monotonic() >= self._next_holder_sweep:
            self._next_holder_sweep = time.monotonic() + HOLDER_SWEEP_S
            semaphores.sweep_stale_holders()
