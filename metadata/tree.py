"""Walking the task tree of a (normalised) workflow definition, and the key
that names each workflow of a baked snapshot."""

from __future__ import annotations

from collections.abc import Iterator


def snapshot_key(name: str, version: int) -> str:
    """``orders@3``: how a baked snapshot names each workflow it holds."""
    return f"{name}@{version}"


def walk_tasks(tasks: list[dict], where: str = "tasks") -> Iterator[tuple[dict, str]]:
    """Every task, nested ones included, with its field path, depth-first."""
    for index, task in enumerate(tasks):
        here = f"{where}[{index}]"
        yield task, here
        yield from children(task, here)


def children(task: dict, where: str) -> Iterator[tuple[dict, str]]:
    for case, branch in task.get("decisionCases", {}).items():
        yield from walk_tasks(branch, f"{where}.decisionCases.{case}")
    yield from walk_tasks(task.get("defaultCase", []), f"{where}.defaultCase")
    for index, branch in enumerate(task.get("forkTasks", [])):
        yield from walk_tasks(branch, f"{where}.forkTasks[{index}]")
    yield from walk_tasks(task.get("loopOver", []), f"{where}.loopOver")
    if "forkTask" in task:
        yield task["forkTask"], f"{where}.forkTask"
        yield from children(task["forkTask"], f"{where}.forkTask")
