"""FORK_JOIN_DYNAMIC: runs its ``forkTask`` once per item of ``items``
(``fan[3].charge`` is item 3's), as a fork of that many branches, with
``${item}`` and ``${index}`` in scope; more items than the ceiling
(NODE_FLOW_MAX_FORK_ITEMS) fail it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executions.decider import fork_join
from executions.decider.outcomes import DONE, Outcome, Scope
from executions.decider.snapshot import Row

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def start(walk: Walk, task: dict, path: str, scope: Scope, inputs: dict, previous: Outcome) -> Outcome:
    items = inputs.get("items")
    if not isinstance(items, list):
        row = walk.operator_row(
            task,
            path,
            inputs,
            "FAILED_WITH_TERMINAL_ERROR",
            reason=f"FORK_JOIN_DYNAMIC: items must be a list, not {type(items).__name__}",
        )
        return walk.failed(task, row, scope, previous)
    if len(items) > walk.snap.max_fork_items:
        row = walk.operator_row(
            task,
            path,
            {"items": len(items)},
            "FAILED_WITH_TERMINAL_ERROR",
            reason=f"FORK_JOIN_DYNAMIC: {len(items)} items exceed the limit of {walk.snap.max_fork_items}",
        )
        return walk.failed(task, row, scope, previous)
    row = walk.operator_row(task, path, inputs, "IN_PROGRESS", output={"items": len(items)})
    return progress(walk, task, row, scope)


def progress(walk: Walk, task: dict, row: Row, scope: Scope) -> Outcome:
    if row.status == "COMPLETED_WITH_ERRORS":
        return Outcome(DONE, output=row.output)  # an optional fork that failed
    items = row.input.get("items") or []
    branches = [(Scope(f"{row.path}[{index}].", item, index), [task["forkTask"]]) for index, item in enumerate(items)]
    return fork_join.fork(walk, task, row, scope, branches, task["maxConcurrency"])
