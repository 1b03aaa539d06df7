"""What the decider reads: one execution at one instant, as plain data (no
ORM). ``Row`` mirrors one task row (one attempt); ``Child`` a child
execution as its parent sees it; ``Snapshot`` everything the decider may
know. The decider copies what it is given and never changes it.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
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
    # A script's result is held to what any task output is held to.
    max_output_bytes: int = 1_048_576  # NODE_FLOW_MAX_BODY_BYTES
    max_json_depth: int = 100  # NODE_FLOW_MAX_JSON_DEPTH
    max_loop_iterations: int = 100  # DO_WHILE iterations one decision may run (then `again`)
    # retry-budget counters by task-definition name: (executions, retries) in the window
    budgets: dict[str, tuple[int, int]] = field(default_factory=dict)
