"""The decider role: drains the durable decide queue.

Most decisions run inline, in the transaction of the event that caused them
(a task result, a start, a timer). The queue carries the rest: a child that
ended (its parent re-decides), an admission, a decision that failed inline.
Each request is also tried at once, right after the commit that made it, by
the process that made it; the row is what survives if that process dies. Any number of deciders run side by side: each request is claimed
with SKIP LOCKED, and the execution's row lock keeps one decider per
execution at a time.
"""

from __future__ import annotations

from executions import executor, notify
from executions.roles.loop import Role


class DeciderRole(Role):
    name = "decider"
    idle_wait_s = 1.0

    def on_start(self) -> None:
        notify.hub.attach(notify.DECIDE_KEY, self.wake)

    def tick(self) -> bool:
        return executor.decide_next_request()
