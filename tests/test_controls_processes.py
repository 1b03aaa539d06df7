"""The controls across real processes, on PostgreSQL: pollers in several
processes never see more than the cap in flight, a semaphore over its
permits or more dispatches in a window than the limit; admission runs in
start order; concurrent starts never both take the last quota slot; each
schedule firing happens once with several schedulers.

On SQLite every transaction already holds the one database-wide write lock,
so these multi-process races cannot arise; the same controls are checked
there by the single-process tests."""

from __future__ import annotations

import itertools
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.core.management import call_command
from django.db import connection

from executions.models import Execution, Task
from nodeflow.keys import create_api_key
from quotas.models import Admission
from tests.procs.stack import Stack, live_database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture(autouse=True)
def _postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("multi-process races need PostgreSQL: SQLite serialises every writer already")


@pytest.fixture
def stacks():
    made: list[Stack] = []

    def make() -> Stack:
        stack = Stack(live_database_url())
        made.append(stack)
        return stack

    yield make
    for stack in made:
        stack.stop()


def test_the_stress_run_never_exceeds_a_limit(tmp_path):
    out = tmp_path / "figures.json"
    with (tmp_path / "log").open("w") as log:
        call_command(
            "nodeflow_stress",
            processes=3,
            pollers=6,
            seconds=5,
            cap=3,
            permits=4,
            rate=15,
            window_s=1.0,
            tasks=300,
            batch=3,
            check=True,
            json=str(out),
            stdout=log,
        )
    figures = json.loads(out.read_text())
    cap, sem, rate = figures["concurrentExecLimit"], figures["semaphore"], figures["rateLimit"]
    assert 0 < cap["maxObserved"] <= 3, figures
    assert 0 < sem["maxObserved"] <= 4, figures
    assert 0 < rate["maxPerWindow"] <= 15, figures
    # The limits were pressed against, not idle: the pollers wanted more.
    assert figures["leases"]["stress_capped"] >= 30 and figures["leases"]["stress_shared"] >= 30, figures


def _client(stack: Stack, key: str) -> httpx.Client:
    return httpx.Client(base_url=f"{stack.url}/v1/ns/default/", headers={"x-api-key": key}, timeout=30)


def _api_stack(stacks, *roles: str) -> Stack:
    stack = stacks()
    stack.add_api()
    for index, role in enumerate(roles):
        stack.add_role(f"{role}-{index}", role)
    stack.wait_for_api()
    return stack


def test_admission_runs_in_start_order_across_processes(stacks):
    key = create_api_key(role="admin", namespace="default")[1]
    stack = _api_stack(stacks, "nodeflow_decider", "nodeflow_decider")
    client = _client(stack, key)
    client.post(
        "metadata/workflow-definitions",
        json={
            "name": "tenant_sync",
            "tasks": [{"name": "sync", "taskReferenceName": "sync", "inputParameters": {"value": 1}}],
            "rateLimitConfig": {"rateLimitKey": "${workflow.input.tenantId}", "concurrentExecLimit": 1},
        },
    ).raise_for_status()
    order = {"acme": [], "globex": []}
    for tenant in ["acme"] * 6 + ["globex"] * 3:
        order[tenant].append(
            client.post("executions", json={"name": "tenant_sync", "input": {"tenantId": tenant}}).json()["id"]
        )
    for index in range(3):
        stack.add_worker(f"worker-{index}", key, "sync")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and Execution.objects.exclude(status="COMPLETED").exists():
        time.sleep(0.2)
    assert not Execution.objects.exclude(status="COMPLETED").exists(), stack.logs()
    for tenant, ids in order.items():
        runs = [(Task.objects.get(execution_id=pk).scheduled_at, Execution.objects.get(pk=pk).ended_at) for pk in ids]
        for (_, ended), (next_began, _) in itertools.pairwise(runs):
            assert ended <= next_began, f"{tenant}: admitted out of order or two at once"
    first_acme_end = Execution.objects.get(pk=order["acme"][0]).ended_at
    assert Task.objects.get(execution_id=order["globex"][0]).scheduled_at < first_acme_end  # keys never contend
    assert not Admission.objects.exists()


def _start_many(stack_clients: list[httpx.Client], bodies: list[dict]) -> list[httpx.Response]:
    with ThreadPoolExecutor(16) as pool:
        return list(
            pool.map(
                lambda item: stack_clients[item[0] % len(stack_clients)].post("executions", json=item[1]),
                enumerate(bodies),
            )
        )


def test_concurrent_starts_never_both_take_the_last_slot(stacks):
    key = create_api_key(role="admin", namespace="default")[1]
    clients = [_client(_api_stack(stacks), key) for _ in range(2)]
    admin = clients[0]
    admin.put("quotas", json={"maxConcurrentExecutions": 5}).raise_for_status()
    admin.post(
        "metadata/workflow-definitions",
        json={"name": "held", "tasks": [{"name": "nobody_polls", "taskReferenceName": "t"}]},
    ).raise_for_status()
    answers = _start_many(clients, [{"name": "held"}] * 30)
    codes = sorted(response.status_code for response in answers)
    assert codes == [201] * 5 + [429] * 25
    assert {r.json()["error"] for r in answers if r.status_code == 429} == {"QUOTA_EXCEEDED"}
    assert Execution.objects.filter(status="RUNNING").count() == 5


def test_concurrent_starts_respect_max_concurrent_executions_and_admission(stacks):
    key = create_api_key(role="admin", namespace="default")[1]
    clients = [_client(_api_stack(stacks), key) for _ in range(2)]
    admin = clients[0]
    admin.post(
        "metadata/workflow-definitions",
        json={
            "name": "capped",
            "maxConcurrentExecutions": 3,
            "tasks": [{"name": "nobody_polls", "taskReferenceName": "t"}],
        },
    ).raise_for_status()
    admin.post(
        "metadata/workflow-definitions",
        json={
            "name": "keyed",
            "rateLimitConfig": {"rateLimitKey": "one", "concurrentExecLimit": 2},
            "tasks": [{"name": "nobody_polls", "taskReferenceName": "t"}],
        },
    ).raise_for_status()
    capped = _start_many(clients, [{"name": "capped"}] * 20)
    assert sorted(r.status_code for r in capped) == [201] * 3 + [429] * 17
    keyed = _start_many(clients, [{"name": "keyed"}] * 20)
    assert all(r.status_code == 201 for r in keyed)
    admitted = [r.json() for r in keyed if not r.json()["awaitingAdmission"]]
    assert len(admitted) == 2 and all(len(view["tasks"]) == 1 for view in admitted)
    assert Admission.objects.filter(admitted=True).count() == 2
    assert Admission.objects.filter(admitted=False).count() == 18


def test_each_firing_happens_once_with_several_schedulers(stacks, api):
    api.post(
        "metadata/workflow-definitions", {"name": "tick", "tasks": [{"name": "nobody_polls", "taskReferenceName": "t"}]}
    )
    assert (
        api.post("schedules", {"name": "every2s", "cron": "* * * * * */2", "workflowName": "tick"}).status_code == 201
    )
    stack = stacks()
    began = time.time()
    for index in range(3):
        stack.add_role(f"scheduler-{index}", "nodeflow_scheduler")
    # Real cron time with real processes: wait, bounded, for a few firings
    # (process start-up is slow on a loaded machine), not a fixed span.
    deadline = time.time() + 40
    while time.time() < deadline and Execution.objects.count() < 3:
        time.sleep(0.2)
    stack.stop()
    elapsed = time.time() - began
    keys = list(Execution.objects.values_list("idempotency_key", flat=True))
    assert len(keys) == len(set(keys))
    assert 2 <= len(keys) <= elapsed / 2 + 1, (len(keys), elapsed)
