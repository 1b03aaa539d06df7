"""Tasks whose name is chosen at run time (Conductor's idioms).

- DYNAMIC: ``dynamicTaskNameParam`` names the input whose value, at run
  time, is the name of the task to run: a SIMPLE task of that name (its
  queue, its task definition's policy and controls). Walked in its place
  (``concrete``), so it is scheduled, capped, retried and timed out as any
  SIMPLE task; its row records the name it resolved to, and later walks take
  the name from the row. A value that is not a task name fails it terminally.
- SUB_WORKFLOW whose ``subWorkflowParam.name`` (or ``version``) is an
  expression: resolved when the walk reaches it; not baked, so the executor
  starts the child from that workflow's published version (or the version
  given), under the same call-depth limit as any child.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from executions.decider.outcomes import Outcome, Scope

if TYPE_CHECKING:
    from executions.decider.walk import Walk

# nodeflow.fields.NAME_PATTERN, which the decider cannot import (no Django here).
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


def is_task_name(value: Any) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def dynamic_concrete(walk: Walk, task: dict, scope: Scope) -> dict:
    """The SIMPLE task a DYNAMIC task stands for; the DYNAMIC task itself
    (whose ``start`` fails it) when its input names no task."""
    row = walk.latest(scope.prefix + task["taskReferenceName"])
    if row is not None:
        return task if row.type == "DYNAMIC" else _as_simple(task, row.task_def_name)
    name = walk.resolve(task["inputParameters"], scope).get(task["dynamicTaskNameParam"])
    return _as_simple(task, name) if is_task_name(name) else task


def _as_simple(task: dict, name: str) -> dict:
    concrete = {key: value for key, value in task.items() if key != "dynamicTaskNameParam"}
    concrete.update(type="SIMPLE", name=name)
    return concrete


def dynamic_start(walk: Walk, task: dict, path: str, scope: Scope, inputs: dict, previous: Outcome) -> Outcome:
    """Reached only when the input names no task: fail, naming the input."""
    param = task["dynamicTaskNameParam"]
    reason = f"DYNAMIC: input '{param}' must name a task (1–128 of A–Z a–z 0–9 _ . -), not {inputs.get(param)!r}"
    row = walk.operator_row(task, path, inputs, "FAILED_WITH_TERMINAL_ERROR", reason=reason)
    return walk.failed(task, row, scope, previous)


def sub_workflow_concrete(walk: Walk, task: dict, scope: Scope) -> dict:
    """A SUB_WORKFLOW with its name and version resolved, when they are
    expressions (as Conductor allows); the task itself otherwise."""
    param = task["subWorkflowParam"]
    if "${" not in str(param.get("name")) and "${" not in str(param.get("version")):
        return task
    resolved = walk.resolve(param, scope)
    name, version = resolved.get("name"), resolved.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        version = None  # the published version
    return {**task, "subWorkflowParam": {"name": name if is_task_name(name) else str(name), "version": version}}
