"""Baking: a workflow version plus every SUB_WORKFLOW it reaches, pinned.

The checks that need other stored workflows happen here: the child exists
(at the named version, if one is named), no cycle, and no static call chain
deeper than ``MAX_CALL_DEPTH`` (the root is depth 0).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from metadata import task_types
from metadata.tree import snapshot_key, walk_tasks
from metadata.validation import DefinitionError

# (name, version or None) → (version, normalised body); raises LookupError.
Resolver = Callable[[str, int | None], tuple[int, dict]]


def bake(*, name: str, version: int, body: dict, resolve: Resolver) -> dict:
    """The snapshot body for ``name@version``: ``{"root", "workflows"}``."""
    workflows: dict[str, dict] = {}
    _visit(name, version, body, depth=0, chain=(name,), resolve=resolve, workflows=workflows, seen={})
    return {"root": snapshot_key(name, version), "workflows": workflows}


def _visit(
    name: str,
    version: int,
    body: dict,
    *,
    depth: int,
    chain: tuple[str, ...],
    resolve: Resolver,
    workflows: dict,
    seen: dict[str, int],
) -> None:
    """``seen`` maps a key to the deepest depth it was checked at. A workflow
    reached again deeper than before is walked again: its children's depth
    limit is stricter on this path."""
    key = snapshot_key(name, version)
    if seen.get(key, -1) >= depth:
        return
    seen[key] = depth
    pinned = copy.deepcopy(body)
    pinned["name"], pinned["version"] = name, version
    workflows[key] = pinned
    for task, where in walk_tasks(pinned["tasks"]):
        if task["type"] != "SUB_WORKFLOW" or "${" in str(task["subWorkflowParam"]["name"]):
            continue  # a name given as an expression is resolved at run time, under the depth limit
        child_version, child_body = _child(task, where, depth=depth, chain=chain, resolve=resolve)
        task["subWorkflowParam"]["version"] = child_version
        child = task["subWorkflowParam"]["name"]
        _visit(
            child,
            child_version,
            child_body,
            depth=depth + 1,
            chain=(*chain, child),
            resolve=resolve,
            workflows=workflows,
            seen=seen,
        )


def _child(task: dict, where: str, *, depth: int, chain: tuple[str, ...], resolve: Resolver) -> tuple[int, dict]:
    ref = task["taskReferenceName"]
    param = task["subWorkflowParam"]
    via = f" (in {chain[-1]})" if len(chain) > 1 else ""
    if param["name"] in chain:
        cycle = " → ".join((*chain, param["name"]))
        raise DefinitionError(f"{where}.subWorkflowParam.name", f"sub-workflow cycle: {cycle}{via}", ref)
    if depth + 1 > task_types.MAX_CALL_DEPTH:
        path = " → ".join((*chain, param["name"]))
        raise DefinitionError(
            f"{where}.subWorkflowParam.name",
            f"sub-workflow chain deeper than {task_types.MAX_CALL_DEPTH}: {path}{via}",
            ref,
        )
    try:
        return resolve(param["name"], param.get("version"))
    except LookupError as exc:
        raise DefinitionError(f"{where}.subWorkflowParam", f"{exc}{via}", ref) from exc
