"""Hands ready system tasks to Celery workers (when CELERY_BROKER_URL is set).

A message carries one task id and means "run this task if it is still
ready": the worker leases it (``runner.run_task``), so the database decides
and a duplicate message does nothing. Messages are sent after the commit
that made tasks ready: that commit wakes ``notify.SYSTEM_KEY`` in its
process, and the hook installed here sends one message per system task that
became ready since FRESH_S ago (or will be, after a retry delay: such a
message is delayed until then), each once per process.

A task that its definition's controls hold back is not left to the
recovery sweep: the worker that found it held by a used-up rate window
sends it again for when the window ends (``runner.run_task``), and the
commit that frees a slot or permits it waits for sends the waiting tasks
that may now go, as many as their gates allow (``send_freed``, a
``notify.system_freed`` hook; not deduplicated, since the task's earlier
message was spent on the refusal).

Nothing depends on a message arriving. A lost message, a killed worker, a
task released by resume: the beat task ``nodeflow.recover_system_tasks``
re-sends tasks that have been ready for RECOVER_AFTER_S, and an expired
lease makes the task ready again.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid

from celery.signals import celeryd_after_setup
from django.conf import settings

from executions import notify
from executions.models import Task, TaskStatus
from metadata.models import TaskDefinition
from nodeflow import clock
from quotas.gate import open_gate

log = logging.getLogger(__name__)

RUN_TASK = "nodeflow.run_system_task"
# A task that became ready this recently counts as "just made ready".
FRESH_S = 2.0
# Ready this long without being leased: its message may be lost; send again.
RECOVER_AFTER_S = 5.0
# Within one process, the same task is not re-sent sooner than this.
RESEND_AFTER_S = 30.0
BATCH = 500
LISTENER_THREAD_PREFIX = "nodeflow-listener"  # executions.notify's LISTEN threads

_sent: dict[tuple[uuid.UUID, dt.datetime], float] = {}
_sent_lock = threading.Lock()


class _Hook:
    """Attached to the notify hub like a waiting Event: ``set`` is called
    after each commit that made a system task ready."""

    def set(self) -> None:
        if _in_listener():
            return
        try:
            send_fresh()
        except Exception:
            log.warning("could not hand new system tasks to Celery; the recovery sweep will", exc_info=True)


HOOK = _Hook()


def install() -> None:
    """Send messages after commits in this process (if Celery is configured)."""
    if settings.CELERY_BROKER_URL:
        notify.hub.attach(notify.SYSTEM_KEY, HOOK)
        notify.on_system_freed(send_freed)


def uninstall() -> None:
    notify.hub.unregister(notify.SYSTEM_KEY, HOOK)
    notify.remove_system_freed(send_freed)


def _in_listener() -> bool:
    # Relayed by LISTEN from another process, whose own hooks send its
    # messages (and this thread must not hold a connection).
    return threading.current_thread().name.startswith(LISTENER_THREAD_PREFIX)


def _waiting():
    return Task.objects.filter(kind="system", status=TaskStatus.SCHEDULED, held=False)


def send_fresh() -> int:
    """Messages for the system tasks that just became ready (or will be)."""
    since = clock.now() - dt.timedelta(seconds=FRESH_S)
    rows = _waiting().filter(available_at__gte=since).order_by("available_at").values_list("id", "available_at")
    return _send(list(rows[:BATCH]))


def send_overdue() -> int:
    """Messages for tasks ready a while and still not leased (recovery)."""
    before = clock.now() - dt.timedelta(seconds=RECOVER_AFTER_S)
    rows = _waiting().filter(available_at__lte=before).order_by("-priority", "available_at")
    return _send(list(rows.values_list("id", "available_at")[:BATCH]))


def send_freed(namespace_id: int, name: str | None, semaphores: tuple[str, ...]) -> None:
    """After a commit of this process freed a slot of the task definition
    ``name`` or permits of ``semaphores``: a message for each waiting system
    task that may go now (of that definition, or of any naming those
    semaphores), as many per definition as its gate allows."""
    if _in_listener():
        return
    try:
        waiting = _waiting().filter(
            namespace_id=namespace_id,
            task_def_name__in=_sharing(namespace_id, name, semaphores),
            available_at__lte=clock.now(),
        )
        by_definition: dict[str, list[uuid.UUID]] = {}
        for task_id, definition in waiting.order_by("-priority", "available_at").values_list("id", "task_def_name")[
            :BATCH
        ]:
            by_definition.setdefault(definition, []).append(task_id)
        for definition, ids in by_definition.items():
            allowance = open_gate(namespace_id=namespace_id, queue=definition, want=len(ids), lock=False).allowance
            for task_id in ids[:allowance]:
                _publish(str(task_id), countdown=None)
    except Exception:
        log.warning("could not hand freed system tasks to Celery; the recovery sweep will", exc_info=True)


def _sharing(namespace_id: int, name: str | None, semaphores: tuple[str, ...]) -> set[str]:
    """``name`` and the task definitions naming any of ``semaphores``."""
    names = {name} if name else set()
    if semaphores:
        wanted = set(semaphores)
        rows = TaskDefinition.objects.filter(namespace_id=namespace_id).values_list("name", "semaphores")
        names |= {definition for definition, named in rows if wanted & set(named or ())}
    return names


def send_later(task_id: uuid.UUID | str, after_s: float) -> None:
    """A message for a task offered again later (IN_PROGRESS with a callback)."""
    _publish(str(task_id), countdown=after_s)


def _send(rows: list[tuple[uuid.UUID, dt.datetime]]) -> int:
    now = clock.now()
    sent = 0
    for task_id, available_at in _not_sent_lately(rows):
        delay = (available_at - now).total_seconds()
        _publish(str(task_id), countdown=delay if delay > 0 else None)
        sent += 1
    return sent


def _not_sent_lately(rows: list[tuple[uuid.UUID, dt.datetime]]) -> list[tuple[uuid.UUID, dt.datetime]]:
    now = time.monotonic()
    with _sent_lock:
        for key, at in list(_sent.items()):
            if now - at > RESEND_AFTER_S:
                del _sent[key]
        fresh = [row for row in rows if row not in _sent]
        _sent.update(dict.fromkeys(fresh, now))
    return fresh


def _publish(task_id: str, *, countdown: float | None) -> None:
    from nodeflow.celery import app

    # retry=False: a broker that is down fails this send at once rather than
    # holding up the request that committed (the recovery sweep re-sends).
    app.send_task(RUN_TASK, args=[task_id], countdown=countdown, retry=False)


# --- the worker's pool ----------------------------------------------------------
# How many system tasks this Celery worker process runs at once, for the
# runner's recorded polls (blockedBy runnerCapacity): the pool's concurrency
# for a pool of threads (one process), 1 for each process of a prefork pool.
_pool_size: int | None = None


@celeryd_after_setup.connect(weak=False)
def _note_pool_size(sender, instance, **kwargs) -> None:
    global _pool_size
    module = getattr(instance.pool_cls, "__module__", "") or ""
    _pool_size = 1 if module.endswith((".prefork", ".solo")) else int(instance.concurrency or 1)


def pool_size() -> int:
    return _pool_size or 1
