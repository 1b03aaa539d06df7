"""FORK_JOIN: runs its branches side by side, at most ``maxConcurrency`` at
once, and fails fast: a branch that fails cancels the others' open tasks
(an optional fork then completes with errors, and the workflow goes on).
``fork`` is shared with FORK_JOIN_DYNAMIC."""

from __future__ import annotations

from collections.abc import Sequence
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
    walk: Walk,
    task: dict,
    row: Row,
    scope: Scope,
    branches: Sequence[tuple[Scope, list[dict]]],
    limit: int,
    *,
    settles: bool = False,
) -> Outcome:
    """Run branches side by side, at most ``limit`` at once; fail fast.
    ``settles`` (a dynamic fork: every branch the same template, started in
    order): finished branches are settled in runs of ``SETTLE_AT`` and no
    longer read while the fork runs; their rows are read again to join."""
    settled = settled_branches(row) if settles else (0, -1)
    first = settled[0] if settled[0] and not _present(walk, branches[0]) else 0
    running, joins, finished = 0, {}, first
    for index in range(first, len(branches)):
        branch_scope, tasks = branches[index]
        started = _present(walk, branches[index])
        if not started and running >= limit:
            if settles:
                running += len(branches) - index  # started in order: the rest wait for slots
                break
            running += 1  # waits for a free slot
            continue
        outcome = walk.block(tasks, branch_scope)
        if outcome.kind == RUNNING:
            running += 1
        elif outcome.kind in (FAILED, ENDED):
            if outcome.kind == FAILED:
                walk.cancel(walk.subtree_rows(task, row, scope))
                walk.finish(row, "FAILED", reason=outcome.reason)
                _unsettle(walk, row, settled)
                return walk.absorbed(row, timed_out=outcome.timed_out) or outcome
            return outcome
        else:
            joins.update(branch_outputs(walk, tasks, branch_scope, scope))
            if finished == index:
                finished += 1
    if running:
        if settles:
            _settle(walk, row, settled, finished)
        return RUNNING_OUTCOME
    if first:
        # Every branch is done, but the settled ones were not read: their
        # outputs are joined from a decision on every row.
        walk.decision.needs_all_rows = True
        return RUNNING_OUTCOME
    if row.status != "COMPLETED":
        walk.finish(row, "COMPLETED", output={**row.output, "joined": len(joins)})
        _unsettle(walk, row, settled)
    return Outcome(DONE, joins=joins)


def _present(walk: Walk, branch: tuple[Scope, list[dict]]) -> bool:
    """Whether the branch has started (its first task has a row)."""
    branch_scope, tasks = branch
    return walk.latest(branch_scope.prefix + tasks[0]["taskReferenceName"]) is not None


# --- settled branches ---------------------------------------------------------
# A dynamic fork of thousands of items would cost every decision the whole
# fork: every branch's rows read and walked. Instead the branches finished
# in a row from the first (0..k-1) are settled: their rows are marked with
# the fork row's id (``Decision.settle``), the executor stops reading them,
# and the fork row's output keeps ``settled`` (k) and ``settledSeq`` (their
# highest seq, so new rows never reuse one). A decision then reads the fork,
# its open branches and the few finished past k. When every branch is done
# the join needs all their outputs: the walk asks for every row
# (``needs_all_rows``) and the fork completes in that decision; a fork that
# ends has its rows read again from then on (``Decision.unsettle``).

SETTLE_AT = 16  # finished branches settled together: one update per this many


def settled_branches(row: Row) -> tuple[int, int]:
    """(branches settled, their highest seq) of a dynamic fork's row."""
    output = row.output if isinstance(row.output, dict) else {}
    return int(output.get("settled") or 0), int(output.get("settledSeq", -1))


def _settle(walk: Walk, row: Row, settled: tuple[int, int], finished: int) -> None:
    count, last_seq = settled
    if finished - count < SETTLE_AT:
        return
    head = row.path + "["
    ids = []
    for path, rows in walk.by_path.items():
        if path.startswith(head) and count <= int(path[len(head) : path.index("]", len(head))]) < finished:
            ids += [r.id for r in rows]
            last_seq = max(last_seq, *(r.seq for r in rows))
    walk.change(row, output={**row.output, "settled": finished, "settledSeq": last_seq})
    walk.decision.settle.setdefault(row.id, []).extend(ids)


def _unsettle(walk: Walk, row: Row, settled: tuple[int, int]) -> None:
    if settled[0]:
        walk.decision.unsettle.append(row.id)


def branch_outputs(walk: Walk, tasks: list[dict], branch_scope: Scope, scope: Scope) -> dict:
    outputs = {}
    for task, _ in walk_tasks(tasks):
        found = walk.latest(branch_scope.prefix + task["taskReferenceName"])
        if found is not None and found.status in SUCCESS:
            outputs[found.path[len(scope.prefix) :]] = found.output
    return outputs
