"""Workflow admission by key (rateLimitConfig, SPEC §8): later starts wait
RUNNING with awaitingAdmission, schedule nothing, and are admitted in start
order when a holder ends; different keys never contend."""

from __future__ import annotations

import pytest

from nodeflow import clock
from nodeflow.keys import clear_caches
from quotas.models import Admission
from tests.controls_helpers import at
from tests.engine_helpers import complete, execution, poll, register, simple, start, sweep

KEY = "${workflow.input.tenantId}"


def tenant_sync(api, limit: int = 1, **fields) -> None:
    register(
        api,
        "tenant_sync",
        simple("sync", "sync", inputParameters={"tenant": KEY}),
        rateLimitConfig={"rateLimitKey": KEY, "concurrentExecLimit": limit},
        **fields,
    )


def run(api, tenant: str | None) -> dict:
    return start(api, "tenant_sync", {"tenantId": tenant} if tenant is not None else {})


def finish_one(api, tenant: str | None = None) -> None:
    """Complete one leased sync task (of ``tenant`` if given), then let the roles catch up."""
    leased = [t for t in poll(api, "sync", count=100) if tenant is None or t["inputData"]["tenant"] == tenant]
    complete(api, leased[0])
    sweep()


def test_later_starts_of_a_key_wait_and_schedule_nothing(api, frozen_clock):
    tenant_sync(api)
    first, second = run(api, "acme"), run(api, "acme")
    assert (first["status"], first["awaitingAdmission"], len(first["tasks"])) == ("RUNNING", False, 1)
    assert (second["status"], second["awaitingAdmission"], second["tasks"]) == ("RUNNING", True, [])
    assert second["blockedBy"] == {"control": "admission:acme", "limit": 1, "current": 1, "since": at(frozen_clock)}
    assert first["blockedBy"] is None


def test_they_are_admitted_in_start_order_when_a_holder_ends(api):
    tenant_sync(api)
    ids = [run(api, "acme")["id"] for _ in range(4)]
    for index in range(1, 4):
        finish_one(api)
        views = [execution(api, pk) for pk in ids]
        assert [v["awaitingAdmission"] for v in views] == [False] * (index + 1) + [True] * (3 - index)
        assert views[index]["tasks"][0]["status"] == "SCHEDULED"
    finish_one(api)
    assert {execution(api, pk)["status"] for pk in ids} == {"COMPLETED"}
    assert not Admission.objects.exists()


def test_different_keys_never_contend(api):
    tenant_sync(api)
    run(api, "acme"), run(api, "acme"), run(api, "acme")
    globex = run(api, "globex")
    assert globex["awaitingAdmission"] is False and len(globex["tasks"]) == 1


def test_a_key_that_resolves_to_nothing_shares_the_bucket_named_by_the_expression(api):
    tenant_sync(api)
    unkeyed = run(api, None)
    blank = run(api, "")
    assert unkeyed["awaitingAdmission"] is False
    assert blank["awaitingAdmission"] is True
    assert blank["blockedBy"]["control"] == f"admission:{KEY}"
    assert run(api, "acme")["awaitingAdmission"] is False


def test_the_limit_admits_that_many_at_once(api):
    tenant_sync(api, limit=2)
    views = [run(api, "acme") for _ in range(3)]
    assert [v["awaitingAdmission"] for v in views] == [False, False, True]
    assert views[2]["blockedBy"]["limit"] == 2 and views[2]["blockedBy"]["current"] == 2


def test_a_terminated_holder_admits_the_next(api):
    tenant_sync(api)
    first, second = run(api, "acme"), run(api, "acme")
    assert api.post(f"executions/{first['id']}/terminate", {"reason": "x"}).status_code == 200
    sweep()
    assert execution(api, second["id"])["awaitingAdmission"] is False


def test_a_terminated_waiter_leaves_the_line_without_taking_a_slot(api):
    tenant_sync(api)
    first, second, third = run(api, "acme"), run(api, "acme"), run(api, "acme")
    assert api.post(f"executions/{second['id']}/terminate", {}).status_code == 200
    assert execution(api, second["id"])["status"] == "TERMINATED"
    assert execution(api, third["id"])["awaitingAdmission"] is True
    finish_one(api)
    assert execution(api, third["id"])["awaitingAdmission"] is False
    assert execution(api, first["id"])["status"] == "COMPLETED"


def test_the_workflow_timeout_is_armed_when_admitted_not_when_queued(api, frozen_clock):
    tenant_sync(api, timeoutSeconds=100)
    run(api, "acme")
    waiting = run(api, "acme")
    assert waiting["deadline"] is None
    clock.advance(50)
    finish_one(api)
    assert execution(api, waiting["id"])["deadline"] == at(frozen_clock, 150)


def test_the_line_is_in_the_database(api):
    """Nothing a process remembers matters: with every cache dropped (as
    after a restart of every process) the next holder to end admits."""
    tenant_sync(api)
    run(api, "acme")
    waiting = run(api, "acme")
    clear_caches()
    from executions import executor

    executor.snapshot_body.cache_clear()
    finish_one(api)
    assert execution(api, waiting["id"])["awaitingAdmission"] is False


def test_a_paused_waiter_is_admitted_and_runs_on_resume(api):
    tenant_sync(api)
    run(api, "acme")
    waiting = run(api, "acme")
    assert api.post(f"executions/{waiting['id']}/pause", {}).status_code == 200
    finish_one(api)
    view = execution(api, waiting["id"])
    assert (view["status"], view["awaitingAdmission"], view["tasks"]) == ("PAUSED", False, [])
    assert api.post(f"executions/{waiting['id']}/resume", {}).status_code == 200
    assert len(execution(api, waiting["id"])["tasks"]) == 1


def test_waiting_runs_count_against_max_concurrent_executions(api):
    tenant_sync(api, maxConcurrentExecutions=2)
    run(api, "acme"), run(api, "acme")
    response = api.post("executions", {"name": "tenant_sync", "input": {"tenantId": "globex"}})
    assert response.status_code == 429
    assert response.json()["control"] == "maxConcurrentExecutions"


@pytest.mark.parametrize("status", ["COMPLETED", "FAILED"])
def test_a_run_that_ends_in_its_first_decision_holds_no_slot(api, status):
    register(
        api,
        "instant",
        {"name": "set", "taskReferenceName": "set", "type": "SET_VARIABLE", "inputParameters": {"x": 1}},
        *(
            [
                {
                    "name": "stop",
                    "taskReferenceName": "stop",
                    "type": "TERMINATE",
                    "inputParameters": {"terminationStatus": "FAILED"},
                }
            ]
            if status == "FAILED"
            else []
        ),
        rateLimitConfig={"rateLimitKey": "k", "concurrentExecLimit": 1},
    )
    assert start(api, "instant")["status"] == status
    assert start(api, "instant")["status"] == status
    assert not Admission.objects.exists()
