"""Prometheus metrics: what records them, and ``GET /metrics`` (docs/metrics.md).

Two kinds, each right however many processes serve the deployment:

- Events (counters and the dispatch-latency histogram) are counted by the
  process that did the counted thing, in prometheus_client's multi-process
  files under ``PROMETHEUS_MULTIPROC_DIR`` (the settings give every
  deployment a directory under var/). A scrape of any process sums every
  process's files, dead processes' included, so totals never go back. They
  move only when the transaction that did the counted thing commits
  (``transaction.on_commit``): a decision rolled back and made again is
  counted once. Refusals (``quotas.metrics``) are counted at once: the
  refused transaction rolls back, the refusal stands.
- States (queue depth, tasks in flight, semaphore permits, breakers, the
  decider's and the sweeper's lag) are facts of the database, read by
  ``DatabaseCollector`` at scrape time, whichever process serves it.

Recorders are called on the hot path with rows already in hand: no query,
a few microseconds each.
"""

from __future__ import annotations

import bisect
import collections
import datetime as dt
import functools
import glob
import hmac
import logging
import os
import platform
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol, overload

import django
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from nodeflow import clock

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from executions.decider.decision import Decision
    from executions.models import Execution, Task


log = logging.getLogger(__name__)

OPEN = frozenset({"SCHEDULED", "IN_PROGRESS"})
ENDED = frozenset(
    {"COMPLETED", "COMPLETED_WITH_ERRORS", "FAILED", "FAILED_WITH_TERMINAL_ERROR", "TIMED_OUT", "CANCELED", "SKIPPED"}
)
# The statuses a task attempt is counted ending in (COMPLETED_WITH_ERRORS
# relabels an attempt already counted FAILED) and a workflow ends in.
TASK_END_STATUSES = ("COMPLETED", "FAILED", "FAILED_WITH_TERMINAL_ERROR", "TIMED_OUT", "CANCELED", "SKIPPED")
WORKFLOW_END_STATUSES = ("COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED")
POLL_OUTCOMES = ("tasks", "empty")
CONFLICT_ROUTES = ("result", "heartbeat")
CONFLICT_REASONS = ("canceled", "ended", "lease_expired", "lease_lost")
TIMEOUT_CLASSES = ("workflow", "scheduleToStart", "startToClose", "heartbeat", "total")
TIMEOUT_POLICIES = ("RETRY", "TIME_OUT_WF", "ALERT_ONLY")
FIXED_CONTROLS = (
    "maxConcurrentExecutions",
    "quota:maxConcurrentExecutions",
    "quota:maxExecutionsPerMinute",
    "quota:maxWorkflowDefinitions",
    "quota:maxSchedules",
    "concurrentExecLimit",
    "rateLimit",
)
# From a long-poll's wake-up (milliseconds) to a backlog drained an hour late.
DISPATCH_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
# A worker's attempt: an inline step (ms) to a long batch job (a day).
TASK_EXECUTION_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400)
# A run: a few steps (a fraction of a second) to one that waits for a week.
WORKFLOW_DURATION_BUCKETS_S = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400, 604800)
# An API answer; a long poll holds its request up to its waitSeconds (≤ 60 s).
HTTP_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

# Events carry the namespace's id as "#<id>" (no query on the hot path; a
# namespace name cannot hold "#", a URL fragment mark); scrapes show its name.
NAMESPACE_ID_MARK = "#"

TASK_RETRIES = Counter(
    "nodeflow_task_retries", "Retries scheduled (attempts after the first), by task name.", ["namespace", "task_type"]
)
RETRY_BUDGET_REFUSALS = Counter(
    "nodeflow_retry_budget_refusals",
    "Failures not retried because the task definition's retry budget was spent.",
    ["namespace", "task_type"],
)
TIMEOUTS = Counter(
    "nodeflow_timeouts",
    "Timeouts that fired, by class (workflow, scheduleToStart, startToClose, heartbeat, total) and policy.",
    ["namespace", "timeout", "policy"],
)
TASKS_ENDED = Counter(
    "nodeflow_tasks_ended",
    "Task attempts that ended, by task type and the status they ended in.",
    ["namespace", "task_type", "status"],
)
DISPATCH_LATENCY = Histogram(
    "nodeflow_dispatch_latency_seconds",
    "From when a task became available (scheduled, retry delay over, put back) to its lease.",
    ["namespace", "task_type"],
    buckets=DISPATCH_BUCKETS_S,
)
TASK_EXECUTION = Histogram(
    "nodeflow_task_execution_seconds",
    "Task attempts that ended after they started: from startedAt to their end, by the status they ended in.",
    ["namespace", "task_type", "status"],
    buckets=TASK_EXECUTION_BUCKETS_S,
)
WORKFLOWS_STARTED = Counter(
    "nodeflow_workflows_started",
    "Executions created (roots and SUB_WORKFLOW children), by workflow name.",
    ["namespace", "workflow"],
)
WORKFLOWS_ENDED = Counter(
    "nodeflow_workflows_ended",
    "Executions that ended, by workflow name and terminal status.",
    ["namespace", "workflow", "status"],
)
WORKFLOW_DURATION = Histogram(
    "nodeflow_workflow_duration_seconds",
    "Executions that ended: from startedAt to endedAt, by workflow name and terminal status.",
    ["namespace", "workflow", "status"],
    buckets=WORKFLOW_DURATION_BUCKETS_S,
)
POLLS = Counter(
    "nodeflow_polls",
    "Worker polls answered, by queue and outcome (tasks: at least one task leased; empty: none).",
    ["namespace", "queue", "outcome"],
)
CONFLICTS = Counter(
    "nodeflow_task_conflicts",
    "Results and heartbeats answered 409, by route kind and reason.",
    ["namespace", "route", "reason"],
)
HTTP_REQUESTS = Counter(
    "nodeflow_http_requests",
    "HTTP requests answered, by route pattern, method and status.",
    ["namespace", "route", "method", "status_class", "code"],
)
HTTP_DURATION = Histogram(
    "nodeflow_http_request_duration_seconds",
    "Time to answer an HTTP request, by route pattern and method.",
    ["namespace", "route", "method"],
    buckets=HTTP_BUCKETS_S,
)


class TaskLike(Protocol):
    """A task row or the decider's Row: enough to name its type."""

    kind: str
    type: str
    task_def_name: str


class LeasedTask(TaskLike, Protocol):
    namespace_id: int
    available_at: dt.datetime | None
    started_at: dt.datetime | None


def task_type(task: TaskLike) -> str:
    """The ``task_type`` label: a SIMPLE task's definition name, else the
    task's type (HTTP, SWITCH, WAIT…), so the label set stays bounded."""
    return task.task_def_name if task.kind == "worker" else task.type


def ns(namespace_id: int | None) -> str:
    """The ``namespace`` label an event is recorded with ("" when none)."""
    return f"{NAMESPACE_ID_MARK}{namespace_id}" if namespace_id is not None else ""


@overload
def _child(metric: Counter, labels: tuple[str, ...]) -> Counter: ...
@overload
def _child(metric: Histogram, labels: tuple[str, ...]) -> Histogram: ...


@functools.lru_cache(maxsize=10_000)
def _child(metric: Counter | Histogram, labels: tuple[str, ...]) -> Counter | Histogram:
    # labels() validates and locks on every call; the hot path reuses children.
    return metric.labels(*labels)


# (metric, labels, amount): a counter's increment or a histogram's observation.
Increments = list[tuple[Counter | Histogram, tuple[str, ...], float]]


class _Pending:
    """The increments a transaction has recorded so far, written when it commits."""

    def __init__(self, increments: Increments) -> None:
        self.increments = increments

    def __call__(self) -> None:
        _increment(self.increments)


def _after_commit(increments: Increments) -> None:
    """Write ``increments`` once the transaction commits. Those recorded in
    the same transaction and savepoint, with no other commit hook between,
    join one hook, so a batch of results writes each series once (a batch of
    100 executions' ends wrote 300 values one by one); a savepoint rolled back
    still drops only its own."""
    if not increments:
        return
    hooks = connection.run_on_commit
    if connection.in_atomic_block and hooks:
        savepoints, hook, _robust = hooks[-1]
        if isinstance(hook, _Pending) and savepoints == set(connection.savepoint_ids):
            hook.increments.extend(increments)
            return
    transaction.on_commit(_Pending(increments))


def _increment(increments: Increments) -> None:
    # After the commit: a failure here is logged, never the request's.
    # A series' increments are summed and its observations written together:
    # every write of a value takes a lock and a write to the process's
    # memory-mapped file, and a batch of 100 results wrote 500 one by one.
    try:
        counted: dict[tuple[Counter, tuple[str, ...]], float] = {}
        observed: dict[tuple[Histogram, tuple[str, ...]], list[float]] = {}
        for metric, labels, amount in increments:
            if isinstance(metric, Histogram):
                observed.setdefault((metric, labels), []).append(max(0.0, amount))
            else:
                counted[metric, labels] = counted.get((metric, labels), 0.0) + amount
        for (counter, labels), total in counted.items():
            _child(counter, labels).inc(total)
        for (histogram, labels), amounts in observed.items():
            observe_all(_child(histogram, labels), amounts)
    except Exception:  # metrics must never fail the work they count
        log.exception("metrics: could not record")


def observe_all(child: Histogram, amounts: list[float]) -> None:
    """``child.observe`` of each of ``amounts``, with each bucket and the
    sum written once. The buckets and sum are kept as ``Histogram.observe``
    keeps them in the pinned prometheus-client (an amount counts in the first
    bucket whose bound is not below it); tests/test_metrics.py holds the two
    equal, so a release that keeps them otherwise fails there."""
    if len(amounts) == 1:
        child.observe(amounts[0])
        return
    buckets = collections.Counter(bisect.bisect_left(child._upper_bounds, amount) for amount in amounts)
    child._sum.inc(sum(amounts))
    for index, count in buckets.items():
        child._buckets[index].inc(count)


def _seconds(start: dt.datetime | None, end: dt.datetime | None) -> float | None:
    return (end - start).total_seconds() if start is not None and end is not None else None


def _ended(namespace: str, task: TaskLike, status: str, end: dt.datetime | None, count: float = 1.0) -> Increments:
    """A task attempt's end: the counter, and its execution time if it started."""
    labels = (namespace, task_type(task), status)
    increments: Increments = [(TASKS_ENDED, labels, count)]
    seconds = _seconds(getattr(task, "started_at", None), end or clock.now())
    if seconds is not None:
        increments += [(TASK_EXECUTION, labels, seconds)] * int(count)
    return increments


# --- recorders (called by the services) --------------------------------------


def record_decision(decision: Decision, execution: Execution) -> None:
    """Count a decision's retries, budget refusals and the attempts it ended
    (created ended, or moved from open to ended), once it commits. A row
    that ended before (a worker's FAILED) and is only relabelled now (an
    optional task's COMPLETED_WITH_ERRORS) was counted when it ended."""
    namespace = ns(execution.namespace_id)
    increments: Increments = [(TASK_RETRIES, (namespace, name), 1.0) for name in decision.retries]
    increments += [(RETRY_BUDGET_REFUSALS, (namespace, name), 1.0) for name in decision.budget_refusals]
    ended = [row for row in decision.created if row.status in ENDED]
    ended += [row for row in decision.updated if row.status in ENDED and row.read_status in OPEN]
    for row in ended:
        increments += _ended(namespace, row, row.status, row.ended_at)
    _after_commit(increments)


def record_task_end(task: TaskLike, status: str | None, count: int = 1) -> None:
    """Count ``count`` attempts of ``task``'s type ended in ``status`` once
    it commits; a status that is not an end (a put-back) counts nothing."""
    if status in ENDED and count:
        _after_commit(_ended(ns(getattr(task, "namespace_id", None)), task, status, task_end(task), float(count)))


def task_end(task: TaskLike) -> dt.datetime | None:
    return getattr(task, "ended_at", None)


def record_task_ends(ends: Iterable[tuple[TaskLike, str | None]]) -> None:
    """``record_task_end`` for many (task, status) pairs: a batch of results
    registers one commit hook, not one per task."""
    increments: Increments = []
    for task, status in ends:
        if status in ENDED:
            increments += _ended(ns(getattr(task, "namespace_id", None)), task, status, task_end(task))
    _after_commit(increments)


def record_type_end(type_: str, status: str, count: int = 1, *, task_id: object = None) -> None:
    """``record_task_end`` for a caller that knows only the task's type (and
    id: a WAIT or a webhook's task, whose namespace and start are read by
    primary key; never on the worker path)."""
    if status not in ENDED or not count:
        return
    from executions.models import Task

    found = Task.objects.filter(pk=task_id).values_list("namespace_id", "started_at").first() if task_id else None
    namespace_id, started_at = found or (None, None)
    labels = (ns(namespace_id), type_, status)
    increments: Increments = [(TASKS_ENDED, labels, float(count))]
    seconds = _seconds(started_at, clock.now())
    if seconds is not None:
        increments.append((TASK_EXECUTION, labels, seconds))
    _after_commit(increments)


def record_canceled(tasks: QuerySet) -> None:
    """Count the open tasks of ``tasks`` that are about to be canceled (one
    query: terminate and the workflow timeout only, never the hot path)."""
    now = clock.now()
    increments: Increments = []
    for namespace_id, kind, type_, name, started_at in tasks.values_list(
        "namespace_id", "kind", "type", "task_def_name", "started_at"
    ):
        labels = (ns(namespace_id), name if kind == "worker" else type_, "CANCELED")
        increments.append((TASKS_ENDED, labels, 1.0))
        if started_at is not None:
            increments.append((TASK_EXECUTION, labels, (now - started_at).total_seconds()))
    _after_commit(increments)


def record_dispatch(tasks: Iterable[LeasedTask]) -> None:
    """Observe the dispatch latency of leased rows, from the rows the
    dequeue returned (``started_at`` is the lease's instant)."""
    _after_commit(
        [
            (DISPATCH_LATENCY, (ns(task.namespace_id), task_type(task)), seconds)
            for task in tasks
            if (seconds := _seconds(task.available_at, task.started_at)) is not None
        ]
    )


def polled[T](namespace_id: int, queue: str, tasks: list[T]) -> list[T]:
    """Count a worker poll's answer (``tasks`` leased, or none) and return it."""
    _after_commit([(POLLS, (ns(namespace_id), queue, "tasks" if tasks else "empty"), 1.0)])
    return tasks


def record_timeout(timeout: str, policy: str, namespace_id: int | None = None) -> None:
    """Count a timeout that fired (ALERT_ONLY ones included) once it commits."""
    _after_commit([(TIMEOUTS, (ns(namespace_id), timeout, policy), 1.0)])


def record_workflow_start(execution: Execution) -> None:
    """Count a new execution once it commits."""
    _after_commit([(WORKFLOWS_STARTED, (ns(execution.namespace_id), execution.name), 1.0)])


def record_workflow_end(execution: Execution, status: str) -> None:
    """Count an execution's end and observe its duration once it commits."""
    labels = (ns(execution.namespace_id), execution.name, status)
    increments: Increments = [(WORKFLOWS_ENDED, labels, 1.0)]
    # Only columns already read: a deferred one would cost a query here.
    loaded = execution.__dict__
    seconds = _seconds(loaded.get("started_at"), loaded.get("ended_at") or clock.now())
    if seconds is not None:
        increments.append((WORKFLOW_DURATION, labels, seconds))
    _after_commit(increments)


def conflict(task: Task, lease_token: str | None, route: str) -> None:
    """Count a result or heartbeat refused with 409, at once (the refused
    transaction rolls back; the refusal stands). The reason, from the row."""
    if task.status == "CANCELED":
        reason = "canceled"
    elif task.status != "IN_PROGRESS":
        reason = "ended"
    elif lease_token is not None and task.lease_token == lease_token:
        reason = "lease_expired"
    else:
        reason = "lease_lost"
    try:
        _child(CONFLICTS, (ns(task.namespace_id), route, reason)).inc()
    except Exception:  # metrics must never fail the work they count
        log.exception("metrics: could not record")


def record_http(namespace: str, route: str, method: str, status: int, seconds: float) -> None:
    """Count an answered HTTP request (at once: the answer was given)."""
    code = str(status)
    _child(HTTP_REQUESTS, (namespace, route, method, f"{code[0]}xx", code)).inc()
    _child(HTTP_DURATION, (namespace, route, method)).observe(max(0.0, seconds))


# --- state read from the database at scrape time -----------------------------


def _gauge(
    name: str, documentation: str, labels: list[str], samples: Iterable[tuple[tuple[str, ...], float]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for label_values, value in samples:
        family.add_metric(list(label_values), value)
    return family


def _lag(oldest: dt.datetime | None, now: dt.datetime) -> float:
    return max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0


def _queue_label(queue: str) -> str:
    # System tasks queue as "@HTTP": their task_type label is the type.
    return queue[1:] if queue.startswith("@") else queue


class DatabaseCollector:
    """Gauges computed from committed rows at each scrape: the same answer
    whichever process is asked. About eight small queries, each on an index."""

    def collect(self) -> Iterator[Metric]:
        try:
            families = list(self._families(clock.now()))
        except DatabaseError:
            log.warning("metrics: could not read the database", exc_info=True)
            families = []
        yield from families
        yield _gauge(
            "nodeflow_database_up",
            "1 when this scrape could read the state gauges from the database.",
            [],
            [((), 1.0 if families else 0.0)],
        )

    def _families(self, now: dt.datetime) -> Iterator[Metric]:
        # Imported here: this module loads with the URLconf, and models must
        # not be imported before the app registry is ready.
        from nodeflow.models import Namespace

        names = dict(Namespace.objects.values_list("id", "name"))
        yield from self._running(names)
        yield from self._queues(names)
        yield from self._semaphores(names, now)
        yield from self._breakers(names, now)
        yield from self._lags(now)

    def _running(self, names: dict[int, str]) -> Iterator[Metric]:
        from executions.models import Execution, ExecutionStatus
        from metadata.models import WorkflowDefinition

        rows = Execution.objects.filter(status=ExecutionStatus.RUNNING)
        grouped = rows.values_list("namespace_id", "name", "awaiting_admission").annotate(n=Count("id"))
        # Every defined workflow, zeros included, so dashboards show 0 rather than no data.
        defined = dict.fromkeys(WorkflowDefinition.objects.values_list("namespace_id", "name"), 0.0)
        running, waiting = dict(defined), dict(defined)
        for ns_id, name, held, n in grouped:
            (waiting if held else running)[(ns_id, name)] = float(n)
        for gauge, what, counts in (
            ("nodeflow_executions_running", "Executions RUNNING now (not PAUSED, not waiting for admission)", running),
            ("nodeflow_executions_awaiting_admission", "Executions held in line by a control on starts", waiting),
        ):
            yield _gauge(
                gauge,
                f"{what}, by workflow name.",
                ["namespace", "workflow"],
                [((names.get(ns_id, str(ns_id)), name), n) for (ns_id, name), n in sorted(counts.items())],
            )

    def _queues(self, names: dict[int, str]) -> Iterator[Metric]:
        from executions.models import Task, TaskStatus

        def by_queue(**where) -> list[tuple[tuple[str, str], float]]:
            rows = Task.objects.filter(queue__isnull=False, **where).values_list("namespace_id", "queue")
            return [((names.get(ns, str(ns)), _queue_label(q)), float(n)) for ns, q, n in rows.annotate(n=Count("id"))]

        labels = ["namespace", "task_type"]
        yield _gauge(
            "nodeflow_queue_depth",
            "Tasks waiting in a queue: SCHEDULED and not held (ready, or waiting for a retry delay or a control).",
            labels,
            by_queue(status=TaskStatus.SCHEDULED, held=False),
        )
        yield _gauge(
            "nodeflow_queue_in_flight",
            "Tasks of a queue leased and not yet reported (IN_PROGRESS).",
            labels,
            by_queue(status=TaskStatus.IN_PROGRESS),
        )

    def _semaphores(self, names: dict[int, str], now: dt.datetime) -> Iterator[Metric]:
        from quotas.models import Semaphore
        from quotas.semaphores import held_counts

        configured = list(Semaphore.objects.values_list("id", "namespace_id", "name", "permits"))
        held = held_counts([pk for pk, _, _, _ in configured], now) if configured else {}
        labels = ["namespace", "semaphore"]
        yield _gauge(
            "nodeflow_semaphore_permits",
            "Permits a semaphore is configured with.",
            labels,
            [((names.get(ns, str(ns)), name), float(permits)) for _, ns, name, permits in configured],
        )
        yield _gauge(
            "nodeflow_semaphore_permits_held",
            "Permits held by tasks in flight on unexpired leases.",
            labels,
            [((names.get(ns, str(ns)), name), float(held.get(pk, 0))) for pk, ns, name, _ in configured],
        )

    def _breakers(self, names: dict[int, str], now: dt.datetime) -> Iterator[Metric]:
        from executions.breakers import CLOSED, HALF_OPEN, LISTED_FOR_S
        from executions.breakers import OPEN as BREAKER_OPEN
        from executions.models import BreakerState

        recent = BreakerState.objects.filter(updated_at__gte=now - dt.timedelta(seconds=LISTED_FOR_S))
        counts = {
            (ns, key, state): n
            for ns, key, state, n in recent.values_list("namespace_id", "key", "state").annotate(n=Count("id"))
        }
        # Every state of every key, zeros included, so "== 0" alerts work.
        keys = sorted({(ns, key) for ns, key, _ in counts})
        yield _gauge(
            "nodeflow_breakers",
            "Processes whose circuit breaker for a key is in a state (as last reported, within the last five minutes).",
            ["namespace", "key", "state"],
            [
                ((names.get(ns, str(ns)), key, state), float(counts.get((ns, key, state), 0)))
                for ns, key in keys
                for state in (CLOSED, BREAKER_OPEN, HALF_OPEN)
            ],
        )

    def _lags(self, now: dt.datetime) -> Iterator[Metric]:
        from executions.models import DecideRequest, Task, TaskStatus, Timer

        def due(rows, column: str) -> tuple[float, float]:
            found = rows.filter(**{f"{column}__lte": now}).aggregate(oldest=Min(column), n=Count("pk"))
            return _lag(found["oldest"], now), float(found["n"])

        for lag_name, count_name, what, (lag, n) in (
            ("decider", "decide_requests_due", "decide requests", due(DecideRequest.objects.all(), "due_at")),
            ("timer", "timers_due", "timers", due(Timer.objects.all(), "due_at")),
            (
                "lease_expiry",
                "leases_expired",
                "expired leases",
                due(Task.objects.filter(status=TaskStatus.IN_PROGRESS), "lease_expires_at"),
            ),
        ):
            yield _gauge(
                f"nodeflow_{lag_name}_lag_seconds",
                f"How overdue the oldest of the due {what} is (0: none).",
                [],
                [((), lag)],
            )
            yield _gauge(f"nodeflow_{count_name}", f"How many {what} are due and not yet handled.", [], [((), n)])


# --- events as scraped: namespace names, and zeros for what has not happened --


# The counters whose known label sets are served as 0 before their first
# event: family → (help, label names, which label sets). Counters only: a
# histogram's buckets would need zeros too and would double a scrape's size.
def _zero_sets(catalog: Catalog) -> Iterator[tuple[str, str, tuple[str, ...], list[tuple[str, ...]]]]:
    spaces = sorted(catalog.names.values())
    task_defs: list[tuple[str, ...]] = [(n, t) for n in spaces for t in catalog.task_defs.get(n, ())]
    workflows: list[tuple[str, ...]] = [(n, w) for n in spaces for w in catalog.workflows.get(n, ())]
    families: list[tuple[Counter, list[tuple[str, ...]]]] = [
        (TASKS_ENDED, [(n, t, s) for n, t in task_defs for s in TASK_END_STATUSES]),
        (TASK_RETRIES, task_defs),
        (RETRY_BUDGET_REFUSALS, task_defs),
        (TIMEOUTS, [(n, c, p) for n in spaces for c in TIMEOUT_CLASSES for p in TIMEOUT_POLICIES]),
        (WORKFLOWS_STARTED, workflows),
        (WORKFLOWS_ENDED, [(n, w, s) for n, w in workflows for s in WORKFLOW_END_STATUSES]),
        (POLLS, [(n, t, o) for n, t in task_defs for o in POLL_OUTCOMES]),
        (CONFLICTS, [(n, r, why) for n in spaces for r in CONFLICT_ROUTES for why in CONFLICT_REASONS]),
    ]
    for metric, label_sets in families:
        (family,) = metric.describe()
        yield family.name, family.documentation, tuple(metric._labelnames), label_sets
    # quotas.metrics is not imported here: it sits below this module.
    yield (
        "nodeflow_limit_refusals",
        "Starts and registrations refused (429) and dequeues held back, by the control that refused them.",
        ("namespace", "control"),
        [(n, c) for n in spaces for c in FIXED_CONTROLS],
    )


class Catalog:
    """What exists at scrape time: namespace names by id, and each
    namespace's workflow and task definition names (three queries)."""

    def __init__(self, names: dict[int, str], workflows: dict[str, list[str]], task_defs: dict[str, list[str]]):
        self.names, self.workflows, self.task_defs = names, workflows, task_defs

    @classmethod
    def read(cls) -> Catalog:
        from metadata.models import TaskDefinition, WorkflowDefinition
        from nodeflow.models import Namespace

        names = dict(Namespace.objects.values_list("id", "name"))

        def by_namespace(model) -> dict[str, list[str]]:
            found: dict[str, list[str]] = {}
            for ns_id, name in model.objects.order_by("name").values_list("namespace_id", "name"):
                found.setdefault(names.get(ns_id, str(ns_id)), []).append(name)
            return found

        return cls(names, by_namespace(WorkflowDefinition), by_namespace(TaskDefinition))

    def namespace(self, label: str) -> str:
        """An event's ``namespace`` label ("#<id>") as the namespace's name
        (a namespace deleted since: its id)."""
        if not label.startswith(NAMESPACE_ID_MARK):
            return label
        raw = label[len(NAMESPACE_ID_MARK) :]
        return self.names.get(int(raw), raw) if raw.isdigit() else raw


class EventsCollector:
    """The event metrics of ``source`` (every process's files, or this
    process's registry) with namespace names for ids, and zero samples for
    the known label sets that have no count yet. The zeros are made here,
    at scrape time, not written to any process's file: sums across
    processes and targets stay right."""

    def __init__(self, source) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        try:
            catalog = Catalog.read()
        except DatabaseError:
            log.warning("metrics: could not read the namespaces", exc_info=True)
            catalog = Catalog({}, {}, {})
        families = {family.name: _renamed(family, catalog) for family in self.source.collect()}
        for name, documentation, labelnames, label_sets in _zero_sets(catalog):
            family = families.setdefault(name, Metric(name, documentation, "counter"))
            present = {tuple(s.labels.get(label, "") for label in labelnames) for s in family.samples}
            for label_values in label_sets:
                if label_values not in present:
                    # Labels in name order, as the multi-process files give them.
                    family.add_sample(f"{name}_total", dict(sorted(zip(labelnames, label_values, strict=True))), 0.0)
        yield from families.values()


def _renamed(family: Metric, catalog: Catalog) -> Metric:
    """``family`` with namespace names; samples that come to share labels
    (a namespace's files under two ids) summed."""
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for sample in family.samples:
        labels = dict(sample.labels)
        if "namespace" in labels:
            labels["namespace"] = catalog.namespace(labels["namespace"])
        key = (sample.name, tuple(labels.items()))
        merged[key] = merged.get(key, 0.0) + sample.value
    renamed = Metric(family.name, family.documentation, family.type)
    for (name, pairs), value in merged.items():
        renamed.add_sample(name, dict(pairs), value)
    return renamed


class ServingProcess:
    """This process's CPU, memory and file descriptors (prometheus_client's
    process collector), labelled with its pid: in multi-process mode the
    default registry, which holds that collector, is not what is served."""

    def __init__(self) -> None:
        self.pid = str(os.getpid())

    def collect(self) -> Iterator[Metric]:
        for family in ProcessCollector(registry=None).collect():
            labelled = Metric(family.name, family.documentation, family.type)
            for sample in family.samples:
                labelled.add_sample(sample.name, {**sample.labels, "pid": self.pid}, sample.value)
            yield labelled


class BuildInfo:
    """``nodeflow_build_info``: 1, labelled with what is running."""

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "nodeflow_build_info",
            "Always 1: the Node Flow (API) version, Python, Django and database this process runs.",
            labels=["version", "python", "django", "database"],
        )
        family.add_metric([_version(), platform.python_version(), django.get_version(), connection.vendor], 1.0)
        yield family


def _version() -> str:
    return str(settings.SPECTACULAR_SETTINGS.get("VERSION", ""))


# --- GET /metrics -------------------------------------------------------------


class ProcessFiles(MultiProcessCollector):
    """prometheus_client's sum of every process's files, less the files of a
    process killed after it created its file and before it sized it: an
    empty file holds no counts, and prometheus_client's reader fails on it
    (a scrape would answer 500 for every process from then on)."""

    def collect(self):
        files = [path for path in glob.glob(os.path.join(self._path, "*.db")) if _sized(path)]
        return self.merge(files, accumulate=True)


def _sized(path: str) -> bool:
    """Whether the file has its header (the 4-byte length of what it holds,
    4 bytes of padding): prometheus_client sizes a new file at once."""
    try:
        return os.path.getsize(path) >= 8
    except FileNotFoundError:  # a live gauge's, removed as its process died
        return False


class _ThisProcess:
    """The default registry's metrics (single-process mode only)."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def multiprocess_mode() -> bool:
    """Whether prometheus_client chose its multi-process files (it decides
    once, when first imported, from PROMETHEUS_MULTIPROC_DIR)."""
    return values.ValueClass is not values.MutexValue


EVERYTHING = None  # a scrape of every namespace


def scrape_registry(namespace: str | None = EVERYTHING) -> CollectorRegistry:
    """A registry for one scrape: every process's events, then the state,
    this process, and the build. ``namespace``: only that namespace's
    series, and those of no namespace (the roles' lags, the build)."""
    collectors: list = []
    if multiprocess_mode():
        collectors += [EventsCollector(ProcessFiles(None)), ServingProcess()]
    else:
        # The default registry already holds the process collector.
        collectors.append(EventsCollector(_ThisProcess()))
    collectors += [DatabaseCollector(), BuildInfo()]
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector if namespace is EVERYTHING else OneNamespace(collector, namespace))
    return registry


class OneNamespace:
    """What ``collector`` gives, without the series of other namespaces (nor
    those of none, such as a request without a key for its namespace)."""

    def __init__(self, collector, namespace: str) -> None:
        self.collector, self.namespace = collector, namespace

    def collect(self) -> Iterator[Metric]:
        for family in self.collector.collect():
            kept = Metric(family.name, family.documentation, family.type)
            for sample in family.samples:
                if sample.labels.get("namespace", self.namespace) == self.namespace:
                    kept.add_sample(sample.name, sample.labels, sample.value)
            yield kept


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: the Prometheus text format. With
    ``NODE_FLOW_METRICS_KEY`` set, only for a request that presents it; with
    ``NODE_FLOW_METRICS_REQUIRE_KEY``, for one that presents it or any API
    key (a key of one namespace sees that namespace's series only). Either
    way as ``Authorization: Bearer <key>`` (Prometheus's ``bearer_token``)
    or in ``x-api-key``; anything else is a 401 that says how."""
    scope: str | None = EVERYTHING
    if settings.NODE_FLOW_METRICS_KEY or settings.NODE_FLOW_METRICS_REQUIRE_KEY:
        allowed, scope = _presented_key(request)
        if not allowed:
            return _unauthenticated()
    return HttpResponse(generate_latest(scrape_registry(scope)), content_type=CONTENT_TYPE_LATEST)


def _unauthenticated() -> JsonResponse:
    what = "NODE_FLOW_METRICS_KEY"
    if settings.NODE_FLOW_METRICS_REQUIRE_KEY:
        what = "an API key or NODE_FLOW_METRICS_KEY" if settings.NODE_FLOW_METRICS_KEY else "an API key"
    return JsonResponse(
        {
            "error": "UNAUTHENTICATED",
            "message": f"GET /metrics needs {what}: send it as 'Authorization: Bearer <key>' or in the x-api-key header",
        },
        status=401,
        headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
    )


def _offered_key(request: HttpRequest) -> str:
    bearer = request.headers.get("authorization", "")
    return bearer[7:].strip() if bearer[:7].lower() == "bearer " else request.headers.get("x-api-key", "").strip()


def _presented_key(request: HttpRequest) -> tuple[bool, str | None]:
    """(allowed, the one namespace it may see or EVERYTHING)."""
    offered = _offered_key(request)
    expected = settings.NODE_FLOW_METRICS_KEY
    if expected and hmac.compare_digest(offered.encode(), expected.encode()):
        return True, EVERYTHING
    if not settings.NODE_FLOW_METRICS_REQUIRE_KEY or not offered:
        return False, EVERYTHING
    from nodeflow.auth import client_address

    return _api_key(offered, client_address(request))


def _api_key(offered: str, client: str) -> tuple[bool, str | None]:
    """Any role's key will do (a scrape changes nothing); failures are
    throttled like the API's."""
    # Imported here: they import models, and this module loads before the app registry is ready.
    from nodeflow import throttling
    from nodeflow.keys import resolve_api_key

    if throttling.wait_s(client) is not None:
        return False, EVERYTHING
    key = resolve_api_key(offered)
    if key is None:
        throttling.failed(client)
        return False, EVERYTHING
    return True, key.namespace
