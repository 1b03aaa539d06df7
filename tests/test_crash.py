"""Crash test: executions run to completion through SIGKILLs.

Workflows with a fork, a join and a sub-workflow run across separate
processes (the API, two deciders, a sweeper, three workers). Processes are
SIGKILLed at random moments and restarted. Afterwards every execution has
the output its input implies and no task was completed twice in state.
Real processes and real time: bounded, not slept through for a timeout.
"""

from __future__ import annotations

import random
import time

import pytest
from django.db.models import Count

from executions.models import Execution, Task
from nodeflow.keys import create_api_key
from nodeflow_worker import Client
from tests.procs.stack import Stack, live_database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EXECUTIONS = 24
CHAOS_S = 12.0
FINISH_S = 90.0


def register(client: Client) -> None:
    def post(path: str, body: dict) -> None:
        client.http.post(f"/v1/ns/default/{path}", json=body).raise_for_status()

    # A killed worker's lease runs out after 2 s and the attempt is retried.
    for name in ("step", "branch"):
        post(
            "metadata/task-definitions",
            {"name": name, "startToCloseTimeout": 2, "retryCount": 50, "retryDelaySeconds": 0.05, "jitter": 0},
        )
    post(
        "metadata/workflow-definitions",
        {
            "name": "crash_child",
            "tasks": [
                {"name": "step", "taskReferenceName": "c1", "inputParameters": {"value": "${workflow.input.value}"}}
            ],
            "outputParameters": {"value": "${c1.output.value}"},
        },
    )
    post(
        "metadata/workflow-definitions",
        {
            "name": "crash_flow",
            "tasks": [
                {"name": "step", "taskReferenceName": "s1", "inputParameters": {"value": "${workflow.input.n}"}},
                {
                    "name": "fork",
                    "taskReferenceName": "fork",
                    "type": "FORK_JOIN",
                    "forkTasks": [
                        [
                            {
                                "name": "branch",
                                "taskReferenceName": "b1",
                                "inputParameters": {"value": "${s1.output.value}"},
                            }
                        ],
                        [
                            {
                                "name": "branch",
                                "taskReferenceName": "b2",
                                "inputParameters": {"value": "${s1.output.value}"},
                            }
                        ],
                    ],
                },
                {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["b1", "b2"]},
                {"name": "step", "taskReferenceName": "s2", "inputParameters": {"value": "${b2.output.value}"}},
                {
                    "name": "child",
                    "taskReferenceName": "child",
                    "type": "SUB_WORKFLOW",
                    "subWorkflowParam": {"name": "crash_child"},
                    "inputParameters": {"value": "${s2.output.value}"},
                },
                {"name": "step", "taskReferenceName": "s3", "inputParameters": {"value": "${child.output.value}"}},
            ],
            "outputParameters": {"result": "${s3.output.value}"},
        },
    )


@pytest.fixture
def stack():
    stack = Stack(live_database_url())
    yield stack
    stack.stop()


def test_it_finishes_every_execution_through_sigkills(stack):
    key = create_api_key(role="admin", namespace="default")[1]
    stack.add_api()
    stack.wait_for_api()
    for name in ("decider-1", "decider-2"):
        stack.add_role(name, "nodeflow_decider")
    stack.add_role("sweeper", "nodeflow_sweeper")
    for index in range(3):
        stack.add_worker(f"worker-{index}", key, "step", "branch")
    client = Client(stack.url, key)
    register(client)
    ids = {client.start("crash_flow", {"n": n})["id"]: n for n in range(EXECUTIONS)}

    rng = random.Random(7)
    chaos_until = time.monotonic() + CHAOS_S
    while time.monotonic() < chaos_until:
        time.sleep(rng.uniform(0.2, 0.8))
        stack.restart(rng.choice(sorted(stack.processes)))
    stack.wait_for_api()

    deadline = time.monotonic() + FINISH_S
    while time.monotonic() < deadline and Execution.objects.filter(id__in=ids, status="RUNNING").exists():
        time.sleep(0.5)

    executions = {str(e.id): e for e in Execution.objects.filter(id__in=ids)}
    unfinished = {pk: e.status for pk, e in executions.items() if e.status != "COMPLETED"}
    assert not unfinished, f"{len(unfinished)} did not complete: {unfinished}\n{stack.logs()}"
    for pk, n in ids.items():
        assert executions[pk].output == {"result": n + 5}, executions[pk].output
    twice = (
        Task.objects.filter(status="COMPLETED")
        .values("execution_id", "run", "path")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    assert not twice.exists(), list(twice)
    print(
        f"\ncrash test: {EXECUTIONS} executions completed, {stack.kills} SIGKILLs, "
        f"{Task.objects.filter(deliveries__gt=1).count()} re-deliveries, "
        f"{Task.objects.filter(attempt__gt=1).count()} retried attempts"
    )
