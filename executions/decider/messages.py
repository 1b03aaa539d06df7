"""PULL_WORKFLOW_MESSAGES: takes up to ``batchSize`` (1) of the messages
sent to the execution, oldest first, and completes with them; with none
waiting it waits, and the next message decides the execution again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executions.decider.outcomes import DONE, RUNNING_OUTCOME, Outcome, Scope
from executions.decider.snapshot import SUCCESS, Row

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def begin(walk: Walk, task: dict, row: Row, scope: Scope) -> Outcome:
    return progress(walk, task, row, scope)


def progress(walk: Walk, task: dict, row: Row, scope: Scope) -> Outcome:
    if row.status in SUCCESS:
        return Outcome(DONE, output=row.output)
    if row.status == "SCHEDULED":
        return walk.activate(task, row, scope)
    if not walk.messages:
        return RUNNING_OUTCOME
    size = row.input.get("batchSize", 1)
    size = size if isinstance(size, int) and size > 0 else 1
    taken, walk.messages = walk.messages[:size], walk.messages[size:]
    walk.decision.consumed_messages[row.id] = [message_id for message_id, _ in taken]
    walk.finish(row, "COMPLETED", output={"messages": [payload for _, payload in taken]})
    return Outcome(DONE, output=row.output)
