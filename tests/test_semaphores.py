"""Named semaphores (SPEC §8): the API, all-or-nothing acquisition at
dequeue, permits shared by task types, permits as leases, sweeping and the
admin's release."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from nodeflow import clock
from quotas import semaphores
from quotas.models import SemaphoreHolder
from tests.controls_helpers import fill
from tests.engine_helpers import complete, execution, poll, task_at


def test_the_seed_semaphore_flow(api):
    response = api.put("semaphores/legacy_erp", {"permits": 4})
    assert response.status_code == 201
    assert response.json() == {"name": "legacy_erp", "permits": 4, "held": 0, "holders": []}
    fill(api, "export_report", 6, semaphores=["legacy_erp"])
    assert len(poll(api, "export_report", count=10)) == 4
    assert api.get("semaphores").json() == [{"name": "legacy_erp", "permits": 4, "held": 4}]
    assert poll(api, "export_report", count=10) == []


def test_one_semaphore_shows_its_holders(api):
    api.put("semaphores/legacy_erp", {"permits": 2})
    fill(api, "export_report", 1, semaphores=["legacy_erp"])
    (leased,) = poll(api, "export_report", worker="w7")
    body = api.get("semaphores/legacy_erp").json()
    assert (body["name"], body["permits"], body["held"]) == ("legacy_erp", 2, 1)
    (holder,) = body["holders"]
    assert (holder["taskId"], holder["executionId"], holder["taskType"], holder["workerId"]) == (
        leased["taskId"],
        leased["executionId"],
        "export_report",
        "w7",
    )
    assert holder["leaseExpiresAt"] == leased["leaseExpiresAt"]


def test_different_task_types_share_the_permits(api):
    api.put("semaphores/legacy_erp", {"permits": 3})
    fill(api, "export_report", 3, semaphores=["legacy_erp"])
    fill(api, "import_orders", 3, semaphores=["legacy_erp"])
    assert len(poll(api, "export_report", count=2)) == 2
    imported = poll(api, "import_orders", count=10)
    assert len(imported) == 1
    assert poll(api, "export_report", count=10) == []
    complete(api, imported[0])  # a finished task frees its permit in the same commit
    assert len(poll(api, "export_report", count=10)) == 1


def test_a_task_takes_every_semaphore_it_names_or_none(api):
    api.put("semaphores/a", {"permits": 2})
    api.put("semaphores/b", {"permits": 5})
    fill(api, "only_a", 4, semaphores=["a"])
    fill(api, "both", 4, semaphores=["a", "b"])
    held_a = poll(api, "only_a", count=10)
    assert len(held_a) == 2
    assert poll(api, "both", count=10) == []  # b has room but a has none: it takes neither
    assert api.get("semaphores").json() == [
        {"name": "a", "permits": 2, "held": 2},
        {"name": "b", "permits": 5, "held": 0},
    ]
    complete(api, held_a[0])
    (leased,) = poll(api, "both", count=10)
    assert api.get("semaphores").json() == [
        {"name": "a", "permits": 2, "held": 2},
        {"name": "b", "permits": 5, "held": 1},
    ]
    assert {h.semaphore.name for h in SemaphoreHolder.objects.filter(task_id=leased["taskId"])} == {"a", "b"}


def test_an_unconfigured_semaphore_gates_nothing(api):
    fill(api, "export_report", 5, semaphores=["not_yet_created"])
    assert len(poll(api, "export_report", count=10)) == 5
    assert api.get("semaphores").json() == []


def test_deleting_a_semaphore_ungates_its_tasks(api):
    api.put("semaphores/legacy_erp", {"permits": 1})
    fill(api, "export_report", 3, semaphores=["legacy_erp"])
    assert len(poll(api, "export_report", count=10)) == 1
    assert api.delete("semaphores/legacy_erp").status_code == 204
    assert len(poll(api, "export_report", count=10)) == 2
    assert api.get("semaphores/legacy_erp").status_code == 404
    assert api.delete("semaphores/legacy_erp").status_code == 404


def test_fewer_permits_than_holders_lets_nothing_in_until_below(api):
    api.put("semaphores/legacy_erp", {"permits": 3})
    fill(api, "export_report", 6, semaphores=["legacy_erp"])
    leased = poll(api, "export_report", count=10)
    assert api.put("semaphores/legacy_erp", {"permits": 1}).status_code == 200
    complete(api, leased[0])
    assert poll(api, "export_report", count=10) == []
    complete(api, leased[1])
    assert poll(api, "export_report", count=10) == []
    complete(api, leased[2])
    assert len(poll(api, "export_report", count=10)) == 1


def test_a_waiting_task_names_the_semaphore(api):
    api.put("semaphores/legacy_erp", {"permits": 1})
    ids = fill(api, "export_report", 2, semaphores=["legacy_erp"])
    poll(api, "export_report", count=10)
    blocked = [task_at(execution(api, pk), "t")["blockedBy"] for pk in ids]
    waiting = next(b for b in blocked if b is not None)
    assert (waiting["control"], waiting["limit"], waiting["current"]) == ("semaphore:legacy_erp", 1, 1)


def test_a_permit_expires_with_its_task_lease_and_is_swept(api, frozen_clock):
    api.put("semaphores/legacy_erp", {"permits": 1})
    fill(api, "export_report", 2, semaphores=["legacy_erp"], heartbeatTimeout=10, startToCloseTimeout=600)
    (first,) = poll(api, "export_report", count=10)
    assert poll(api, "export_report", count=10) == []
    clock.advance(11)  # the worker went silent: its lease, and so its permit, ran out
    assert api.get("semaphores").json()[0]["held"] == 0
    (second,) = poll(api, "export_report", count=10)
    assert second["taskId"] != first["taskId"]
    assert SemaphoreHolder.objects.count() == 2
    assert semaphores.sweep_stale_holders() == 0  # too young to sweep: a lease may be refreshing it
    clock.advance(semaphores.SWEEP_GRACE_S + 1)
    assert semaphores.sweep_stale_holders() == 2  # the second's lease ran out too by now
    assert SemaphoreHolder.objects.count() == 0


def test_the_celery_beat_sweep_is_the_sweeper_role_and_sweeps_holders_too(api, frozen_clock):
    # Celery's sweep had copied the role's tick without the holder sweep.
    from executions.celery_tasks import sweep

    api.put("semaphores/legacy_erp", {"permits": 1})
    fill(api, "export_report", 1, semaphores=["legacy_erp"], heartbeatTimeout=10, startToCloseTimeout=600)
    poll(api, "export_report")
    clock.advance(11 + semaphores.SWEEP_GRACE_S)
    sweep()
    assert not SemaphoreHolder.objects.exists()


def test_the_sweeper_keeps_holders_that_count(api, frozen_clock):
    api.put("semaphores/legacy_erp", {"permits": 2})
    fill(api, "export_report", 1, semaphores=["legacy_erp"])
    poll(api, "export_report")
    clock.advance(semaphores.SWEEP_GRACE_S + 1)
    assert semaphores.sweep_stale_holders() == 0
    assert api.get("semaphores").json()[0]["held"] == 1


def test_an_admin_action_releases_a_holder(api, client):
    api.put("semaphores/legacy_erp", {"permits": 1})
    fill(api, "export_report", 2, semaphores=["legacy_erp"])
    poll(api, "export_report", count=10)
    holder = SemaphoreHolder.objects.get()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    response = client.post("/admin/quotas/semaphoreholder/", {"action": "release", "_selected_action": [holder.pk]})
    assert response.status_code == 302
    assert not SemaphoreHolder.objects.exists()
    assert len(poll(api, "export_report", count=10)) == 1


def test_release_holder_is_safe_to_run_twice(api):
    api.put("semaphores/legacy_erp", {"permits": 1})
    fill(api, "export_report", 1, semaphores=["legacy_erp"])
    poll(api, "export_report")
    pk = SemaphoreHolder.objects.get().pk
    assert semaphores.release_holder(holder_id=pk) is True
    assert semaphores.release_holder(holder_id=pk) is False


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "permits"),
        ({"permits": -1}, "permits"),
        ({"permits": "4"}, "permits"),
        ({"permits": 1.5}, "permits"),
        ({"permits": 2, "limit": 3}, "limit"),
        ([1], None),
    ],
)
def test_it_refuses_bad_semaphore_bodies(api, body, field):
    response = api.put("semaphores/erp", body)
    assert response.status_code == 400
    assert response.json()["field"] == field


def test_it_refuses_a_bad_semaphore_name(api):
    response = api.put("semaphores/no%20spaces", {"permits": 1})
    assert response.status_code == 400
    assert response.json()["field"] == "name"


def test_developers_read_semaphores_and_only_admins_change_them(api_for):
    admin, developer, worker = api_for("admin"), api_for("developer"), api_for("worker")
    admin.put("semaphores/erp", {"permits": 1})
    assert developer.get("semaphores").status_code == 200
    assert developer.get("semaphores/erp").status_code == 200
    assert developer.put("semaphores/erp", {"permits": 2}).status_code == 403
    assert developer.delete("semaphores/erp").status_code == 403
    assert worker.get("semaphores").status_code == 403


def test_semaphores_belong_to_their_namespace(api_for):
    from nodeflow.keys import ensure_namespace

    ensure_namespace(name="other")
    api_for("admin").put("semaphores/erp", {"permits": 1})
    other = api_for("admin", "other")
    assert other.get("semaphores").json() == []
    assert other.get("semaphores/erp").status_code == 404


def test_a_finished_task_gives_its_holder_rows_back(api):
    api.put("semaphores/legacy_erp", {"permits": 2})
    fill(api, "export_report", 2, semaphores=["legacy_erp"])
    first, second = poll(api, "export_report", count=10)
    complete(api, first)
    assert [str(pk) for pk in SemaphoreHolder.objects.values_list("task_id", flat=True)] == [second["taskId"]]
