"""SET_VARIABLE: its resolved inputs are merged into the workflow's
variables (``${workflow.variables.<name>}``), and it completes at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executions.decider.outcomes import DONE, Outcome, Scope

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def start(walk: Walk, task: dict, path: str, scope: Scope, inputs: dict, previous: Outcome) -> Outcome:
    walk.variables.update(inputs)
    walk.operator_row(task, path, inputs, "COMPLETED")
    return Outcome(DONE)
