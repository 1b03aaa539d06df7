"""Retries, restarts and starts racing for the last slots, across real API
processes on PostgreSQL: however they interleave, no more root runs than the
definition's maxConcurrentExecutions or the namespace quota allow are ever
RUNNING, and every refusal is a start's 429 (issue 14).

On SQLite every transaction already holds the one database-wide write lock,
so these races cannot arise; tests/test_admission_paths.py checks the same
paths in one process on both databases."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection

from executions.models import Execution
from nodeflow.keys import create_api_key
from tests.procs.stack import Stack, live_database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.postgres]

SLOTS = 3


@pytest.fixture(autouse=True)
def _postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("multi-process races need PostgreSQL: SQLite serialises every writer already")


@pytest.fixture
def clients():
    """Clients of two API processes, sharing one admin key."""
    key = create_api_key(role="admin", namespace="default")[1]
    stacks = [Stack(live_database_url()) for _ in range(2)]
    for stack in stacks:
        stack.add_api()
    for stack in stacks:
        stack.wait_for_api()
    yield [httpx.Client(base_url=f"{s.url}/v1/ns/default/", headers={"x-api-key": key}, timeout=30) for s in stacks]
    for stack in stacks:
        stack.stop()


def _ended_runs(client: httpx.Client, count: int) -> list[str]:
    """``count`` terminated runs of ``capped``, started SLOTS at a time."""
    ended: list[str] = []
    while len(ended) < count:
        batch = [client.post("executions", json={"name": "capped"}).json()["id"] for _ in range(SLOTS)]
        for pk in batch:
            client.post(f"executions/{pk}/terminate", json={"reason": "set-up"}).raise_for_status()
        ended += batch
    return ended[:count]


@pytest.mark.parametrize("control", ["maxConcurrentExecutions", "quota"])
def test_retries_restarts_and_starts_never_take_more_than_the_slots(clients, control):
    admin = clients[0]
    definition = {"name": "capped", "tasks": [{"name": "nobody_polls", "taskReferenceName": "t"}]}
    if control == "maxConcurrentExecutions":
        definition["maxConcurrentExecutions"] = SLOTS
    admin.post("metadata/workflow-definitions", json=definition).raise_for_status()
    ended = _ended_runs(admin, 12)
    if control == "quota":
        admin.put("quotas", json={"maxConcurrentExecutions": SLOTS}).raise_for_status()
    calls = (
        [("post", f"executions/{pk}/retry") for pk in ended[:6]]
        + [("post", f"executions/{pk}/restart") for pk in ended[6:]]
        + [("post", "executions")] * 12
    )

    def call(item: tuple[int, tuple[str, str]]) -> httpx.Response:
        index, (_, path) = item
        body = {"name": "capped"} if path == "executions" else {}
        return clients[index % 2].post(path, json=body)

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(call, enumerate(calls)))
    accepted = [r for r in answers if r.status_code in (200, 201)]
    refused = [r for r in answers if r.status_code == 429]
    assert len(accepted) == SLOTS and len(refused) == len(calls) - SLOTS, [r.status_code for r in answers]
    error = "LIMIT_EXCEEDED" if control == "maxConcurrentExecutions" else "QUOTA_EXCEEDED"
    assert {r.json()["error"] for r in refused} == {error}
    assert {r.json()["limit"] for r in refused} == {SLOTS} and {r.json()["current"] for r in refused} == {SLOTS}
    assert Execution.objects.filter(status="RUNNING").count() == SLOTS
    # A refused retry or restart left its run as it was.
    assert Execution.objects.filter(pk__in=ended, status="TERMINATED").count() == len(ended) - sum(
        1 for r in accepted if r.json()["id"] in ended
    )
