"""HUMAN: waits, IN_PROGRESS, for someone to complete or fail it through the
API (``executions.waiting``); the walk only starts it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executions.decider.outcomes import RUNNING_OUTCOME, Outcome, Scope
from executions.decider.snapshot import Row

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def begin(walk: Walk, task: dict, row: Row, scope: Scope) -> Outcome:
    return RUNNING_OUTCOME
