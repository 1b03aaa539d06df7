"""DO_WHILE: runs ``loopOver`` (iteration 2's rows are ``loop[2].…``), then
its ``loopCondition`` (JavaScript over the loop's inputs, ``iteration``, the
loop itself as ``$.<loopRef>`` with its ``iteration``, and each body task's
output fields, ``output`` and ``status``), and again while it is true; still
true after ``maxIterations`` fails the loop (an optional loop completes with
errors instead, and the workflow goes on). Over ``items`` (Conductor's), it
runs one iteration per item, with ``loopItem`` and ``loopIndex`` in its
output, and the condition, if any, may end it sooner.

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
    if "items" not in task:
        row = walk.operator_row(task, path, inputs, "IN_PROGRESS", output={"iteration": 1})
        return progress(walk, task, row, scope)
    # Over items (Conductor's): one iteration per item, the loop's input
    # ``items`` holds them, its output the current ``loopItem`` and ``loopIndex``.
    items = walk.resolve(task["items"], scope)
    if not isinstance(items, list):
        reason = f"DO_WHILE: items must be a list, not {type(items).__name__}"
        row = walk.operator_row(task, path, inputs, "FAILED_WITH_TERMINAL_ERROR", reason=reason)
        return walk.failed(task, row, scope, previous)
    if not items:
        walk.operator_row(task, path, {**inputs, "items": items}, "COMPLETED", output={"iteration": 0})
        return Outcome(DONE, output={"iteration": 0})
    row = walk.operator_row(task, path, {**inputs, "items": items}, "IN_PROGRESS", output=_at(items, 1))
    return progress(walk, task, row, scope)


def _at(items: list, iteration: int) -> dict:
    """A loop over items: its output during ``iteration`` (1-based)."""
    return {"iteration": iteration, "loopItem": items[iteration - 1], "loopIndex": iteration - 1}


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
        items = row.input.get("items") if "items" in task else None
        following = _at(items, iteration + 1) if items and iteration < len(items) else {"iteration": iteration + 1}
        walk.change(row, output={**row.output, **following})
        if not walk.another_iteration():
            walk.decision.again = True
            return RUNNING_OUTCOME


def loop_again(walk: Walk, task: dict, row: Row, inner: Scope, iteration: int) -> Outcome | None:
    """None to run another iteration, else how the loop ended."""
    value = dict(walk.resolve(task["inputParameters"], inner))
    value["iteration"] = iteration
    # The loop itself, as Conductor's conditions read it: $.<loopRef>.iteration.
    value.setdefault(task["taskReferenceName"], {**row.output, "iteration": iteration})
    for child, _ in walk_tasks(task["loopOver"]):
        found = walk.latest(inner.prefix + child["taskReferenceName"])
        if found is not None:
            # $.<ref>.output.x, and Conductor's $.<ref>.x (its output's fields)
            output = found.output if isinstance(found.output, dict) else {}
            value[child["taskReferenceName"]] = {**output, "output": found.output, "status": found.status}
    items = row.input.get("items") if "items" in task else None
    try:
        if items is not None and iteration >= len(items):
            again = False  # every item has had its iteration
        elif "loopCondition" not in task:
            again = True  # over items, with no condition of its own
        else:
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
