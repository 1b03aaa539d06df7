"""Helpers for the retry, timeout, deadline and cancellation tests."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import REGISTRY

from executions.models import Timer
from tests.engine_helpers import execution, task_at


def at(instant: dt.datetime, seconds: float = 0) -> str:
    """The API's rendering of ``instant + seconds``."""
    return (instant + dt.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def parse(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def seconds_between(earlier: str, later: str) -> float:
    return (parse(later) - parse(earlier)).total_seconds()


def metric(name: str, **labels: str) -> float:
    """The sum of this process's samples of ``name`` that have ``labels``
    (whatever their other labels, such as the namespace)."""
    return sum(
        sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


@contextmanager
def counting(name: str, **labels: str) -> Iterator[list[float]]:
    """Yields a list that holds, after the block, how much the counter grew."""
    before = metric(name, **labels)
    grew: list[float] = []
    yield grew
    grew.append(metric(name, **labels) - before)


def timers_of(execution_id: str, kind: str | None = None) -> list[Timer]:
    found = Timer.objects.filter(execution_id=execution_id)
    return list(found.filter(kind=kind) if kind else found)


def sub_workflow(ref: str, child: str, inputs: dict | None = None, **fields) -> dict:
    return {
        "name": "call_" + child,
        "taskReferenceName": ref,
        "type": "SUB_WORKFLOW",
        "subWorkflowParam": {"name": child},
        "inputParameters": inputs or {},
        **fields,
    }


def loop(ref: str, condition: str, *body: dict, max_iterations: int = 100) -> dict:
    return {
        "name": ref,
        "taskReferenceName": ref,
        "type": "DO_WHILE",
        "loopCondition": condition,
        "loopOver": list(body),
        "maxIterations": max_iterations,
    }


def child_of(api, parent: dict, ref: str = "sub") -> dict:
    child_id = task_at(execution(api, parent["id"]), ref)["subWorkflowId"]
    assert child_id, f"{ref} has no child yet"
    return execution(api, child_id)


def act(api, execution_id: str, verb: str, body: dict | None = None, *, expect: int = 200) -> dict:
    response = api.post(f"executions/{execution_id}/{verb}", body or {})
    assert response.status_code == expect, response.json()
    return response.json()
