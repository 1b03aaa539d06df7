"""Schedules (SPEC §8): CRUD, cron in a time zone, pause/resume, and the
scheduler role firing each due schedule once, as a start subject to every
control; a refused firing is recorded on the schedule."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from executions.models import Execution
from executions.roles.scheduler import SchedulerRole
from nodeflow import clock
from quotas.schedules import fire_next_schedule
from tests.controls_helpers import at
from tests.engine_helpers import register, simple, start

NIGHTLY = {"name": "nightly", "cron": "*/5 * * * *", "workflowName": "report", "input": {"full": True}}


@pytest.fixture
def report(api):
    register(api, "report", simple("t", "work", inputParameters={"full": "${workflow.input.full}"}))


def test_it_creates_and_shows_a_schedule(api, report, frozen_clock):
    response = api.post("schedules", NIGHTLY)
    assert response.status_code == 201
    body = response.json()
    assert body == {
        **NIGHTLY,
        "timezone": "UTC",
        "version": None,
        "paused": False,
        "nextFireAt": at(frozen_clock, 300),
        "lastFiredAt": None,
        "lastExecutionId": None,
        "lastError": None,
        "lastRefusal": None,
        "createdAt": at(frozen_clock),
        "updatedAt": at(frozen_clock),
    }
    assert api.get("schedules/nightly").json() == body
    assert api.get("schedules").json() == [body]
    assert api.post("schedules", body).status_code == 200  # a fetched body can be posted back


def test_put_creates_or_replaces_by_name(api, report):
    body = {k: v for k, v in NIGHTLY.items() if k != "name"}
    assert api.put("schedules/nightly", body).status_code == 201
    assert api.put("schedules/nightly", {**body, "cron": "0 * * * *"}).json()["cron"] == "0 * * * *"
    response = api.put("schedules/nightly", {**body, "name": "other"})
    assert response.status_code == 400 and response.json()["field"] == "name"


def test_it_deletes_a_schedule(api, report):
    api.post("schedules", NIGHTLY)
    assert api.delete("schedules/nightly").status_code == 204
    assert api.get("schedules/nightly").status_code == 404
    assert api.delete("schedules/nightly").status_code == 404


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cron": "every five minutes"}, "cron"),
        ({"cron": 5}, "cron"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"workflowName": "missing"}, "workflowName"),
        ({"version": 0}, "version"),
        ({"input": [1]}, "input"),
        ({"paused": "yes"}, "paused"),
        ({"every": "5m"}, "every"),
        ({"name": "bad name"}, "name"),
    ],
)
def test_it_refuses_bad_schedules(api, report, change, field):
    response = api.post("schedules", {**NIGHTLY, **change})
    assert response.status_code == 400, response.json()
    assert response.json()["field"] == field


def test_cron_is_read_in_the_schedules_time_zone(api, report, frozen_clock):
    body = api.post("schedules", {**NIGHTLY, "cron": "0 9 * * *", "timezone": "Europe/Paris"}).json()
    assert body["nextFireAt"] == "2026-06-02T07:00:00Z"  # 09:00 in Paris, summer time


def test_a_due_schedule_fires_once(api, report, frozen_clock):
    api.post("schedules", NIGHTLY)
    assert fire_next_schedule() is False
    clock.advance(300)
    assert fire_next_schedule() is True
    assert fire_next_schedule() is False
    (run,) = Execution.objects.all()
    assert (run.name, run.input) == ("report", {"full": True})
    body = api.get("schedules/nightly").json()
    assert body["lastExecutionId"] == str(run.id)
    assert (body["lastFiredAt"], body["nextFireAt"]) == (at(frozen_clock, 300), at(frozen_clock, 600))


def test_missed_firings_are_not_replayed(api, report, frozen_clock):
    api.post("schedules", NIGHTLY)
    clock.advance(3600 + 60)
    assert SchedulerRole().run_once() == 1
    assert Execution.objects.count() == 1
    assert api.get("schedules/nightly").json()["nextFireAt"] == at(frozen_clock, 3600 + 300)


def test_a_refused_firing_is_recorded_and_skipped(api, frozen_clock):
    register(api, "report", simple("t", "work"), maxConcurrentExecutions=1)
    start(api, "report")
    api.post("schedules", NIGHTLY)
    clock.advance(300)
    assert fire_next_schedule() is True
    body = api.get("schedules/nightly").json()
    assert "maxConcurrentExecutions" in body["lastError"]
    refusal = body["lastRefusal"]
    assert (refusal["error"], refusal["control"], refusal["limit"], refusal["current"]) == (
        "LIMIT_EXCEEDED",
        "maxConcurrentExecutions",
        1,
        1,
    )
    assert (refusal["at"], refusal["scheduledFor"]) == (at(frozen_clock, 300), at(frozen_clock, 300))
    assert body["nextFireAt"] == at(frozen_clock, 600)
    assert Execution.objects.count() == 1


def test_a_quota_refusal_is_recorded_too(api, report, frozen_clock):
    api.put("quotas", {"maxConcurrentExecutions": 0})
    api.post("schedules", NIGHTLY)
    clock.advance(300)
    fire_next_schedule()
    refusal = api.get("schedules/nightly").json()["lastRefusal"]
    assert (refusal["error"], refusal["quota"]) == ("QUOTA_EXCEEDED", "maxConcurrentExecutions")


def test_a_firing_after_a_refusal_clears_it(api, report, frozen_clock):
    api.put("quotas", {"maxConcurrentExecutions": 0})
    api.post("schedules", NIGHTLY)
    clock.advance(300)
    fire_next_schedule()
    api.put("quotas", {})
    clock.advance(300)
    fire_next_schedule()
    body = api.get("schedules/nightly").json()
    assert body["lastError"] is None and body["lastRefusal"] is None and body["lastExecutionId"]


def test_a_paused_schedule_does_not_fire_and_resumes_from_now(api, report, frozen_clock):
    api.post("schedules", NIGHTLY)
    paused = api.post("schedules/nightly/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True and paused.json()["nextFireAt"] is None
    clock.advance(1000)
    assert fire_next_schedule() is False
    resumed = api.post("schedules/nightly/resume").json()
    assert resumed["paused"] is False and resumed["nextFireAt"] == at(frozen_clock, 1200)


def test_a_schedule_can_be_created_paused(api, report, frozen_clock):
    api.post("schedules", {**NIGHTLY, "paused": True})
    clock.advance(300)
    assert fire_next_schedule() is False


def test_it_starts_the_named_version(api, frozen_clock):
    register(api, "report", simple("t", "work"))
    register(api, "report", simple("t2", "work"))  # version 2, a draft
    api.post("schedules", {**NIGHTLY, "version": 2})
    clock.advance(300)
    fire_next_schedule()
    assert Execution.objects.get().version == 2


def test_the_scheduler_command_fires_due_schedules(api, report, frozen_clock):
    api.post("schedules", NIGHTLY)
    clock.advance(300)
    out = StringIO()
    call_command("nodeflow_scheduler", "--once", stdout=out)
    assert "scheduler: 1 unit(s) of work" in out.getvalue()


def test_developers_manage_schedules_and_workers_do_not(api_for, report):
    developer, worker = api_for("developer"), api_for("worker")
    assert developer.post("schedules", NIGHTLY).status_code == 201
    assert developer.post("schedules/nightly/pause").status_code == 200
    assert worker.get("schedules").status_code == 403
    assert worker.post("schedules", NIGHTLY).status_code == 403


def test_the_scheduler_is_an_all_in_one_role():
    import threading

    from executions.roles.all_in_one import all_in_one_roles

    assert "scheduler" in [role.name for role in all_in_one_roles(threading.Event())]
