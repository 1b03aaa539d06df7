"""Typed views of the server's answers (executions/serializers.py,
metadata/serializers.py, quotas/serializers.py).

Each is a dataclass whose fields are the answer's, in snake_case
(``reasonForIncompletion`` → ``reason_for_incompletion``), times parsed to
aware datetimes. ``raw`` is the answer exactly as the server sent it: a
field a newer server adds is there, and nothing breaks when one is
missing (its default stays).
"""

from __future__ import annotations

import datetime as dt
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Self

EXECUTION_STATUSES = ("RUNNING", "PAUSED", "COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED")
ENDED_EXECUTION_STATUSES = frozenset({"COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED"})
TASK_STATUSES = (
    "SCHEDULED",
    "IN_PROGRESS",
    "COMPLETED",
    "COMPLETED_WITH_ERRORS",
    "FAILED",
    "FAILED_WITH_TERMINAL_ERROR",
    "TIMED_OUT",
    "CANCELED",
    "SKIPPED",
)
OPEN_TASK_STATUSES = frozenset({"SCHEDULED", "IN_PROGRESS"})


def parse_time(value: Any) -> dt.datetime | None:
    """An ISO 8601 time as the server writes it ("…Z") → an aware datetime."""
    if not isinstance(value, str) or not value:
        return None
    return dt.datetime.fromisoformat(value)


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@dataclass
class Model:
    """An answer of the server: typed fields and, in ``raw``, all of it."""

    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        values: dict[str, Any] = {}
        for name, (key, parse) in _readers(cls).items():
            if key in body:
                value = body[key]
                values[name] = parse(value) if parse is not None and value is not None else value
        return cls(raw=body, **values)

    def to_json(self) -> dict[str, Any]:
        """The answer as the server sent it."""
        return self.raw


Reader = tuple[str, Callable[[Any], Any] | None]


_READERS: dict[type, dict[str, Reader]] = {}


def _readers(cls: type[Model]) -> dict[str, Reader]:
    """Each field's JSON key and how its value is read, from its annotation:
    a datetime is parsed, a model (or a list of them) built. Worked out once per class."""
    readers = _READERS.get(cls)
    if readers is None:
        hints = typing.get_type_hints(cls)
        readers = _READERS[cls] = {
            item.name: (camel(item.name), _reader(hints[item.name]))
            for item in fields(cls)
            if item.name != "raw" and not item.metadata.get("local")
        }
    return readers


def _reader(hint: Any) -> Callable[[Any], Any] | None:
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if isinstance(hint, types.UnionType) and len(args) == 1:
        return _reader(args[0])
    if hint is dt.datetime:
        return parse_time
    if isinstance(hint, type) and issubclass(hint, Model):
        return hint.from_json
    item = args[0] if typing.get_origin(hint) is list and args else None
    if isinstance(item, type) and issubclass(item, Model):
        return lambda values: [item.from_json(value) for value in values]
    return None


@dataclass
class BlockedBy(Model):
    """Why a task (or an execution awaiting admission) is not running:
    ``control`` is concurrentExecLimit, rateLimit, semaphore:<name>,
    retryBackoff, noPollers, paused, admission:<key>, …"""

    control: str = ""
    limit: int | None = None
    current: int | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None


@dataclass
class Task(Model):
    """One attempt of one task of an execution (every attempt is its own row)."""

    task_id: str = ""
    execution_id: str = ""
    reference_task_name: str = ""
    path: str = ""
    type: str = ""
    task_def_name: str = ""
    status: str = ""
    attempt: int = 1
    optional: bool = False
    scheduled_at: dt.datetime | None = None
    available_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    worker_id: str | None = None
    lease_expires_at: dt.datetime | None = None
    input_data: dict[str, Any] = field(default_factory=dict)
    output_data: dict[str, Any] = field(default_factory=dict)
    reason_for_incompletion: str | None = None
    idempotency_key: str = ""
    sub_workflow_id: str | None = None
    retry_count: int | None = None
    logs: list[Any] = field(default_factory=list)
    blocked_by: BlockedBy | None = None

    @property
    def open(self) -> bool:
        """Not ended yet (SCHEDULED or IN_PROGRESS)."""
        return self.status in OPEN_TASK_STATUSES


@dataclass
class LeasedTask(Model):
    """A task a poll leased (SPEC §7): its result must carry ``lease_token``."""

    task_id: str = ""
    execution_id: str = ""
    task_type: str = ""
    reference_task_name: str = ""
    path: str = ""
    input_data: dict[str, Any] = field(default_factory=dict)
    attempt: int = 1
    idempotency_key: str = ""
    lease_token: str = ""
    lease_expires_at: dt.datetime | None = None
    scheduled_at: dt.datetime | None = None


@dataclass
class Execution(Model):
    """One execution (one run of a workflow). ``tasks`` is there when the
    answer carries them (a single execution's read, a start, an action),
    not in a list's pages; a read shows at most the server's
    NODE_FLOW_EXECUTION_VIEW_TASKS of them, and ``tasks_next`` is then set."""

    id: str = ""
    name: str = ""
    version: int = 0
    status: str = ""
    awaiting_admission: bool = False
    input: dict[str, Any] = field(default_factory=dict)
    output: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, Any] = field(default_factory=dict)
    reason_for_incompletion: str | None = None
    failed_task_names: list[str] = field(default_factory=list)
    correlation_id: str | None = None
    idempotency_key: str | None = None
    priority: int = 0
    parent_execution_id: str | None = None
    depth: int = 0
    run: int = 1
    created_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    deadline: dt.datetime | None = None
    blocked_by: BlockedBy | None = None
    tasks: list[Task] = field(default_factory=list)
    # When the view showed only the first of many tasks: the cursor of ``Client.list_tasks`` for the rest.
    tasks_next: str | None = None
    # Not the server's: whether a start created it (201) or found it by its idempotencyKey (200).
    created: bool | None = field(default=None, metadata={"local": True})

    @property
    def ended(self) -> bool:
        """COMPLETED, FAILED, TIMED_OUT or TERMINATED (PAUSED has not ended)."""
        return self.status in ENDED_EXECUTION_STATUSES

    def task(self, reference: str) -> Task | None:
        """The latest attempt of the task with this reference name (or path)."""
        found = [t for t in self.tasks if reference in (t.reference_task_name, t.path)]
        return max(found, key=lambda t: t.attempt) if found else None

    def open_tasks(self, type: str | None = None) -> list[Task]:
        return [t for t in self.tasks if t.open and (type is None or t.type == type)]


@dataclass
class TaskDefinition(Model):
    """A task definition, every field with its effective value (SPEC §3)."""

    name: str = ""
    description: str = ""
    retry_count: int = 3
    retry_logic: str = "EXPONENTIAL_BACKOFF"
    retry_delay_seconds: float = 1.0
    backoff_scale_factor: float = 2.0
    max_retry_delay_seconds: float = 3600.0
    jitter: float = 0.2
    retry_budget: float = 1.0
    non_retryable_errors: list[str] = field(default_factory=list)
    schedule_to_start_timeout: float = 0.0
    start_to_close_timeout: float = 3600.0
    heartbeat_timeout: float = 0.0
    timeout_seconds: float = 0.0
    timeout_policy: str = "RETRY"
    concurrent_exec_limit: int = 0
    rate_limit_per_frequency: int = 0
    rate_limit_frequency_seconds: float = 0.0
    semaphores: list[str] = field(default_factory=list)
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None


@dataclass
class WorkflowDefinition(Model):
    """One stored version of a workflow definition (SPEC §4). ``tasks`` are
    the definition's entries as dicts (each type has fields of its own)."""

    name: str = ""
    version: int = 0
    published: bool = False
    description: str = ""
    tasks: list[dict[str, Any]] = field(default_factory=list)
    input_parameters: list[str] = field(default_factory=list)
    output_parameters: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, Any] = field(default_factory=dict)
    failure_workflow: str | None = None
    timeout_seconds: float = 0
    timeout_policy: str = "TIME_OUT_WF"
    max_concurrent_tasks: int = 0
    max_concurrent_executions: int = 0
    rate_limit_config: dict[str, Any] | None = None
    created_at: dt.datetime | None = None
    published_at: dt.datetime | None = None


@dataclass
class WorkflowVersion(Model):
    """A line of ``…/workflow-definitions/{name}/versions``."""

    version: int = 0
    published: bool = False
    description: str = ""
    created_at: dt.datetime | None = None
    published_at: dt.datetime | None = None


@dataclass
class Page[T]:
    """One page of a list: its items and the cursor of the next page (None: the last)."""

    results: list[T]
    next: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class StartAnswer(Model):
    """One start of a batch (``POST …/executions/batch``): ``status`` 201
    (created) or 200 (its idempotencyKey's execution) with ``id`` and
    ``execution_status``; or a refusal's status with ``error``,
    ``message`` and perhaps ``field``."""

    status: int = 0
    id: str | None = None
    execution_status: str | None = None
    error: str | None = None
    message: str | None = None
    field: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass
class Queue(Model):
    task_type: str = ""
    depth: int = 0
    in_flight: int = 0


@dataclass
class QueueWorker(Model):
    """A worker and when it last polled each queue (``queues``: [{taskType, lastPollAt}])."""

    worker_id: str = ""
    last_poll_at: dt.datetime | None = None
    queues: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Semaphore(Model):
    """``holders`` only in a single semaphore's read."""

    name: str = ""
    permits: int = 0
    held: int = 0
    holders: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Breaker(Model):
    key: str = ""
    state: str = ""
    process: str = ""
    failures: int = 0
    requests: int = 0
    opened_until: dt.datetime | None = None
    updated_at: dt.datetime | None = None


@dataclass
class Schedule(Model):
    name: str = ""
    cron: str = ""
    timezone: str = "UTC"
    workflow_name: str = ""
    version: int | None = None
    input: dict[str, Any] = field(default_factory=dict)
    paused: bool = False
    next_fire_at: dt.datetime | None = None
    last_fired_at: dt.datetime | None = None
    last_execution_id: str | None = None
    last_error: str | None = None
    last_refusal: dict[str, Any] | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None


@dataclass
class Quotas(Model):
    """A namespace's quotas; None is unlimited."""

    max_concurrent_executions: int | None = None
    max_executions_per_minute: int | None = None
    max_workflow_definitions: int | None = None
    max_schedules: int | None = None


@dataclass
class WebhookDelivery(Model):
    """What an inbound webhook completed: the WAIT_FOR_WEBHOOK tasks it matched."""

    matched: int = 0
    task_ids: list[str] = field(default_factory=list)
