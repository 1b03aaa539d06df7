"""FORK_JOIN_DYNAMIC whose tasks are chosen at run time (Conductor's form):
the input named by ``dynamicForkTasksParam`` is the list of tasks to run side
by side, each ``{"name", "taskReferenceName", "type"?}`` (one branch each),
and the input named by ``dynamicForkTasksInputParamName`` maps each
reference name to that task's input. Conductor's other form, the inputs
``forkTaskName`` (or ``forkTaskType``) and ``forkTaskInputs`` (a list: one
branch per input), is taken too.

The branches are rows ``<ref>`` (reference names are unique, as Conductor
requires), so a later task reads ``${<ref>.output…}`` and the JOIN after
the fork joins them by reference name. A branch task may be SIMPLE or a
system or waiting task, never a structural one (its definition is not
checked at registration). Every branch starts at once unless
``maxConcurrency`` says otherwise; the fork fails fast as FORK_JOIN does.
A list that is not as described fails the fork terminally, naming what.

The native FORK_JOIN_DYNAMIC (``forkTask`` over ``items``) is
``dynamic_fork``'s; this module hands it over.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from executions.decider import dynamic_fork, fork_join
from executions.decider.dynamic import is_task_name
from executions.decider.outcomes import DONE, Outcome, Scope
from executions.decider.snapshot import Row
from metadata import task_types
from metadata.tree import walk_tasks

if TYPE_CHECKING:
    from executions.decider.walk import Walk

_REF = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,127}")
# Types a branch may have: one task, not a structure of tasks.
BRANCH_TYPES = task_types.WORKER | task_types.SYSTEM | task_types.WAITING


def start(walk: Walk, task: dict, path: str, scope: Scope, inputs: dict, previous: Outcome) -> Outcome:
    if "dynamicForkTasksParam" not in task:
        return dynamic_fork.start(walk, task, path, scope, inputs, previous)
    try:
        branches = branch_tasks(task, inputs, walk.snap.max_fork_items)
    except ValueError as exc:
        row = walk.operator_row(task, path, inputs, "FAILED_WITH_TERMINAL_ERROR", reason=f"FORK_JOIN_DYNAMIC: {exc}")
        return walk.failed(task, row, scope, previous)
    defined = {child["taskReferenceName"] for child, _ in walk_tasks(walk.snap.workflow["tasks"])}
    taken = [
        t["taskReferenceName"]
        for t in branches
        if t["taskReferenceName"] in defined or walk.latest(scope.prefix + t["taskReferenceName"])
    ]
    if taken:
        reason = f"FORK_JOIN_DYNAMIC: reference name '{taken[0]}' is already used in this workflow"
        row = walk.operator_row(task, path, inputs, "FAILED_WITH_TERMINAL_ERROR", reason=reason)
        return walk.failed(task, row, scope, previous)
    row = walk.operator_row(task, path, {**inputs, "forkedTasks": branches}, "IN_PROGRESS")
    return progress(walk, task, row, scope)


def progress(walk: Walk, task: dict, row: Row, scope: Scope) -> Outcome:
    if "dynamicForkTasksParam" not in task:
        return dynamic_fork.progress(walk, task, row, scope)
    if row.status == "COMPLETED_WITH_ERRORS":
        return Outcome(DONE, output=row.output)  # an optional fork that failed
    branches = row.input.get("forkedTasks") or []
    # The fork as FORK_JOIN sees it: its branches, so a failure cancels theirs.
    as_fork = {**task, "forkTasks": [[branch] for branch in branches]}
    limit = task.get("maxConcurrency") or max(len(branches), 1)
    return fork_join.fork(walk, as_fork, row, scope, [(scope, [branch]) for branch in branches], limit)


def branch_tasks(task: dict, inputs: dict, ceiling: int) -> list[dict]:
    """The branch tasks, as normalised task dicts (their inputs literal)."""
    given = inputs.get(task["dynamicForkTasksParam"])
    by_ref = inputs.get(task.get("dynamicForkTasksInputParamName") or "") or {}
    if given is None and ("forkTaskName" in inputs or "forkTaskType" in inputs):
        return _one_task_many_inputs(inputs, ceiling)
    if not isinstance(given, list):
        raise ValueError(f"input '{task['dynamicForkTasksParam']}' must be a list of tasks, not {type(given).__name__}")
    if not isinstance(by_ref, dict):
        raise ValueError(f"input '{task['dynamicForkTasksInputParamName']}' must map reference names to inputs")
    if len(given) > ceiling:
        raise ValueError(f"{len(given)} tasks exceed the limit of {ceiling}")
    tasks, seen = [], set()
    for index, entry in enumerate(given):
        where = f"{task['dynamicForkTasksParam']}[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a task object")
        ref = entry.get("taskReferenceName")
        if not isinstance(ref, str) or not _REF.fullmatch(ref) or ref in seen:
            raise ValueError(f"{where}.taskReferenceName must be a unique reference name, not {ref!r}")
        seen.add(ref)
        own = entry.get("inputParameters")
        given_input = by_ref.get(ref)
        merged = {**(own if isinstance(own, dict) else {}), **(given_input if isinstance(given_input, dict) else {})}
        tasks.append(_branch(entry, where, merged))
    return tasks


def _one_task_many_inputs(inputs: dict, ceiling: int) -> list[dict]:
    name = inputs.get("forkTaskName") or inputs.get("forkTaskType")
    each = inputs.get("forkTaskInputs")
    if not isinstance(each, list):
        raise ValueError("input 'forkTaskInputs' must be a list of inputs, one per branch")
    if len(each) > ceiling:
        raise ValueError(f"{len(each)} tasks exceed the limit of {ceiling}")
    entry = {"name": name, "type": inputs.get("forkTaskType") or "SIMPLE"}
    return [
        _branch(
            {**entry, "taskReferenceName": f"{name}_{index}"},
            f"forkTaskInputs[{index}]",
            item if isinstance(item, dict) else {"input": item},
        )
        for index, item in enumerate(each)
    ]


def _branch(entry: dict, where: str, inputs: dict) -> dict:
    task_type = entry.get("type") or "SIMPLE"
    name = entry.get("name") or entry.get("taskReferenceName")
    if task_type not in BRANCH_TYPES:
        raise ValueError(f"{where}.type '{task_type}' cannot be forked dynamically (one task per branch)")
    if not is_task_name(name):
        raise ValueError(f"{where}.name must be a task name, not {name!r}")
    return {
        "name": name,
        "taskReferenceName": entry["taskReferenceName"],
        "type": task_type,
        "inputParameters": _literal(inputs),
        "optional": entry.get("optional") is True,
    }


def _literal(value: Any) -> Any:
    """Inputs already resolved: escaped, so the walk does not resolve a
    ``${`` inside them again."""
    if isinstance(value, str):
        return value.replace("${", "$${")
    if isinstance(value, dict):
        return {key: _literal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_literal(item) for item in value]
    return value
