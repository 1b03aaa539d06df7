"""Dispatch: long-polls of worker queues, and the system-task runner's
leases across every namespace.

The leases themselves are taken by ``executions.attempts`` (the owner of
task rows), through the gate of each task's definition: a poll asks it,
and when nothing may be leased waits for a wake-up (a task ready, a slot or
permits freed, a new rate window) and asks again. For system tasks this
module also remembers which (namespace, definition) groups a control holds
back, so that they are tried first once freed and not hot while held; the
gate decides every lease. Results and heartbeats must present the current,
unexpired lease (fenced by token and time): see ``executions.results``.
See docs/controls.md and docs/engine.md.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from executions import attempts, notify
from executions.leases import capped_seconds, new_token
from executions.models import Task, TaskStatus
from nodeflow import clock, metrics
from nodeflow.models import Namespace
from quotas import controls, diagnostics
from quotas import metrics as quota_metrics

# Long-polls re-check the queue at least this often even without a wake-up
# (tasks whose retry delay ends do not notify).
LISTEN_RECHECK_S = 1.0
# Without LISTEN/NOTIFY (SQLite, across processes) the re-check is the wake-up.
POLL_RECHECK_S = 0.05
# A poll that a sync match claimed waits at most this long for the claiming
# transaction to end (it holds no lock the poll needs; its tasks are the poll's).
SETTLE_WAIT_S = 10.0


def poll(*, namespace: Namespace, queue: str, worker_id: str, count: int, wait_s: float) -> list[Task]:
    """Lease at once if anything may be leased; otherwise wait up to
    ``wait_s`` for a wake-up (a task ready, a slot or a permit freed, a new
    rate window) and try again."""
    diagnostics.record_poll(namespace_id=namespace.id, queue=queue, worker_id=worker_id)
    held_back: set[str] = set()  # controls counted for this poll: once each, not per re-check

    def look(park: str = "", leave: str = "") -> attempts.Lease:
        lease = attempts.lease_queue(namespace.id, queue, worker_id, count, park=park, leave=leave)
        metrics.record_dispatch(lease.tasks)
        _count_held_back(lease, held_back, namespace.id)
        return lease

    if wait_s <= 0:
        return metrics.polled(namespace.id, queue, look().tasks)
    queue_key = notify.queue_key(namespace.id, queue)
    keys = {queue_key}
    give_up = time.monotonic() + wait_s
    # Registered before looking, so a wake-up between the look and the wait
    # is not lost. A ready task wakes one parked poller (notify.Parked); a
    # freed slot or permit, every poller waiting on its key.
    event = notify.parked.waiter()
    ask = _Ask(namespace.id, queue, worker_id, count)
    poller = notify.parked.begin(queue_key, time.time() + wait_s, event, ask)
    try:
        # After begin: a listener that stopped listening (no pollers) starts again.
        listens = notify.ensure_listener()
        recheck = LISTEN_RECHECK_S if listens else POLL_RECHECK_S
        while True:
            event.clear()
            for key in keys:
                notify.hub.attach(key, event)
            park, leave = notify.parked.notices(poller)
            epoch = notify.parked.epoch(queue_key)
            known_empty = 0.0  # for how long a look would find nothing, as far as this process knows
            if not (park or leave) and (not listens or notify.hears_ready()):
                known_empty = notify.parked.known_empty(queue_key, recheck)
            lease = attempts.Lease([]) if known_empty else _look(queue_key, epoch, count, look, park, leave)
            remaining = give_up - time.monotonic()
            if lease.tasks or remaining <= 0:
                return metrics.polled(namespace.id, queue, lease.tasks)
            if not park:  # no other process to tell (or it is listed already): listed here
                late = notify.parked.park(poller, epoch)
                if late:  # another process began to listen meanwhile: tell it after all
                    notify.announce(late)
            event.wait(min(remaining, known_empty or recheck, _next_window_in(lease)))
            handed = notify.parked.unpark(poller, SETTLE_WAIT_S)
            if handed:  # a sync match: leased for this poll in the transaction that made them ready
                return metrics.polled(namespace.id, queue, handed)
            if lease.gate is not None:
                # Permits freed by other queues sharing a semaphore wake this one too.
                keys |= {notify.semaphore_key(namespace.id, name) for name in lease.gate.controls.semaphores}
    finally:
        for key in keys:
            notify.hub.unregister(key, event)
        notify.parked.end(poller)


def _look(
    queue_key: str, epoch: notify.Epoch, count: int, look: Callable[[str, str], attempts.Lease], park: str, leave: str
) -> attempts.Lease:
    """A long-poll's look (``epoch`` read before it); one of a queue
    without controls that leases fewer tasks than asked marks it empty
    (``notify.Parked.known_empty``)."""
    looked_at = time.monotonic()
    lease = look(park, leave)
    if len(lease.tasks) < count and (lease.gate is None or not lease.gate.controls.any):
        notify.parked.saw_empty(queue_key, epoch, looked_at)
    return lease


@dataclass(frozen=True)
class _Ask:
    """What a parked poll asks for, as a sync match leases it."""

    namespace_id: int
    queue: str
    worker_id: str
    count: int


def _matchable(ask: _Ask) -> bool:
    """A sync match leases only for queues without controls (as far as this
    process has seen): a controlled queue's lease takes its gate's locks,
    which the poll's own transaction takes, not a start's or a result's."""
    return not controls.is_controlled(ask.namespace_id, ask.queue)


def _lease_matched(ask: _Ask) -> list[Task]:
    """Lease for a parked poll in the transaction that made its queue's tasks
    ready (``notify.on_sync_match``): the poll's own lease, by the one
    statement that leases nothing if the queue has controls after all."""
    tasks = attempts.lease_queue(ask.namespace_id, ask.queue, ask.worker_id, ask.count, gated=False).tasks
    metrics.record_dispatch(tasks)
    return tasks


notify.on_sync_match(_matchable, _lease_matched)


def _count_held_back(lease: attempts.Lease, counted: set[str], namespace_id: int) -> None:
    blocker = lease.gate.blocker if lease.gate is not None else None
    if blocker is not None and blocker.control not in counted:
        counted.add(blocker.control)
        quota_metrics.record_refusal(blocker.control, namespace_id)


def _next_window_in(lease: attempts.Lease) -> float:
    """Seconds until a rate window that is used up gives way to a new one."""
    retry_at = lease.gate.retry_at if lease.gate is not None else None
    if retry_at is None:
        return math.inf
    return max(0.0, (retry_at - clock.now()).total_seconds()) + 0.001


# --- system tasks -------------------------------------------------------------
# The system-task runner (executions.system_tasks.runner) leases like a worker,
# across every namespace, and through the same gate: a system task's controls
# are those of the task definition it names (``task_def_name``), shared with
# SIMPLE tasks of that name. On PostgreSQL one statement leases the ready
# system tasks whose definitions have no controls and names the (namespace,
# definition) groups of those that have; each group is then leased through
# its gate (``attempts.lease_gated``, from ``_lease_groups``). On SQLite every group goes through its gate.
# The lease is short (NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS, a few seconds) and
# the runner renews it while the call runs (executions.system_tasks.renewals):
# a runner that dies mid-call is noticed within it even when the policy's
# startToCloseTimeout is an hour, and the attempt is offered again. How long
# a call may take is bounded apart (NODE_FLOW_SYSTEM_TASK_CALL_SECONDS).

# A group whose gate let nothing through is tried again after this long at
# the latest, sooner when its rate window ends or a freed notice names it.
HOLD_RECHECK_S = 1.0

Group = attempts.Group


def system_lease_seconds(task_lease_s: float) -> float:
    return capped_seconds(task_lease_s, attempts.system_cap_s())


def lease_system_tasks(*, worker_id: str, count: int = 1, task_id=None) -> list[Task]:
    """Lease up to ``count`` ready system tasks of any namespace, each no
    more than its task definition's controls allow; with ``task_id``, that
    task only (if it is ready and its gate lets it through). Groups this
    process saw held by a control come first, unless still held, so a
    stream of uncontrolled tasks never starves them."""
    if task_id is not None:
        return lease_system_task(task_id, worker_id=worker_id).tasks
    token = new_token()
    tried = _groups.due()
    leased = _lease_groups(tried, worker_id, count, token)
    if len(leased) < count:
        found, named = attempts.lease_ungated_system(worker_id, count - len(leased), token, clock.now())
        leased += found
        _groups.saw(named)
        leased += _lease_groups(
            _groups.due(among=[g for g in named if g not in tried]), worker_id, count - len(leased), token
        )
    metrics.record_dispatch(leased)
    return leased


def system_tasks_ready() -> bool:
    """Whether a system task of any namespace is ready now."""
    return Task.objects.filter(
        kind="system", status=TaskStatus.SCHEDULED, held=False, available_at__lte=clock.now()
    ).exists()


def lease_system_task(task_id, *, worker_id: str) -> attempts.Lease:
    """Lease the system task ``task_id`` if it is ready and its gate lets it
    through (a Celery message names it). The gate, if it was asked, says why not."""
    token = new_token()
    task_id = uuid.UUID(str(task_id))
    found, named = attempts.lease_ungated_system(worker_id, 1, token, clock.now(), task_id=task_id)
    lease = attempts.Lease(found)
    if not found and named:
        lease = attempts.lease_gated(attempts.Pick(*named[0], system=True, task_id=task_id), worker_id, 1, token)
        _count_held_back(lease, set(), named[0][0])
    metrics.record_dispatch(lease.tasks)
    return lease


def _lease_groups(groups: list[Group], worker_id: str, count: int, token: str) -> list[Task]:
    leased: list[Task] = []
    for group in groups:
        if len(leased) >= count:
            break
        lease = attempts.lease_gated(attempts.Pick(*group, system=True), worker_id, count - len(leased), token)
        _groups.after(group, lease)
        leased += lease.tasks
    return leased


@dataclass(frozen=True)
class _Hold:
    recheck_at: float  # time.monotonic(): try the gate again by then in any case
    retry_at: dt.datetime | None  # a used-up rate window's end
    semaphores: tuple[str, ...]  # freed permits of these let it through too

    def lapsed(self, now_s: float, now: dt.datetime) -> bool:
        return now_s >= self.recheck_at or (self.retry_at is not None and now >= self.retry_at)


class _SystemGroups:
    """What this process knows of the ready system tasks one statement
    cannot lease: the groups whose definitions have controls (on SQLite,
    every group) as the last look named them, and those whose gate let
    nothing through, until when. It only chooses which gates to try, and in
    what order; every lease is decided by the gate under its lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[Group, _Hold | None] = {}

    def due(self, among: list[Group] | None = None) -> list[Group]:
        """The known groups (of ``among``) not held, in the order last named."""
        now_s, now = time.monotonic(), clock.now()
        with self._lock:
            if among is None:
                return [g for g, hold in self._known.items() if hold is None or hold.lapsed(now_s, now)]
            return [g for g in among if (hold := self._known.get(g)) is None or hold.lapsed(now_s, now)]

    def saw(self, groups: list[Group]) -> None:
        """A look named these groups: they are the ones known now."""
        with self._lock:
            self._known = {group: self._known.get(group) for group in groups}

    def after(self, group: Group, lease: attempts.Lease) -> None:
        """What ``group``'s gate did: held everything back (counted once per
        hold as a refusal of the control), or leased the last ready task."""
        gate = lease.gate
        if gate is None:
            raise ValueError("a group's lease goes through its gate (attempts.lease_gated)")
        blocker, refused = gate.blocker, None
        with self._lock:
            if not lease.tasks and blocker is not None:
                if self._known.get(group) is None:
                    refused = blocker  # newly held
                self._known[group] = _Hold(time.monotonic() + HOLD_RECHECK_S, gate.retry_at, gate.controls.semaphores)
            elif len(lease.tasks) < gate.allowance:
                self._known.pop(group, None)  # none left: until a look names it again
            else:
                self._known[group] = None
        if refused is not None:
            quota_metrics.record_refusal(refused.control, group[0])

    def freed(self, namespace_id: int, name: str | None, semaphores: tuple[str, ...]) -> None:
        """A slot of ``name`` or permits of ``semaphores`` were freed
        (``notify.system_freed``, from any process): the groups that may
        now go through are tried at the next lease."""
        freed = set(semaphores)
        with self._lock:
            for (ns, definition), hold in self._known.items():
                if hold is not None and ns == namespace_id and (definition == name or freed & set(hold.semaphores)):
                    self._known[(ns, definition)] = None

    def forget(self) -> None:
        with self._lock:
            self._known.clear()


_groups = _SystemGroups()
notify.on_system_freed(_groups.freed)
controls.on_forget(_groups.forget)  # a definition changed: its holds may no longer apply
