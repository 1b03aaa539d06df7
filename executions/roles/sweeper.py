"""The sweeper role: fires due timers (timeouts, waits, delayed decisions) and
handles expired leases (start-to-close and heartbeat timeouts, re-delivery).
Any number may run; see ``executions.timers`` for why each fires once."""
from __future__ import annotations

from executions import timers
from nodeflow.loop import Role


class SweeperRole(Role):
    name = "sweeper"
    idle_wait_s = 0.5

    def tick(self) -> bool:
        fired = timers.fire_next_timer()
        expired = timers.expire_next_lease()
        return fired or expired
