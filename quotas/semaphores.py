"""Named semaphores: set, read, delete; take permits at dequeue; release a
holder by hand; sweep holders that no longer count.

A permit is a lease. The holder row written when a task is leased counts
only while that task is IN_PROGRESS and its lease has not expired, so a
finished task frees its permits in the same commit as its result, and a
crashed worker's permits free themselves when its lease runs out. The
sweeper then deletes holders that stopped counting (tidiness, not safety).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Count

from executions import notify
from executions.models import Task, TaskStatus
from nodeflow import clock, named_rows, transactions
from nodeflow.errors import NotFound
from nodeflow.models import Namespace
from quotas.models import Semaphore, SemaphoreHolder

# A holder younger than this is never swept: its lease may be committing now.
SWEEP_GRACE_S = 30.0
SWEEP_BATCH = 1000


@dataclass(frozen=True)
class SemaphoreUse:
    id: int
    name: str
    permits: int
    held: int


def _live(now: dt.datetime):
    """Holders that count: their task is in flight on an unexpired lease."""
    return SemaphoreHolder.objects.filter(task__status=TaskStatus.IN_PROGRESS, task__lease_expires_at__gt=now)


def held_counts(semaphore_ids: list[int], now: dt.datetime) -> dict[int, int]:
    rows = _live(now).filter(semaphore_id__in=semaphore_ids).values("semaphore_id").annotate(n=Count("id"))
    return {row["semaphore_id"]: row["n"] for row in rows}


def configured(*, namespace_id: int, names: tuple[str, ...], lock: bool) -> list[tuple[int, str, int]]:
    """(id, name, permits) of the configured semaphores among ``names``. With
    ``lock``, their rows stay locked until the transaction ends, taken in
    name order (two queues sharing semaphores never deadlock); a locked
    row's permits are read as the last writer committed them."""
    rows = Semaphore.objects.filter(namespace_id=namespace_id, name__in=names).order_by("name")
    return list((rows.select_for_update() if lock else rows).values_list("id", "name", "permits"))


def release_task(*, task_id) -> None:
    """A task left IN_PROGRESS: delete its holders now. They stopped counting
    already; deleting them keeps the count at dequeue short."""
    SemaphoreHolder.objects.filter(task_id=task_id).delete()


def hold(*, semaphore_ids: tuple[int, ...], tasks: list[Task], worker_id: str, now: dt.datetime) -> None:
    """Record that each leased task holds every semaphore (all or nothing:
    the caller leased only as many as every semaphore had room for)."""
    SemaphoreHolder.objects.bulk_create(
        [
            SemaphoreHolder(semaphore_id=sid, task_id=task.id, worker_id=worker_id, acquired_at=now)
            for sid in semaphore_ids
            for task in tasks
        ],
        update_conflicts=True,
        unique_fields=["semaphore", "task"],
        update_fields=["worker_id", "acquired_at"],
    )


# --- services for the API and the admin --------------------------------------


def set_semaphore(*, namespace: Namespace, name: str, permits: int) -> tuple[Semaphore, bool]:
    """Create or change a semaphore; (row, created). More permits wake the
    queues waiting on it."""
    with transactions.outermost():
        created = named_rows.put(
            Semaphore, namespace=namespace, name=name, values={"permits": permits}, now=clock.now()
        )
        notify.semaphore_freed(namespace.id, name)
    return get_semaphore(namespace=namespace, name=name), created


def get_semaphore(*, namespace: Namespace, name: str) -> Semaphore:
    found = Semaphore.objects.filter(namespace=namespace, name=name).first()
    if found is None:
        raise NotFound(f"semaphore '{name}' does not exist")
    return found


def delete_semaphore(*, namespace: Namespace, name: str) -> None:
    """Deleting a semaphore un-gates every task that names it."""
    with transactions.outermost():
        deleted, _ = Semaphore.objects.filter(namespace=namespace, name=name).delete()
        if not deleted:
            raise NotFound(f"semaphore '{name}' does not exist")
        notify.semaphore_freed(namespace.id, name)


def list_semaphores(*, namespace: Namespace) -> list[SemaphoreUse]:
    rows = list(Semaphore.objects.filter(namespace=namespace).order_by("name").values_list("id", "name", "permits"))
    held = held_counts([pk for pk, _, _ in rows], clock.now())
    return [SemaphoreUse(pk, name, permits, held.get(pk, 0)) for pk, name, permits in rows]


def live_holders(semaphore: Semaphore) -> list[SemaphoreHolder]:
    return list(_live(clock.now()).filter(semaphore=semaphore).select_related("task").order_by("acquired_at"))


def release_holder(*, holder_id: int) -> bool:
    """Free a permit by hand (the admin action), e.g. for a task an operator
    knows is dead before its lease says so. The task itself carries on."""
    with transactions.outermost():
        holder = SemaphoreHolder.objects.select_related("semaphore").filter(pk=holder_id).first()
        if holder is None:
            return False
        SemaphoreHolder.objects.filter(pk=holder_id).delete()
        notify.semaphore_freed(holder.semaphore.namespace_id, holder.semaphore.name)
        return True


def sweep_stale_holders(*, now: dt.datetime | None = None) -> int:
    """Delete holders that no longer count. The grace period keeps a holder
    that a concurrent lease is refreshing (its ``acquired_at`` moves on) out
    of the delete, which re-checks that column on the row it would remove."""
    now = now or clock.now()
    stale = SemaphoreHolder.objects.filter(acquired_at__lt=now - dt.timedelta(seconds=SWEEP_GRACE_S)).exclude(
        task__status=TaskStatus.IN_PROGRESS, task__lease_expires_at__gt=now
    )
    ids = list(stale.values_list("id", flat=True)[:SWEEP_BATCH])
    if not ids:
        return 0
    deleted, _ = SemaphoreHolder.objects.filter(
        pk__in=ids, acquired_at__lt=now - dt.timedelta(seconds=SWEEP_GRACE_S)
    ).delete()
    return deleted
