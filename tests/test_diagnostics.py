"""Diagnosing "why is my task not running?" (SPEC §9): queues, depth,
workers' last polls, and blockedBy on every waiting task."""

from __future__ import annotations

import datetime as dt

from nodeflow import clock
from quotas import diagnostics
from quotas.models import WorkerPoll
from tests.controls_helpers import at, fill
from tests.engine_helpers import complete, execution, fail, poll, register, simple, start, task_at, task_def


def test_queues_show_depth_and_tasks_in_flight(api):
    fill(api, "charge", 3)
    task_def(api, "idle")
    poll(api, "charge")
    assert api.get("queues").json() == [
        {"taskType": "charge", "depth": 2, "inFlight": 1},
        {"taskType": "idle", "depth": 0, "inFlight": 0},
    ]
    assert api.get("queues/charge/depth").json() == {"taskType": "charge", "depth": 2, "inFlight": 1}
    assert api.get("queues/nothing/depth").json() == {"taskType": "nothing", "depth": 0, "inFlight": 0}


def test_paused_tasks_are_not_in_the_depth(api):
    (pk,) = fill(api, "charge", 1)
    api.post(f"executions/{pk}/pause")
    assert api.get("queues/charge/depth").json()["depth"] == 0


def test_workers_show_their_last_poll_per_queue(api, frozen_clock):
    poll(api, "charge", worker="w1")
    poll(api, "refund", worker="w1")
    poll(api, "charge", worker="w2")
    body = api.get("queues/workers").json()
    assert sorted(w["workerId"] for w in body) == ["w1", "w2"]
    w1 = next(w for w in body if w["workerId"] == "w1")
    assert w1["lastPollAt"] == at(frozen_clock)
    assert sorted(q["taskType"] for q in w1["queues"]) == ["charge", "refund"]
    only = api.get("queues/workers?taskType=refund").json()
    assert [(w["workerId"], [q["taskType"] for q in w["queues"]]) for w in only] == [("w1", ["refund"])]


def test_polls_are_recorded_at_most_every_few_seconds(api, frozen_clock):
    poll(api, "charge", worker="w1")
    clock.advance(3)
    poll(api, "charge", worker="w1")
    assert WorkerPoll.objects.get().last_poll_at == frozen_clock
    diagnostics.forget_polls()  # as if POLL_RECORD_S had passed
    poll(api, "charge", worker="w1")
    assert WorkerPoll.objects.get().last_poll_at == frozen_clock + dt.timedelta(seconds=3)


def test_a_ready_task_with_pollers_is_not_blocked(api, frozen_clock):
    (first, second) = fill(api, "charge", 2)
    poll(api, "charge")
    waiting = [task_at(execution(api, pk), "t") for pk in (first, second)]
    assert [t["blockedBy"] for t in waiting if t["status"] == "SCHEDULED"] == [None]


def test_a_queue_nobody_polls_lately_says_no_pollers(api, frozen_clock):
    (pk,) = fill(api, "charge", 1)
    poll(api, "other")
    assert task_at(execution(api, pk), "t")["blockedBy"] == {
        "control": "noPollers",
        "limit": None,
        "current": 0,
        "since": at(frozen_clock),
    }
    poll(api, "charge", worker="w1")  # leases it: a worker polls "charge" now
    (pk,) = fill(api, "charge", 1)
    assert task_at(execution(api, pk), "t")["blockedBy"] is None
    clock.advance(diagnostics.NO_POLLERS_S + 1)
    assert task_at(execution(api, pk), "t")["blockedBy"]["control"] == "noPollers"


def test_starts_into_a_queue_nobody_polls_read_the_polls_once_a_second(api, frozen_clock, monkeypatch):
    """A backfill into a queue before its workers run: the first start's
    answer reads the poll table, the next ones (within UNPOLLED_FOR_S)
    remember it; a poll in this process is seen by the next start at once."""
    looks: list[str] = []
    last_poll = diagnostics.last_poll

    def counting(**where):
        looks.append(where["queue"])
        return last_poll(**where)

    monkeypatch.setattr(diagnostics, "last_poll", counting)
    task_def(api, "backfill")
    register(api, "fill_one", simple("t", "backfill"))
    for _ in range(3):
        assert task_at(start(api, "fill_one"), "t")["blockedBy"]["control"] == "noPollers"
    assert looks == ["backfill"]
    poll(api, "backfill", worker="w1")
    assert task_at(start(api, "fill_one"), "t")["blockedBy"] is None


def test_a_capped_queue_says_concurrent_exec_limit(api, frozen_clock):
    ids = fill(api, "charge", 2, concurrentExecLimit=1)
    (leased,) = poll(api, "charge", count=10)
    waiting = next(task_at(execution(api, pk), "t") for pk in ids if pk != leased["executionId"])
    assert waiting["blockedBy"] == {
        "control": "concurrentExecLimit",
        "limit": 1,
        "current": 1,
        "since": at(frozen_clock),
    }
    complete(api, leased)
    assert task_at(execution(api, waiting["executionId"]), "t")["blockedBy"] is None


def test_paused_and_retry_backoff_come_before_the_queue(api, frozen_clock):
    task_def(api, "charge", concurrentExecLimit=1, retryDelaySeconds=30, jitter=0)
    register(api, "wf", simple("t", "charge"))
    started = start(api, "wf")
    fail(api, poll(api, "charge")[0])
    backoff = task_at(execution(api, started["id"]), "t")["blockedBy"]
    assert (backoff["control"], backoff["until"]) == ("retryBackoff", at(frozen_clock, 30))
    api.post(f"executions/{started['id']}/pause")
    assert task_at(execution(api, started["id"]), "t")["blockedBy"]["control"] == "paused"


def test_the_seed_diagnosis_curls_answer(api):
    (pk,) = fill(api, "charge", 1, concurrentExecLimit=2)
    view = api.get(f"executions/{pk}").json()
    assert {"status", "awaitingAdmission", "reasonForIncompletion"} <= set(view)
    assert set(api.get("queues/charge/depth").json()) == {"taskType", "depth", "inFlight"}
    assert isinstance(api.get("queues").json(), list)
    assert api.get("queues/workers").status_code == 200
    assert api.get("semaphores").json() == []
    assert api.get("metadata/task-definitions/charge").json()["concurrentExecLimit"] == 2
    assert api.post(f"executions/{pk}/decide").status_code == 200


def test_developers_read_diagnostics_and_workers_do_not(api_for):
    developer, worker = api_for("developer"), api_for("worker")
    for path in ("queues", "queues/charge/depth", "queues/workers", "semaphores"):
        assert developer.get(path).status_code == 200, path
        assert worker.get(path).status_code == 403, path
