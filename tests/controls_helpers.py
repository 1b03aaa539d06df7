"""Helpers for the execution-control tests: queues filled with tasks."""

from __future__ import annotations

import datetime as dt
from typing import Any

from tests.engine_helpers import register, simple, start, task_def


def at(instant: dt.datetime, seconds: float = 0) -> str:
    """The API's rendering of ``instant + seconds``."""
    return (instant + dt.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def fill(api, queue: str, count: int, **controls: Any) -> list[str]:
    """A task definition ``queue`` with ``controls``, a one-task workflow
    over it, and ``count`` executions each waiting in the queue."""
    task_def(api, queue, **controls)
    workflow = f"wf_{queue}"
    if api.get(f"metadata/workflow-definitions/{workflow}").status_code == 404:
        register(api, workflow, simple("t", queue, inputParameters={"i": "${workflow.input.i}"}))
    return [start(api, workflow, {"i": i})["id"] for i in range(count)]


def leased_ids(leased: list[dict]) -> set[str]:
    return {item["taskId"] for item in leased}
