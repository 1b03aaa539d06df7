"""SUB_WORKFLOW: starts a child execution (its tasks' paths are
``sub.inner``) and completes, fails or is canceled as the child ends. A
terminated child is neither retried nor absorbed by ``optional``: that would
swallow the terminate (SPEC §6)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executions.decider.decision import StartChild
from executions.decider.outcomes import DONE, DONE_EMPTY, RUNNING_OUTCOME, Outcome, Scope
from executions.decider.snapshot import SUCCESS, Row
from metadata import task_types
from metadata.tree import snapshot_key

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def begin(walk: Walk, task: dict, row: Row, scope: Scope) -> Outcome:
    if walk.snap.depth + 1 > task_types.MAX_CALL_DEPTH:
        walk.finish(
            row,
            "FAILED_WITH_TERMINAL_ERROR",
            reason=f"a child started from depth {walk.snap.depth} exceeds the call depth limit {task_types.MAX_CALL_DEPTH}",
        )
        return walk.failed(task, row, scope, DONE_EMPTY)
    param = task["subWorkflowParam"]
    key = snapshot_key(param["name"], param["version"])
    walk.decision.children.append(StartChild(row.id, key, row.input, row.path + "."))
    return RUNNING_OUTCOME


def progress(walk: Walk, task: dict, row: Row, scope: Scope) -> Outcome:
    if row.status in SUCCESS:
        return Outcome(DONE, output=row.output)
    if row.status == "SCHEDULED":
        return walk.activate(task, row, scope)
    child = walk.snap.children.get(row.child_execution_id) if row.child_execution_id else None
    if child is None or child.status in ("RUNNING", "PAUSED"):
        return RUNNING_OUTCOME
    if child.status == "COMPLETED":
        walk.finish(row, "COMPLETED", output={**child.output, "subWorkflowId": str(child.id)})
        return Outcome(DONE, output=row.output)
    status = "CANCELED" if child.status == "TERMINATED" else "FAILED"
    walk.finish(row, status, reason=f"sub-workflow {child.id} {child.status}: {child.reason}")
    return walk.failed(task, row, scope, DONE_EMPTY)
