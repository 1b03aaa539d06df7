"""Helpers for engine tests that drive executions through the HTTP API.

Time is moved with ``nodeflow.clock`` and the background roles are run by
hand (``sweep``): nothing here sleeps.
"""

from __future__ import annotations

from typing import Any

from executions import timers
from executions.roles.decider import DeciderRole
from nodeflow import clock

WORKFLOWS = "metadata/workflow-definitions"
TASK_DEFS = "metadata/task-definitions"


def simple(ref: str, name: str | None = None, **extra: Any) -> dict:
    """A SIMPLE workflow task; its queue is ``name`` (default: the ref)."""
    return {"name": name or ref, "taskReferenceName": ref, **extra}


def task_def(api, name: str, **fields: Any) -> dict:
    response = api.post(TASK_DEFS, {"name": name, **fields})
    assert response.status_code in (200, 201), response.json()
    return response.json()


def register(api, name: str, *tasks: dict, **fields: Any) -> dict:
    response = api.post(WORKFLOWS, {"name": name, "tasks": list(tasks), **fields})
    assert response.status_code == 201, response.json()
    return response.json()


def start(api, name: str, input: dict | None = None, *, expect: int = 201, **fields: Any) -> dict:
    response = api.post("executions", {"name": name, "input": input or {}, **fields})
    assert response.status_code == expect, response.json()
    return response.json()


def execution(api, execution_id: str) -> dict:
    response = api.get(f"executions/{execution_id}")
    assert response.status_code == 200, response.json()
    return response.json()


def tasks_at(view: dict, path: str) -> list[dict]:
    """Every attempt of the logical task at ``path``, oldest first."""
    return [task for task in view["tasks"] if task["path"] == path]


def task_at(view: dict, path: str) -> dict:
    """The latest attempt of the logical task at ``path``."""
    found = tasks_at(view, path)
    assert found, f"no task at {path}: {[t['path'] for t in view['tasks']]}"
    return found[-1]


def statuses(view: dict) -> dict[str, str]:
    """path → status of each logical task's latest attempt."""
    return {task["path"]: task["status"] for task in view["tasks"]}


def poll(api, queue: str, *, count: int = 1, worker: str = "w1", expect: int = 200) -> list[dict]:
    response = api.post(f"tasks/poll/{queue}", {"workerId": worker, "count": count})
    assert response.status_code == expect, response.json()
    return response.json()


def report(api, leased: dict, status: str = "COMPLETED", output: dict | None = None, **fields: Any):
    """POST a result for a leased task; returns the response."""
    body = {"leaseToken": leased["leaseToken"], "status": status, "outputData": output or {}, **fields}
    return api.post(f"tasks/{leased['taskId']}/result", body)


def complete(api, leased: dict, output: dict | None = None) -> dict:
    response = report(api, leased, "COMPLETED", output)
    assert response.status_code == 200, response.json()
    return response.json()


def fail(api, leased: dict, reason: str = "boom", *, terminal: bool = False) -> dict:
    status = "FAILED_WITH_TERMINAL_ERROR" if terminal else "FAILED"
    response = report(api, leased, status, reasonForIncompletion=reason)
    assert response.status_code == 200, response.json()
    return response.json()


def poll_one(api, queue: str, **kwargs: Any) -> dict:
    leased = poll(api, queue, **kwargs)
    assert len(leased) == 1, leased
    return leased[0]


def poll_and_complete(api, queue: str, output: dict | None = None, *, count: int = 1) -> list[dict]:
    """Lease up to ``count`` tasks of ``queue`` and complete each; returns them."""
    leased = poll(api, queue, count=count)
    assert leased, f"nothing to lease in {queue}"
    for item in leased:
        complete(api, item, output)
    return leased


def sweep() -> None:
    """What the background roles would do now: fire due timers, expire
    leases, and drain the decide queue."""
    decider = DeciderRole()
    while timers.fire_next_timer() or timers.expire_next_lease() or decider.tick():
        pass


def advance(seconds: float) -> None:
    """Move the clock forward and let the roles catch up."""
    clock.advance(seconds)
    sweep()


def no_retries(api, *names: str) -> None:
    """Task definitions whose failures are final (retryCount 0)."""
    for name in names:
        task_def(api, name, retryCount=0)
