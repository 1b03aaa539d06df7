"""FORK_JOIN_DYNAMIC: runs its ``forkTask`` once per item of ``items``
(``fan[3].charge`` is item 3's), as a fork of that many branches, with
``${item}`` and ``${index}`` in scope; more items than the ceiling
(NODE_FLOW_MAX_FORK_ITEMS) fail it. Its finished branches are settled
(``fork_join``): a decision costs the fork's open branches, not its width."""

from __future__ import annotations

from collections.abc import Sequence
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
    branches = _Branches(row, row.input.get("items") or [], [task["forkTask"]])
    return fork_join.fork(walk, task, row, scope, branches, task["maxConcurrency"], settles=True)


class _Branches(Sequence):
    """Item ``index``'s branch, made when the walk reaches it: a decision
    looks at the fork's open branches, not at every item."""

    def __init__(self, row: Row, items: list, tasks: list[dict]) -> None:
        self.prefix, self.items, self.tasks = row.path, items, tasks

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index):  # items only, no slices
        return Scope(f"{self.prefix}[{index}].", self.items[index], index), self.tasks
