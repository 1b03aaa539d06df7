"""What the decider reads and what it returns: plain data, no ORM.

``Row`` mirrors one task row (one attempt). ``Snapshot`` is everything the
decider may know about one execution at one instant. ``Decision`` is what it
wants changed: rows to insert, rows to update (each with the status it was
read in, so the executor can apply the update conditionally), timers to arm,
children to start, and how the execution ends, if it does.
"""
from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

SUCCESS = frozenset({"COMPLETED", "COMPLETED_WITH_ERRORS", "SKIPPED"})
FAILURE = frozenset({"FAILED", "FAILED_WITH_TERMINAL_ERROR", "TIMED_OUT", "CANCELED"})
OPEN = frozenset({"SCHEDULED", "IN_PROGRESS"})


@dataclass
class Row:
    id: uuid.UUID
    path: str
    ref: str
    type: str
    kind: str
    task_def_name: str
    status: str
    attempt: int
    seq: int
    scheduled_at: dt.datetime
    available_at: dt.datetime
    first_scheduled_at: dt.datetime
    input: dict = field(default_factory=dict)
    output: dict = field(default_factory=dict)
    reason: str = ""
    optional: bool = False
    policy: dict = field(default_factory=dict)
    queue: str | None = None
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    child_execution_id: uuid.UUID | None = None
    # Set by the decider: the status this row had when it was read (None for
    # rows the decider creates).
    read_status: str | None = None


@dataclass(frozen=True)
class Child:
    """A child execution as its parent's decider sees it."""

    id: uuid.UUID
    status: str
    output: dict
    reason: str


@dataclass(frozen=True)
class TimerSpec:
    kind: str
    due_at: dt.datetime
    task_id: uuid.UUID | None = None


@dataclass(frozen=True)
class StartChild:
    task_id: uuid.UUID
    workflow_key: str
    input: dict
    path_prefix: str


@dataclass(frozen=True)
class Ending:
    status: str  # COMPLETED, FAILED, TIMED_OUT, TERMINATED
    output: dict
    reason: str = ""
    failed_tasks: tuple[str, ...] = ()


@dataclass
class Snapshot:
    """The decider's whole input for one execution."""

    execution_id: uuid.UUID
    status: str
    workflow: dict  # the normalised definition this execution runs
    workflows: dict[str, dict]  # every workflow in the baked snapshot, by "name@version"
    input: dict
    variables: dict
    rows: list[Row]  # every attempt of the current run, in seq order
    now: dt.datetime
    task_defs: Mapping[str, dict]  # retry and timeout policy by task-definition name
    children: dict[uuid.UUID, Child] = field(default_factory=dict)
    messages: list[tuple[int, Any]] = field(default_factory=list)  # (id, payload), oldest first
    depth: int = 0
    path_prefix: str = ""
    run: int = 1
    next_seq: int = 0  # one past the highest seq of the current run's rows
    evaluated_at: dt.datetime | None = None
    deadline: dt.datetime | None = None
    correlation_id: str | None = None
    name: str = ""
    version: int = 0
    parent_execution_id: uuid.UUID | None = None
    max_fork_items: int = 10_000
    max_loop_iterations: int = 100  # DO_WHILE iterations one decision may run (then `again`)
    # retry-budget counters by task-definition name: (executions, retries) in the window
    budgets: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass
class Decision:
    created: list[Row] = field(default_factory=list)
    updated: list[Row] = field(default_factory=list)
    timers: list[TimerSpec] = field(default_factory=list)
    children: list[StartChild] = field(default_factory=list)
    cancel_children: list[uuid.UUID] = field(default_factory=list)
    consumed_messages: dict[uuid.UUID, list[int]] = field(default_factory=dict)
    variables: dict | None = None
    ending: Ending | None = None
    evaluated: bool = False  # first evaluation: arm the workflow timeout
    deadline: dt.datetime | None = None
    next_seq: int = 0
    # task-definition names, one per retry scheduled / refused by the retry budget (metrics)
    retries: list[str] = field(default_factory=list)
    budget_refusals: list[str] = field(default_factory=list)
    capped: int = 0  # dispatchable tasks held back by maxConcurrentTasks
    # A loop stopped at the decision's bound with iterations left to run: the
    # executor asks a follow-up decision of the decider role.
    again: bool = False

    @property
    def empty(self) -> bool:
        return not (
            self.created or self.updated or self.timers or self.children or self.cancel_children
            or self.variables is not None or self.ending or self.evaluated or self.consumed_messages or self.again
        )
