"""WAIT_FOR_WEBHOOK: waits, IN_PROGRESS, for a webhook whose body matches its
``matches`` (``POST …/webhooks/{name}``, ``executions.waiting``); the walk
only starts it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executions.decider.outcomes import RUNNING_OUTCOME, Outcome, Scope
from executions.decider.snapshot import Row

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def begin(walk: Walk, task: dict, row: Row, scope: Scope) -> Outcome:
    return RUNNING_OUTCOME
