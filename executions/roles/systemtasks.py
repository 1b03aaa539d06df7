"""The system-task role (without Celery): leases ready system tasks of every
namespace, each through its task definition's gate (``dispatch.lease_system_tasks``),
and runs each on a small thread pool.

Each tick leases one task if a thread is free and hands it to the pool; the
loop ticks again at once while there is work. It waits when the pool is full
(a finishing task wakes it) or nothing is ready (a task made ready in this
process, or on PostgreSQL in any process, wakes it; a retry whose delay just
ended wakes nobody, so it is found within ``idle_wait_s``). Any number of
copies may run: leases are taken with SKIP LOCKED. Each call's short lease
is renewed while it runs (``runner.run_leased``). On stop, running calls
finish (each is bounded by NODE_FLOW_SYSTEM_TASK_CALL_SECONDS) before the
role exits.

A task held by its definition's controls is tried again the moment a slot
or permit it waits for is freed, in any process (``notify.system_freed``
wakes the role), or when its rate window ends. Each tick records the role's
poll and thread count (``diagnostics.record_system_poll``, every few
seconds), from which ``blockedBy`` tells a task waiting for a free thread
(``runnerCapacity``) from one no runner looks at (``noPollers``).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connection

from executions import breakers, dispatch, notify
from executions.models import Task
from executions.roles.loop import Role
from executions.system_tasks import runner
from quotas import diagnostics
from quotas import metrics as quota_metrics

log = logging.getLogger(__name__)


class SystemTaskRole(Role):
    name = "systemtasks"
    idle_wait_s = 0.5

    def __init__(self, stop: threading.Event | None = None, *, threads: int | None = None) -> None:
        super().__init__(stop)
        self.threads = max(threads or settings.NODE_FLOW_SYSTEM_TASK_THREADS, 1)
        self.worker = runner.worker_id(self.name)
        self.free = threading.BoundedSemaphore(self.threads)
        self.pool: ThreadPoolExecutor | None = None
        self.full_counted = False  # runnerCapacity counted for this spell of a full pool

    def on_start(self) -> None:
        notify.hub.attach(notify.SYSTEM_KEY, self.wake)
        notify.ensure_listener(notify.SYSTEM_CHANNEL)

    def tick(self) -> bool:
        breakers.report_if_due()
        diagnostics.record_system_poll(worker_id=self.worker, threads=self.threads)
        if not self.free.acquire(blocking=False):
            self._count_full()
            return False  # every thread is busy; the next to finish wakes the loop
        self.full_counted = False
        try:
            leased = dispatch.lease_system_tasks(worker_id=self.worker, count=1)
        except BaseException:
            # e.g. the database is restarting: the slot must not be lost with
            # the tick, or a few failed ticks would leave the role no thread.
            self.free.release()
            raise
        if not leased:
            self.free.release()
            return False
        self._pool().submit(self._run, leased[0])
        return True

    def run(self) -> None:
        try:
            super().run()
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True)

    def _count_full(self) -> None:
        """No free thread while system tasks are ready: counted once per spell
        as a refusal by ``runnerCapacity`` (the metrics' control label)."""
        if not self.full_counted and dispatch.system_tasks_ready():
            self.full_counted = True
            quota_metrics.record_refusal("runnerCapacity")

    def run_once(self, *, budget_s: float | None = None) -> int:
        """Run every ready system task in this thread, one after another
        (``--once`` and tests: nothing is left running on return), until
        none is left or ``budget_s`` has passed."""
        diagnostics.record_system_poll(worker_id=self.worker, threads=self.threads)
        give_up = None if budget_s is None else time.monotonic() + budget_s
        count = 0
        while (give_up is None or time.monotonic() < give_up) and runner.run_next(worker=self.worker):
            count += 1
        breakers.report_if_due()
        return count

    def _pool(self) -> ThreadPoolExecutor:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix=self.name)
        return self.pool

    def _run(self, task: Task) -> None:
        try:
            runner.run_leased(task)
        except Exception:
            log.exception("system task %s failed to run", task.id)
        finally:
            connection.close()  # this pool thread's own connection
            self.free.release()
            self.wake.set()
