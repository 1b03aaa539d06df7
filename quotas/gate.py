"""The gate at dequeue: how many tasks of a queue may be leased now.

The allowance is the minimum over the queue's controls: ``concurrentExecLimit``
minus the tasks in flight, the rate window's tokens left, and each
configured semaphore's free permits (all or nothing: a task takes every
semaphore it names or none). ``open_gate`` takes the queue's lock (and the
semaphores' rows) so that the count and the lease after it are one step
for every poller of every process; ``charge`` books what was leased before
the transaction commits and the locks go.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from executions import notify
from executions.models import Task, TaskStatus
from nodeflow import clock
from quotas import locks, rate_limits, semaphores
from quotas.controls import Controls, cached_controls, read_controls


@dataclass(frozen=True)
class Blocker:
    """The control that lets nothing through, with its limit and use."""

    control: str  # concurrentExecLimit, rateLimit, semaphore:<name>
    limit: int
    current: int
    until: dt.datetime | None = None


@dataclass(frozen=True)
class Room:
    """What one control leaves free, and how it reads when there is none."""

    free: int
    blocker: Blocker
    window_start: float | None = None  # a rate window
    semaphore_id: int | None = None


@dataclass(frozen=True)
class Gate:
    controls: Controls
    allowance: int
    now: dt.datetime  # read after the locks: the instant the lease happens
    rooms: tuple[Room, ...] = ()

    @property
    def blocker(self) -> Blocker | None:
        """The first control with no room (cap, rate, semaphores in name order)."""
        return next((room.blocker for room in self.rooms if room.free <= 0), None)

    @property
    def retry_at(self) -> dt.datetime | None:
        """When more may be allowed without any task finishing: a used-up
        rate window's end."""
        return next((r.blocker.until for r in self.rooms if r.window_start is not None and r.free <= 0), None)


def in_flight(*, namespace_id: int, queue: str) -> int:
    return Task.objects.filter(namespace_id=namespace_id, queue=queue, status=TaskStatus.IN_PROGRESS).count()


def open_gate(*, namespace_id: int, queue: str, want: int, now: dt.datetime | None = None, lock: bool = True) -> Gate:
    """How many of ``want`` tasks may be leased now. With ``lock`` (dequeue)
    the caller's transaction holds the queue, and the semaphores it names,
    until it commits; without it (diagnostics) this only looks. ``now``
    defaults to the clock once the locks are held."""
    if lock:
        locks.lock_name(locks.queue_lock(namespace_id, queue))
    # A look (diagnostics) takes the short hint cache; a task-definition
    # change clears it in the process that made it (metadata.taskdefs).
    controls = read_controls(namespace_id=namespace_id, queue=queue) if lock else cached_controls(namespace_id=namespace_id, queue=queue)
    configured = semaphores.configured(namespace_id=namespace_id, names=controls.semaphores, lock=lock) if controls.semaphores else []
    now = now or clock.now()
    # Counted by statements after the locks, so they see the last holder's commit.
    rooms = (*_cap_room(namespace_id, queue, controls), *_rate_room(namespace_id, queue, controls, now),
             *_semaphore_rooms(configured, now))
    return Gate(controls, max(0, min([want, *(room.free for room in rooms)])), now, rooms)


def _cap_room(namespace_id: int, queue: str, controls: Controls) -> list[Room]:
    cap = controls.concurrent_exec_limit
    if not cap:
        return []
    flying = in_flight(namespace_id=namespace_id, queue=queue)
    return [Room(cap - flying, Blocker("concurrentExecLimit", cap, flying))]


def _rate_room(namespace_id: int, queue: str, controls: Controls, now: dt.datetime) -> list[Room]:
    if not controls.rate_limited:
        return []
    start = rate_limits.window_start(now, controls.rate_window_s)
    used = rate_limits.used_in(namespace_id=namespace_id, key=queue, start=start)
    until = rate_limits.window_end(start, controls.rate_window_s)
    return [Room(controls.rate_limit - used, Blocker("rateLimit", controls.rate_limit, used, until), window_start=start)]


def _semaphore_rooms(configured: list[tuple[int, str, int]], now: dt.datetime) -> list[Room]:
    if not configured:
        return []
    held = semaphores.held_counts([pk for pk, _, _ in configured], now)
    return [Room(permits - held.get(pk, 0), Blocker(f"semaphore:{name}", permits, held.get(pk, 0)), semaphore_id=pk)
            for pk, name, permits in configured]


def task_left(*, namespace_id: int, queue: str | None, task_id) -> None:
    """A worker task left IN_PROGRESS (in the caller's transaction): its
    permits go with it, and pollers waiting for its slot or permits are
    woken when this commits. The queue's controls come from a short cache."""
    if not queue:
        return
    controls = cached_controls(namespace_id=namespace_id, queue=queue)
    if controls.semaphores:
        semaphores.release_task(task_id=task_id)
    notify.task_freed(namespace_id, queue, capped=bool(controls.concurrent_exec_limit), semaphores=controls.semaphores)


def charge(gate: Gate, *, namespace_id: int, queue: str, tasks: list[Task], worker_id: str, now: dt.datetime) -> None:
    """Book the leased tasks against the rate window and the semaphores."""
    if not tasks:
        return
    for room in gate.rooms:
        if room.window_start is not None:
            rate_limits.spend(namespace_id=namespace_id, key=queue, start=room.window_start, count=len(tasks))
    held = tuple(room.semaphore_id for room in gate.rooms if room.semaphore_id is not None)
    if held:
        semaphores.hold(semaphore_ids=held, tasks=tasks, worker_id=worker_id, now=now)
