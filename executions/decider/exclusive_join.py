"""EXCLUSIVE_JOIN (Conductor's): follows a DECISION (a SWITCH) and completes
with the output of whichever of its ``joinOn`` tasks ran: the first of them,
in the order given, that has a row in the scope; else the first of
``defaultExclusiveJoinTask`` that has; else with an empty output. It waits
for nothing: the block before it ran to its end before the walk reached it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executions.decider.outcomes import DONE, Outcome, Scope
from executions.decider.snapshot import SUCCESS

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def start(walk: Walk, task: dict, path: str, scope: Scope, inputs: dict, previous: Outcome) -> Outcome:
    output: dict = {}
    for ref in [*task.get("joinOn", []), *task.get("defaultExclusiveJoinTask", [])]:
        row = walk.find(ref, scope.prefix)
        if row is not None and row.status in SUCCESS:
            output = dict(row.output)
            break
    walk.operator_row(task, path, inputs, "COMPLETED", output=output)
    return Outcome(DONE, output=output)
