"""What the operator pages show, read from the same services as the API.

The execution page is the execution view (``executions.serializers``, with
each task's ``blockedBy`` from ``executions.blocked``) plus the graph laid
out from the baked snapshot; the controls page is the diagnostics behind
``…/queues``, ``…/queues/workers``, ``…/semaphores`` and ``…/breakers``,
with each queue's gate as the dequeue path sees it. Nothing here writes.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from console import graph
from executions import breakers, executor
from executions.models import Execution, Task
from executions.pagination import paginate
from executions.serializers import execution_view
from nodeflow import clock
from nodeflow.models import Namespace
from quotas import diagnostics, namespace_quotas, rate_limits, semaphores
from quotas.gate import open_gate
from quotas.serializers import holder_view

# A running execution's page fetches itself again this often.
REFRESH_S = 2


# --- the executions list -----------------------------------------------------


def list_executions(*, filters: dict, cursor: str | None, limit: int) -> tuple[list[Execution], str | None]:
    """One page, newest first, of the executions matching ``filters`` (the
    filter form's cleaned data); raises InvalidField for a foreign cursor."""
    return paginate(_filtered(filters), cursor=cursor, limit=limit)


def _filtered(filters: dict) -> QuerySet:
    rows = Execution.objects.select_related("namespace")
    exact = {"namespace": "namespace__name", "name": "name", "status": "status", "correlation_id": "correlation_id"}
    for field, column in exact.items():
        if filters.get(field):
            rows = rows.filter(**{column: filters[field]})
    if filters.get("since"):
        rows = rows.filter(created_at__gte=filters["since"])
    if filters.get("until"):
        rows = rows.filter(created_at__lt=filters["until"])
    return rows


# --- one execution -------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    task: Task
    view: dict  # the execution view's task entry: blockedBy, reasonForIncompletion, …
    waited: dt.timedelta | None  # scheduled → started
    ran: dt.timedelta | None  # started → ended (or now, while running)


@dataclass(frozen=True)
class LogicalTask:
    path: str
    ref: str
    type: str
    attempts: list[Attempt]

    @property
    def latest(self) -> Attempt:
        return self.attempts[-1]


def find_execution(execution_id: str) -> Execution | None:
    try:
        pk = uuid.UUID(execution_id)
    except ValueError:
        return None
    return Execution.objects.select_related("namespace", "parent_execution").filter(pk=pk).first()


def execution_page(execution: Execution) -> dict:
    now = clock.now()
    tasks = list(Task.objects.filter(execution_id=execution.id, run=execution.run).order_by("seq"))
    view = execution_view(execution, tasks=tasks)
    return {
        "execution": execution,
        "view": view,
        "graph": graph.layout(executor.workflow_of(execution), view["tasks"], path_prefix=execution.path_prefix),
        "tasks": logical_tasks(tasks, view["tasks"], now=now),
        "children": list(Execution.objects.filter(parent_execution_id=execution.id).order_by("created_at")[:200]),
        "refresh_s": REFRESH_S if execution.active else None,
        "now": now,
    }


def logical_tasks(tasks: list[Task], views: list[dict], *, now: dt.datetime) -> list[LogicalTask]:
    """Attempts grouped by path, in the order each path was first scheduled."""
    grouped: dict[str, LogicalTask] = {}
    for task, view in zip(tasks, views, strict=True):
        entry = grouped.setdefault(task.path, LogicalTask(task.path, task.ref, task.type, []))
        entry.attempts.append(Attempt(task, view, *_timings(task, now)))
    return list(grouped.values())


def _timings(task: Task, now: dt.datetime) -> tuple[dt.timedelta | None, dt.timedelta | None]:
    if task.started_at is None:
        return None, None
    return task.started_at - task.scheduled_at, (task.ended_at or now) - task.started_at


# --- controls of one namespace -----------------------------------------------------


def find_namespace(name: str) -> Namespace | None:
    return Namespace.objects.filter(name=name).first()


def first_namespace() -> Namespace | None:
    return Namespace.objects.order_by("name").first()


def namespace_names() -> list[str]:
    return list(Namespace.objects.order_by("name").values_list("name", flat=True))


@dataclass(frozen=True)
class QueuePage:
    rows: list[dict]
    total: int  # queues matching the filter, on every page
    page: int
    pages: int


def controls_page(
    namespace: Namespace, *, name: str = "", held: bool = False, page: int = 1, per_page: int = 50
) -> dict[str, Any]:
    now = clock.now()
    queues = queue_page(namespace, now, name=name, held=held, page=page, per_page=per_page)
    return {
        "namespace": namespace,
        "queues": queues.rows,
        "queue_page": queues,
        "workers": diagnostics.workers(namespace_id=namespace.id),
        "semaphores": semaphore_rows(namespace),
        "starts": starts_window(namespace, now),
        "quotas": namespace_quotas.get_quotas(namespace=namespace),
        "breakers": breakers.listed(namespace.id),
        "now": now,
    }


def queue_page(
    namespace: Namespace, now: dt.datetime, *, name: str = "", held: bool = False, page: int = 1, per_page: int = 50
) -> QueuePage:
    """One page of the queues whose name contains ``name`` (any case), only
    those a control holds back if ``held``. Only the rows shown (or, for
    ``held``, the rows filtered) have their gate looked at."""
    uses = [use for use in diagnostics.queues(namespace_id=namespace.id) if name.lower() in use.task_type.lower()]
    held_rows: list[dict] = []
    if held:
        held_rows = [row for row in (queue_row(namespace, use, now) for use in uses) if row["blocker"] is not None]
    total = len(held_rows) if held else len(uses)
    pages = max(1, -(-total // per_page))
    page = min(page, pages)
    window = slice((page - 1) * per_page, page * per_page)
    rows = held_rows[window] if held else [queue_row(namespace, use, now) for use in uses[window]]
    return QueuePage(rows=rows, total=total, page=page, pages=pages)


def queue_row(namespace: Namespace, use: diagnostics.QueueUse, now: dt.datetime) -> dict:
    """A queue's depth and tasks in flight, and its gate looked at (not
    taken) as the next poll would: every control's limit and use, and the
    one that lets nothing through."""
    gate = open_gate(namespace_id=namespace.id, queue=use.task_type, want=1, now=now, lock=False)
    return {
        "use": use,
        "rooms": [room.blocker for room in gate.rooms],
        "blocker": gate.blocker,
        "rate": next((room.blocker for room in gate.rooms if room.window_start is not None), None),
        "last_poll": diagnostics.last_poll(namespace_id=namespace.id, queue=use.task_type),
    }


def semaphore_rows(namespace: Namespace) -> list[dict]:
    rows = []
    for use in semaphores.list_semaphores(namespace=namespace):
        holders = semaphores.live_holders(semaphores.get_semaphore(namespace=namespace, name=use.name))
        rows.append({"use": use, "holders": [holder_view(holder) for holder in holders]})
    return rows


def starts_window(namespace: Namespace, now: dt.datetime) -> dict:
    """The namespace's starts in the current minute (``maxExecutionsPerMinute``)."""
    start = rate_limits.window_start(now, rate_limits.STARTS_WINDOW_S)
    used = rate_limits.used_in(namespace_id=namespace.id, key=rate_limits.STARTS_KEY, start=start)
    return {"used": used, "until": rate_limits.window_end(start, rate_limits.STARTS_WINDOW_S)}
