"""FORK_JOIN: runs its branches side by side, at most ``maxConcurrency`` at
once, and fails fast: a branch that fails cancels the others' open tasks
(an optional fork then completes with errors, and the workflow goes on).
``fork`` is shared with FORK_JOIN_DYNAMIC."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executions.decider.outcomes import DONE, ENDED, FAILED, RUNNING, RUNNING_OUTCOME, Outcome, Scope
from executions.decider.snapshot import SUCCESS, Row
from metadata.tree import walk_tasks

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def start(walk: Walk, task: dict, path: str, scope: Scope, inputs: dict, previous: Outcome) -> Outcome:
    return progress(walk, task, walk.operator_row(task, path, inputs, "IN_PROGRESS"), scope)


def progress(walk: Walk, task: dict, row: Row, scope: Scope) -> Outcome:
    if row.status == "COMPLETED_WITH_ERRORS":
        return Outcome(DONE, output=row.output)  # an optional fork that failed
    branches = [(scope, branch) for branch in task["forkTasks"]]
    return fork(walk, task, row, scope, branches, task.get("maxConcurrency") or len(branches))


def fork(
    walk: Walk, task: dict, row: Row, scope: Scope, branches: list[tuple[Scope, list[dict]]], limit: int
) -> Outcome:
    """Run branches side by side, at most ``limit`` at once; fail fast."""
    running, joins = 0, {}
    for branch_scope, tasks in branches:
        started = walk.latest(branch_scope.prefix + tasks[0]["taskReferenceName"]) is not None
        if not started and running >= limit:
            running += 1  # waits for a free slot
            continue
        outcome = walk.block(tasks, branch_scope)
        if outcome.kind == RUNNING:
            running += 1
        elif outcome.kind in (FAILED, ENDED):
            if outcome.kind == FAILED:
                walk.cancel(walk.subtree_rows(task, row, scope))
                walk.finish(row, "FAILED", reason=outcome.reason)
                return walk.absorbed(row, timed_out=outcome.timed_out) or outcome
            return outcome
        else:
            joins.update(branch_outputs(walk, tasks, branch_scope, scope))
    if running:
        return RUNNING_OUTCOME
    if row.status != "COMPLETED":
        walk.finish(row, "COMPLETED", output={**row.output, "joined": len(joins)})
    return Outcome(DONE, joins=joins)


def branch_outputs(walk: Walk, tasks: list[dict], branch_scope: Scope, scope: Scope) -> dict:
    outputs = {}
    for task, _ in walk_tasks(tasks):
        found = walk.latest(branch_scope.prefix + task["taskReferenceName"])
        if found is not None and found.status in SUCCESS:
            outputs[found.path[len(scope.prefix) :]] = found.output
    return outputs
