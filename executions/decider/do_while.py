"""DO_WHILE: runs ``loopOver`` (iteration 2's rows are ``loop[2].…``), then
its ``loopCondition`` (JavaScript over the loop's inputs, ``iteration`` and
each body task's output and status), and again while it is true; still true
after ``maxIterations`` fails the loop (an optional loop completes with
errors instead, and the workflow goes on).

Iterations that end within the walk (a body of operators only) are decided
in bounded steps: ``Walk.another_iteration`` stops the loop, still running,
at the decision's bound, and the executor asks a follow-up decision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executions import javascript
from executions.decider.outcomes import DONE, FAILED, RUNNING_OUTCOME, Outcome, Scope
from executions.decider.snapshot import SUCCESS, Row
from metadata.tree import walk_tasks

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def start(walk: Walk, task: dict, path: str, scope: Scope, inputs: dict, previous: Outcome) -> Outcome:
    row = walk.operator_row(task, path, inputs, "IN_PROGRESS", output={"iteration": 1})
    return progress(walk, task, row, scope)


def progress(walk: Walk, task: dict, row: Row, scope: Scope) -> Outcome:
    if row.status in SUCCESS:
        return Outcome(DONE, output=row.output)
    while True:
        iteration = int(row.output.get("iteration", 1))
        inner = Scope(f"{row.path}[{iteration}].", scope.item, scope.index)
        outcome = walk.block(task["loopOver"], inner)
        if outcome.kind == FAILED:
            walk.finish(row, "FAILED", reason=outcome.reason)
            return walk.absorbed(row, timed_out=outcome.timed_out) or outcome
        if outcome.kind != DONE:
            return outcome
        verdict = loop_again(walk, task, row, inner, iteration)
        if verdict is not None:
            return verdict
        walk.change(row, output={**row.output, "iteration": iteration + 1})
        if not walk.another_iteration():
            walk.decision.again = True
            return RUNNING_OUTCOME


def loop_again(walk: Walk, task: dict, row: Row, inner: Scope, iteration: int) -> Outcome | None:
    """None to run another iteration, else how the loop ended."""
    value = dict(walk.resolve(task["inputParameters"], inner))
    value["iteration"] = iteration
    for child, _ in walk_tasks(task["loopOver"]):
        found = walk.latest(inner.prefix + child["taskReferenceName"])
        if found is not None:
            value[child["taskReferenceName"]] = {"output": found.output, "status": found.status}
    try:
        again = javascript.truthy(walk.evaluate(task["loopCondition"], value))
    except javascript.ScriptError as exc:
        walk.finish(row, "FAILED_WITH_TERMINAL_ERROR", reason=f"DO_WHILE loopCondition: {exc}")
        return walk.absorbed(row, timed_out=False) or Outcome(
            FAILED, reason=f"{row.path}: {row.reason}", failed=(task["name"],)
        )
    if not again:
        walk.finish(row, "COMPLETED", output={"iteration": iteration})
        return Outcome(DONE, output=row.output)
    if iteration >= task["maxIterations"]:
        reason = (
            f"DO_WHILE ran out of iterations: loopCondition still true after maxIterations ({task['maxIterations']})"
        )
        walk.finish(row, "FAILED", reason=reason)
        return walk.absorbed(row, timed_out=False) or Outcome(
            FAILED, reason=f"{row.path}: {reason}", failed=(task["name"],)
        )
    return None
