"""TERMINATE: the execution ends at once, with the status, output and reason
its inputs give (``terminationStatus``: COMPLETED, FAILED or TERMINATED;
anything else is FAILED)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executions.decider.decision import Ending
from executions.decider.outcomes import ENDED, Outcome, Scope
from metadata import task_types

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def start(walk: Walk, task: dict, path: str, scope: Scope, inputs: dict, previous: Outcome) -> Outcome:
    status = inputs.get("terminationStatus") or "COMPLETED"
    if status not in task_types.TERMINATION_STATUSES:
        status = "FAILED"
    output = inputs.get("workflowOutput")
    output = output if isinstance(output, dict) else ({} if output is None else {"result": output})
    reason = str(inputs.get("terminationReason") or "")
    walk.operator_row(task, path, inputs, "COMPLETED", output=output)
    return Outcome(ENDED, ending=Ending(status, output, reason, (task["name"],) if status == "FAILED" else ()))
