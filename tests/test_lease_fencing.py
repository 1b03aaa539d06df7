"""A lease is fenced by time as well as by token (issue 15.1).

Once a lease has expired, its worker may no longer heartbeat or report,
whatever the sweeper has done meanwhile: 409 and nothing changes. So the
semaphore, which stops counting an expired lease, never has more holders
that may still report than permits. The sweeper is never run here: the
window between an expiry and its next tick is exactly what is tested.
"""

from __future__ import annotations

import pytest

from executions.models import Task
from nodeflow import clock
from tests.controls_helpers import fill
from tests.engine_helpers import poll_one, report

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(api, frozen_clock) -> list[str]:
    api.put("semaphores/pool", {"permits": 1})
    return fill(api, "fenced", 2, semaphores=["pool"], heartbeatTimeout=2, startToCloseTimeout=60)


def _held(api) -> int:
    return api.get("semaphores/pool").json()["held"]


def test_a_late_heartbeat_does_not_revive_an_expired_lease(api, pool):
    first = poll_one(api, "fenced", worker="a")
    clock.advance(2.5)  # worker a goes quiet past its heartbeat timeout
    second = poll_one(api, "fenced", worker="b")  # the permit is free: a's lease expired
    assert _held(api) == 1

    late = api.post(f"tasks/{first['taskId']}/heartbeat", {"leaseToken": first["leaseToken"]})

    assert late.status_code == 409, late.json()
    assert "expired" in late.json()["message"]
    row = Task.objects.get(pk=first["taskId"])
    assert row.status == "IN_PROGRESS" and row.lease_expires_at.isoformat().startswith(first["leaseExpiresAt"][:19])
    assert _held(api) == 1
    assert report(api, second).status_code == 200


def test_a_late_result_is_refused_and_changes_nothing(api, pool):
    first = poll_one(api, "fenced", worker="a")
    clock.advance(2.5)
    response = report(api, first, "COMPLETED", {"late": True})
    assert response.status_code == 409, response.json()
    row = Task.objects.get(pk=first["taskId"])
    assert (row.status, row.output) == ("IN_PROGRESS", {})


def test_a_late_result_in_a_batch_is_refused_alone(api, pool):
    first = poll_one(api, "fenced", worker="a")
    clock.advance(2.5)
    second = poll_one(api, "fenced", worker="b")
    body = {
        "results": [
            {"taskId": t["taskId"], "leaseToken": t["leaseToken"], "status": "COMPLETED"} for t in (first, second)
        ]
    }
    answers = api.post("tasks/results", body).json()["results"]
    assert [a["status"] for a in answers] == [409, 200]
    assert Task.objects.get(pk=first["taskId"]).status == "IN_PROGRESS"
    assert Task.objects.get(pk=second["taskId"]).status == "COMPLETED"


def test_a_heartbeat_in_time_keeps_the_lease_live(api, pool):
    first = poll_one(api, "fenced", worker="a")
    clock.advance(1.5)
    assert api.post(f"tasks/{first['taskId']}/heartbeat", {"leaseToken": first["leaseToken"]}).status_code == 200
    clock.advance(1.5)  # 3 s after the lease was taken, 1.5 s after the heartbeat
    assert report(api, first).status_code == 200


# --- across processes, on PostgreSQL ----------------------------------------------


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_api_processes_never_let_an_expired_lease_report(tmp_path):
    """The sequence of the issue with real processes and no sweeper at all:
    two API processes, worker a on one, worker b on the other. Worker a's
    lease is made to have expired (its row says so: what a silence of 2.5 s
    would leave), b takes the freed permit, and a's heartbeat and result are
    refused by the other process. No clock is moved and nothing sleeps."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("several processes on one database need PostgreSQL")
    import httpx

    from nodeflow.keys import create_api_key
    from tests.procs.stack import Stack, free_port, live_database_url

    key = create_api_key(role="admin", namespace="default")[1]
    stack = Stack(live_database_url())
    try:
        one, two = stack.add_api("api-1"), stack.add_api("api-2", port=free_port())
        stack.wait_for_api(url=one)
        stack.wait_for_api(url=two)
        a = httpx.Client(base_url=f"{one}/v1/ns/default/", headers={"x-api-key": key}, timeout=30)
        b = httpx.Client(base_url=f"{two}/v1/ns/default/", headers={"x-api-key": key}, timeout=30)
        assert a.put("semaphores/pool", json={"permits": 1}).status_code in (200, 201)
        assert a.post(
            "metadata/task-definitions", json={"name": "fenced", "semaphores": ["pool"], "heartbeatTimeout": 2}
        ).status_code in (200, 201)
        assert (
            a.post(
                "metadata/workflow-definitions",
                json={"name": "wf_fenced", "tasks": [{"name": "fenced", "taskReferenceName": "t"}]},
            ).status_code
            == 201
        )
        for _ in range(2):
            assert a.post("executions", json={"name": "wf_fenced"}).status_code == 201
        (first,) = a.post("tasks/poll/fenced", json={"workerId": "a", "count": 1}).json()
        assert b.post("tasks/poll/fenced", json={"workerId": "b", "count": 1}).json() == []  # the permit is a's
        with connection.cursor() as cursor:  # a goes quiet: its lease runs out
            cursor.execute(
                "UPDATE executions_task SET lease_expires_at = now() - interval '0.5 seconds' WHERE id = %s",
                [first["taskId"]],
            )
        (second,) = b.post("tasks/poll/fenced", json={"workerId": "b", "count": 1}).json()

        late = a.post(f"tasks/{first['taskId']}/heartbeat", json={"leaseToken": first["leaseToken"]})
        result = a.post(
            f"tasks/{first['taskId']}/result", json={"leaseToken": first["leaseToken"], "status": "COMPLETED"}
        )

        assert (late.status_code, result.status_code) == (409, 409), (late.json(), result.json())
        assert b.get("semaphores/pool").json()["held"] == 1
        assert Task.objects.get(pk=first["taskId"]).status == "IN_PROGRESS"  # the sweeper (not running) decides
        ok = b.post(
            f"tasks/{second['taskId']}/result", json={"leaseToken": second["leaseToken"], "status": "COMPLETED"}
        )
        assert ok.status_code == 200
    finally:
        stack.stop()
