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

import datetime as dt
import logging

from django.db import transaction

from executions import executor, notify
from executions.models import DecideRequest
from nodeflow import clock
from nodeflow.loop import Role

log = logging.getLogger(__name__)

# A request whose decision keeps failing is pushed back this far, not retried hot.
FAILED_REQUEST_BACKOFF_S = 5.0


class DeciderRole(Role):
    name = "decider"
    idle_wait_s = 1.0

    def on_start(self) -> None:
        notify.hub.attach(notify.DECIDE_KEY, self.wake)

    def tick(self) -> bool:
        now = clock.now()
        execution_id = None
        try:
            with transaction.atomic():
                request = (
                    DecideRequest.objects.filter(due_at__lte=now)
                    .order_by("due_at")
                    .select_for_update(skip_locked=True)
                    .first()
                )
                if request is None:
                    return False
                execution_id = request.execution_id
                execution = executor.lock_execution(execution_id)
                request.delete()
                if execution is not None:
                    executor.decide_locked(execution)
        except Exception:
            if execution_id is None:
                raise
            log.exception("deciding %s failed; retrying in %s s", execution_id, FAILED_REQUEST_BACKOFF_S)
            DecideRequest.objects.filter(execution_id=execution_id).update(
                due_at=clock.now() + dt.timedelta(seconds=FAILED_REQUEST_BACKOFF_S)
            )
        return True
