"""The gate at dequeue: how many tasks of a task definition may be leased now.

A gate is keyed by (namespace, task definition name): the name a worker
queue has, and the one a system task carries in ``task_def_name`` (its
queue is "@TYPE", shared by every definition). So a SIMPLE task and an HTTP
task naming one definition share its cap, its rate window and its
semaphores; ``queue`` below always means that name.

The allowance is the minimum over the definition's controls:
``concurrentExecLimit`` minus its worker and system tasks in flight, the
rate window's tokens left, and each configured semaphore's free permits
(all or nothing: a task takes every semaphore it names or none).
``open_gate`` takes the name's lock (and the semaphores' rows) so that the
count and the lease after it are one step for every poller and runner of
every process; ``charge`` books what was leased before the transaction
commits and the locks go; ``task_left`` releases what a task held when it
leaves IN_PROGRESS, by whatever path, and wakes whoever waits for it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from executions import notify
from executions.models import Task, TaskStatus
from nodeflow import clock
from quotas import locks, rate_limits, semaphores
from quotas.controls import Controls, cached_controls, read_controls

# The kinds of task that are leased, and so pass the gate.
DISPATCHED = ("worker", "system")


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
    """Worker and system tasks of the definition ``queue`` IN_PROGRESS
    (the index task_in_flight)."""
    return Task.objects.filter(
        namespace_id=namespace_id, task_def_name=queue, status=TaskStatus.IN_PROGRESS, kind__in=DISPATCHED
    ).count()


def open_gate(*, namespace_id: int, queue: str, want: int, now: dt.datetime | None = None, lock: bool = True) -> Gate:
    """How many of ``want`` tasks of the task definition ``queue`` may be
    leased now. With ``lock`` (dequeue) the caller's transaction holds the
    name, and the semaphores it names, until it commits; without it
    (diagnostics) this only looks. ``now`` defaults to the clock once the
    locks are held."""
    if lock:
        locks.lock_name(locks.queue_lock(namespace_id, queue))
    # A look (diagnostics) takes the short hint cache; a task-definition
    # change clears it in the process that made it (metadata.taskdefs).
    controls = (
        read_controls(namespace_id=namespace_id, name=queue)
        if lock
        else cached_controls(namespace_id=namespace_id, name=queue)
    )
    configured = (
        semaphores.configured(namespace_id=namespace_id, names=controls.semaphores, lock=lock)
        if controls.semaphores
        else []
    )
    now = now or clock.now()
    # Counted by statements after the locks, so they see the last holder's commit.
    rooms = (
        *_cap_room(namespace_id, queue, controls),
        *_rate_room(namespace_id, queue, controls, now),
        *_semaphore_rooms(configured, now),
    )
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
    return [
        Room(controls.rate_limit - used, Blocker("rateLimit", controls.rate_limit, used, until), window_start=start)
    ]


def _semaphore_rooms(configured: list[tuple[int, str, int]], now: dt.datetime) -> list[Room]:
    if not configured:
        return []
    held = semaphores.held_counts([pk for pk, _, _ in configured], now)
    return [
        Room(permits - held.get(pk, 0), Blocker(f"semaphore:{name}", permits, held.get(pk, 0)), semaphore_id=pk)
        for pk, name, permits in configured
    ]


def task_left(task: Task) -> None:
    """``task``, a worker or system task, left IN_PROGRESS by whatever path
    (a result, a put-back, a timeout, a re-delivery, a cancel), in the
    caller's transaction. Its permits go with it, and when this commits
    whoever waits for its slot or permits is woken: the long-polls of its
    definition and, when system tasks wait, the system-task role of every
    process (and under Celery their messages are sent). Reads the task's
    ``id``, ``namespace_id``, ``kind`` and ``task_def_name``; the controls
    come from a short cache. Other kinds hold nothing and are ignored."""
    if task.kind not in DISPATCHED or not task.task_def_name:
        return
    namespace_id, name = task.namespace_id, task.task_def_name
    controls = cached_controls(namespace_id=namespace_id, name=name)
    if controls.semaphores:
        semaphores.release_task(task_id=task.id)
    capped = bool(controls.concurrent_exec_limit)
    notify.task_freed(namespace_id, name, capped=capped, semaphores=controls.semaphores)
    if (capped or controls.semaphores) and _system_tasks_wait(namespace_id, name, controls):
        notify.system_freed(namespace_id, name, controls.semaphores)


def _system_tasks_wait(namespace_id: int, name: str, controls: Controls) -> bool:
    """Whether ready system tasks may be waiting for what a task of ``name``
    freed: its own definition's (a slot), or any of the namespace's when it
    held permits (other definitions may name those semaphores). Looked at
    once per transaction: a batch of results frees one key once."""
    if not notify.first_in_transaction(f"system-waits:{namespace_id}:{name}"):
        return False
    ready = Task.objects.filter(
        namespace_id=namespace_id, kind="system", status=TaskStatus.SCHEDULED, held=False, available_at__lte=clock.now()
    )
    if not controls.semaphores:
        ready = ready.filter(task_def_name=name)
    return ready.exists()


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
