"""What the decider returns: rows to insert, rows to update (each with the
status it was read in, so the executor can apply the update conditionally),
timers to arm, children to start and to cancel, and how the execution ends,
if it does. Plain data; the executor (``executions.executor``) applies it
under the execution's row lock.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field

from executions.decider.snapshot import Row


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
    # Settled branches of dynamic forks (``dynamic_fork``): rows of finished
    # branches the executor no longer reads while their fork runs, by the
    # fork row that settled them; forks that ended, whose rows are read
    # again; and whether this decision needs the settled rows (a fork
    # completing joins every branch's output): decide again with all rows.
    settle: dict[uuid.UUID, list[uuid.UUID]] = field(default_factory=dict)
    unsettle: list[uuid.UUID] = field(default_factory=list)
    needs_all_rows: bool = False

    @property
    def empty(self) -> bool:
        return not (
            self.created
            or self.updated
            or self.timers
            or self.children
            or self.cancel_children
            or self.variables is not None
            or self.ending
            or self.evaluated
            or self.consumed_messages
            or self.again
            or self.settle
            or self.unsettle
        )
