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

import datetime as dt
import functools
import hmac
import logging
from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol, overload

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from nodeflow import clock

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from executions.decider.decision import Decision

log = logging.getLogger(__name__)

OPEN = frozenset({"SCHEDULED", "IN_PROGRESS"})
ENDED = frozenset(
    {"COMPLETED", "COMPLETED_WITH_ERRORS", "FAILED", "FAILED_WITH_TERMINAL_ERROR", "TIMED_OUT", "CANCELED", "SKIPPED"}
)
# From a long-poll's wake-up (milliseconds) to a backlog drained an hour late.
DISPATCH_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

TASK_RETRIES = Counter(
    "nodeflow_task_retries", "Retries scheduled (attempts after the first), by task name.", ["task_type"]
)
RETRY_BUDGET_REFUSALS = Counter(
    "nodeflow_retry_budget_refusals",
    "Failures not retried because the task definition's retry budget was spent.",
    ["task_type"],
)
TIMEOUTS = Counter(
    "nodeflow_timeouts",
    "Timeouts that fired, by class (workflow, scheduleToStart, startToClose, heartbeat, total) and policy.",
    ["timeout", "policy"],
)
TASKS_ENDED = Counter(
    "nodeflow_tasks_ended",
    "Task attempts that ended, by task type and the status they ended in.",
    ["task_type", "status"],
)
DISPATCH_LATENCY = Histogram(
    "nodeflow_dispatch_latency_seconds",
    "From when a task became available (scheduled, retry delay over, put back) to its lease.",
    ["task_type"],
    buckets=DISPATCH_BUCKETS_S,
)


class TaskLike(Protocol):
    """A task row or the decider's Row: enough to name its type."""

    kind: str
    type: str
    task_def_name: str


class LeasedTask(TaskLike, Protocol):
    available_at: dt.datetime | None
    started_at: dt.datetime | None


def task_type(task: TaskLike) -> str:
    """The ``task_type`` label: a SIMPLE task's definition name, else the
    task's type (HTTP, SWITCH, WAIT…), so the label set stays bounded."""
    return task.task_def_name if task.kind == "worker" else task.type


@overload
def _child(metric: Counter, labels: tuple[str, ...]) -> Counter: ...
@overload
def _child(metric: Histogram, labels: tuple[str, ...]) -> Histogram: ...


@functools.lru_cache(maxsize=10_000)
def _child(metric: Counter | Histogram, labels: tuple[str, ...]) -> Counter | Histogram:
    # labels() validates and locks on every call; the hot path reuses children.
    return metric.labels(*labels)


Increments = list[tuple[Counter, tuple[str, ...], float]]


def _after_commit(increments: Increments) -> None:
    if increments:
        transaction.on_commit(functools.partial(_increment, increments))


def _increment(increments: Increments) -> None:
    for counter, labels, amount in increments:
        _child(counter, labels).inc(amount)


# --- recorders (called by the services) --------------------------------------


def record_decision(decision: Decision) -> None:
    """Count a decision's retries, budget refusals and the attempts it ended
    (created ended, or moved from open to ended), once it commits. A row
    that ended before (a worker's FAILED) and is only relabelled now (an
    optional task's COMPLETED_WITH_ERRORS) was counted when it ended."""
    increments: Increments = [(TASK_RETRIES, (name,), 1.0) for name in decision.retries]
    increments += [(RETRY_BUDGET_REFUSALS, (name,), 1.0) for name in decision.budget_refusals]
    ended = [row for row in decision.created if row.status in ENDED]
    ended += [row for row in decision.updated if row.status in ENDED and row.read_status in OPEN]
    increments += [(TASKS_ENDED, (task_type(row), row.status), 1.0) for row in ended]
    _after_commit(increments)


def record_task_end(task: TaskLike, status: str | None, count: int = 1) -> None:
    """Count ``count`` attempts of ``task``'s type ended in ``status`` once
    it commits; a status that is not an end (a put-back) counts nothing."""
    if status in ENDED and count:
        _after_commit([(TASKS_ENDED, (task_type(task), status), float(count))])


def record_task_ends(ends: Iterable[tuple[TaskLike, str | None]]) -> None:
    """``record_task_end`` for many (task, status) pairs: a batch of results
    registers one commit hook, not one per task."""
    tally = Tally((task_type(task), status) for task, status in ends if status in ENDED)
    _after_commit([(TASKS_ENDED, labels, float(n)) for labels, n in tally.items()])


def record_type_end(type_: str, status: str, count: int = 1) -> None:
    """``record_task_end`` for a caller that knows only the task's type."""
    if status in ENDED and count:
        _after_commit([(TASKS_ENDED, (type_, status), float(count))])


def record_canceled(tasks: QuerySet) -> None:
    """Count the open tasks of ``tasks`` that are about to be canceled (one
    query: terminate and the workflow timeout only, never the hot path)."""
    rows = tasks.values_list("kind", "type", "task_def_name")
    tally = Tally(name if kind == "worker" else type_ for kind, type_, name in rows)
    _after_commit([(TASKS_ENDED, (label, "CANCELED"), float(n)) for label, n in tally.items()])


def record_dispatch(tasks: Iterable[LeasedTask]) -> None:
    """Observe the dispatch latency of leased rows, from the rows the
    dequeue returned (``started_at`` is the lease's instant)."""
    observed = [
        (task_type(task), (task.started_at - task.available_at).total_seconds())
        for task in tasks
        if task.started_at is not None and task.available_at is not None
    ]
    if observed:
        transaction.on_commit(functools.partial(_observe_dispatch, observed))


def _observe_dispatch(observed: list[tuple[str, float]]) -> None:
    for label, seconds in observed:
        _child(DISPATCH_LATENCY, (label,)).observe(max(0.0, seconds))


def record_timeout(timeout: str, policy: str) -> None:
    """Count a timeout that fired (ALERT_ONLY ones included) once it commits."""
    _after_commit([(TIMEOUTS, (timeout, policy), 1.0)])


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
        yield from self._queues(names)
        yield from self._semaphores(names, now)
        yield from self._breakers(names, now)
        yield from self._lags(now)

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


# --- GET /metrics -------------------------------------------------------------


class _ThisProcess:
    """The default registry's metrics (single-process mode only)."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def multiprocess_mode() -> bool:
    """Whether prometheus_client chose its multi-process files (it decides
    once, when first imported, from PROMETHEUS_MULTIPROC_DIR)."""
    return values.ValueClass is not values.MutexValue


def scrape_registry() -> CollectorRegistry:
    """A registry for one scrape: every process's events, then the state."""
    registry = CollectorRegistry(auto_describe=False)
    if multiprocess_mode():
        MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    registry.register(DatabaseCollector())
    return registry


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: the Prometheus text format. With
    ``NODE_FLOW_METRICS_KEY`` set, only for a request that presents it, as
    ``Authorization: Bearer <key>`` (Prometheus's ``bearer_token``) or in
    ``x-api-key``; anything else is a 401 that says how."""
    if settings.NODE_FLOW_METRICS_KEY and not _presents_metrics_key(request):
        return JsonResponse(
            {
                "error": "UNAUTHENTICATED",
                "message": "GET /metrics needs NODE_FLOW_METRICS_KEY: send it as "
                "'Authorization: Bearer <key>' or in the x-api-key header",
            },
            status=401,
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    return HttpResponse(generate_latest(scrape_registry()), content_type=CONTENT_TYPE_LATEST)


def _presents_metrics_key(request: HttpRequest) -> bool:
    expected = settings.NODE_FLOW_METRICS_KEY.encode()
    bearer = request.headers.get("authorization", "")
    offered = bearer[7:].strip() if bearer[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
    return hmac.compare_digest(offered.encode(), expected)
