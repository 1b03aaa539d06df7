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
    body = {"results": [{"taskId": t["taskId"], "leaseToken": t["leaseToken"], "status": "COMPLETED"} for t in (first, second)]}
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
