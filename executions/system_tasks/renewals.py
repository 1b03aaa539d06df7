"""Renews the leases of the system-task calls a process is running.

A runner leases a system task for a short while
(``NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS``, or the policy's shorter timeout)
and holds it only as long as it keeps renewing: one thread per process
renews each running call's lease every third of its length, through the
heartbeat a worker sends (``results.heartbeat`` → ``attempts.renew``), until
the call returns. So a runner killed mid-call stops renewing, its lease
lapses within its length, and the sweeper offers the attempt again
(docs/reliability.md, "Recovery after a kill").

A renewal refused (the lease lapsed, or the task was canceled or
re-delivered meanwhile) marks the call's lease lost and is not tried again;
the call's own report is then refused as well (409), as any stale report is.
A renewal that fails (the database is away) is tried again at the next turn:
the lease holds as long as one gets through before it lapses.

The runner (``runner.run_leased``) keeps every call's lease here, for the
role's pool and for Celery's ``run_task`` alike. The thread runs only while
a call is held and closes its connection when it stops.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connection

from executions import dispatch, results
from executions.models import Task
from nodeflow import clock
from nodeflow.errors import Conflict, NotFound
from nodeflow.models import Namespace
from nodeflow.stale_connections import close_dead_connections

log = logging.getLogger(__name__)

# Renewals per lease length: two in a row may fail before the lease lapses.
RENEWALS_PER_LEASE = 3
# The thread looks at least this often, whatever it was told (seconds).
MAX_WAIT_S = 1.0


@dataclass
class Held:
    """One running call's lease, as its keeper knows it."""

    task_id: uuid.UUID
    lease_token: str
    namespace: Namespace
    every_s: float
    due: dt.datetime  # clock.now() at which it is renewed next
    renewals: int = 0
    lost: bool = False


class LeaseKeeper:
    """The leases of this process's running calls. ``renew_due`` is one turn
    of the work; the thread (``background``) repeats it while a call is held."""

    def __init__(self, *, background: bool = True) -> None:
        self.background = background
        self._lock = threading.Lock()
        self._held: dict[uuid.UUID, Held] = {}
        self._changed = threading.Event()
        self._thread: threading.Thread | None = None

    @contextmanager
    def keep(self, task: Task, namespace: Namespace) -> Iterator[Held]:
        """Renew ``task``'s lease (its token as leased) until the block ends."""
        every_s = dispatch.system_lease_seconds(task.lease_seconds) / RENEWALS_PER_LEASE
        leased_at = task.started_at or clock.now()
        held = Held(task.id, task.lease_token, namespace, every_s, leased_at + dt.timedelta(seconds=every_s))
        with self._lock:
            self._held[task.id] = held
            if self.background and self._thread is None:
                self._thread = threading.Thread(target=self._run, name="system-task-leases", daemon=True)
                self._thread.start()
        self._changed.set()
        try:
            yield held
        finally:
            with self._lock:
                self._held.pop(task.id, None)
            self._changed.set()

    def renew_due(self) -> float:
        """Renew each held lease whose renewal is due now; the seconds until
        the next one is due (inf when none is held)."""
        now = clock.now()
        with self._lock:
            due = [held for held in self._held.values() if not held.lost and held.due <= now]
        if due:
            close_dead_connections()  # e.g. after a database restart: reconnect instead of failing a renewal
        for held in due:
            self._renew(held)
        with self._lock:
            upcoming = [held.due for held in self._held.values() if not held.lost]
        return max((min(upcoming) - clock.now()).total_seconds(), 0.0) if upcoming else math.inf

    def _renew(self, held: Held) -> None:
        try:
            results.heartbeat(namespace=held.namespace, task_id=held.task_id, lease_token=held.lease_token)
        except (Conflict, NotFound) as refused:
            held.lost = True
            log.info("system task %s: lease lost, not renewed: %s", held.task_id, refused)
            return
        except Exception:
            log.exception("system task %s: renewing its lease failed", held.task_id)
            connection.close()
        else:
            held.renewals += 1
        held.due = clock.now() + dt.timedelta(seconds=held.every_s)

    def _run(self) -> None:
        try:
            while True:
                self._changed.clear()  # before looking: a change from now on ends the wait
                wait_s = self.renew_due()
                with self._lock:
                    if not self._held:
                        self._thread = None
                        return
                self._changed.wait(min(wait_s, MAX_WAIT_S))
        finally:
            connection.close()  # this thread's own connection
