"""SWITCH: picks one case by its expression (an input's value, or a
JavaScript expression over the inputs) and runs that case's tasks, or the
default case's. A script that fails fails the switch terminally."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executions import javascript
from executions.decider.outcomes import Outcome, Scope
from executions.decider.snapshot import Row
from metadata.expressions import case_key

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def start(walk: Walk, task: dict, path: str, scope: Scope, inputs: dict, previous: Outcome) -> Outcome:
    try:
        if task["evaluatorType"] == "javascript":
            case = case_key(walk.evaluate(task["expression"], inputs))
        else:
            case = case_key(inputs.get(task["expression"]))
    except javascript.ScriptError as exc:
        row = walk.operator_row(task, path, inputs, "FAILED_WITH_TERMINAL_ERROR", reason=f"SWITCH expression: {exc}")
        return walk.failed(task, row, scope, previous)
    selected = case if case in task["decisionCases"] else "default"
    row = walk.operator_row(task, path, inputs, "COMPLETED", output={"selectedCase": case, "branch": selected})
    return progress(walk, task, row, scope)


def progress(walk: Walk, task: dict, row: Row, scope: Scope) -> Outcome:
    branch = row.output.get("branch")
    tasks = task["decisionCases"].get(branch, []) if branch != "default" else task.get("defaultCase", [])
    return walk.block(tasks, scope)
