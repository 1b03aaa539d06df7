"""Purging finished executions (``executions.purge`` and ``manage.py
nodeflow_purge``): only old finished trees go, with every row hanging off
them; running trees stay; batches, archive, dry run, re-runs; and on
PostgreSQL, rows another transaction holds are skipped, not waited for."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import threading
import uuid

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import connection, models

from executions.models import DecideRequest, Execution, Message, Task, Timer, TimerKind
from executions.purge import purge_executions, purged_models
from nodeflow import clock
from quotas.models import Admission, Semaphore, SemaphoreHolder
from tests.engine_helpers import complete, poll_one, register, simple, start, sweep, task_at

DAY = dt.timedelta(days=1)


@pytest.fixture
def flows(api, frozen_clock):
    register(api, "one", simple("work"))
    register(api, "idle", simple("never_polled"))
    register(api, "child", simple("inner"))
    register(
        api,
        "parent",
        {"name": "call", "taskReferenceName": "sub", "type": "SUB_WORKFLOW", "subWorkflowParam": {"name": "child"}},
    )
    return api


def completed(api) -> str:
    started = start(api, "one", {"n": 1})
    complete(api, poll_one(api, "work"), {"done": True})
    assert Execution.objects.get(pk=started["id"]).status == "COMPLETED"
    return started["id"]


def terminated(api, name: str = "one") -> str:
    started = start(api, name)
    assert api.post(f"executions/{started['id']}/terminate", {"reason": "stop"}).status_code == 200
    return started["id"]


def running(api, name: str = "idle") -> str:
    return start(api, name)["id"]


def tree(api) -> tuple[str, str]:
    """A parent whose child has ended while the parent still runs."""
    parent = start(api, "parent")["id"]
    child = task_at(parent_view(api, parent), "sub")["subWorkflowId"]
    complete(api, poll_one(api, "inner"))
    return parent, child


def parent_view(api, execution_id: str) -> dict:
    return api.get(f"executions/{execution_id}").json()


def exists(*ids: str) -> list[bool]:
    found = {str(pk) for pk in Execution.objects.filter(pk__in=ids).values_list("pk", flat=True)}
    return [pk in found for pk in ids]


def leftovers(execution_id: str) -> None:
    """Rows that can still hang off a finished execution."""
    execution = Execution.objects.get(pk=execution_id)
    now = clock.now()
    Timer.objects.create(kind=TimerKind.WAIT, execution=execution, due_at=now + 100 * DAY)
    Message.objects.create(execution=execution, payload={"hi": 1}, created_at=now)
    DecideRequest.objects.create(execution=execution, due_at=now + 100 * DAY)
    Admission.objects.create(
        namespace_id=execution.namespace_id, bucket="b", execution=execution, admitted=True, created_at=now
    )
    semaphore = Semaphore.objects.create(
        namespace_id=execution.namespace_id, name=f"s-{execution_id[:8]}", permits=1, created_at=now, updated_at=now
    )
    task = Task.objects.filter(execution=execution).first()
    SemaphoreHolder.objects.create(semaphore=semaphore, task=task, acquired_at=now)


def test_it_purges_only_finished_executions_older_than_the_cutoff(flows):
    old_done, old_stopped = completed(flows), terminated(flows)
    old_running = running(flows)
    leftovers(old_done)
    clock.advance((10 * DAY).total_seconds())
    recent = completed(flows)

    purged = purge_executions(older_than=clock.now() - 5 * DAY)

    assert purged == 2
    assert exists(old_done, old_stopped, old_running, recent) == [False, False, True, True]
    for model in (Task, Timer, Message, DecideRequest, Admission):
        assert not model.objects.filter(execution_id__in=[old_done, old_stopped]).exists(), model
    assert not SemaphoreHolder.objects.exists()
    assert Task.objects.filter(execution_id=recent).exists()


def test_it_deletes_every_kind_of_row_that_references_an_execution_or_a_task():
    """A new model pointing at executions or tasks must be purged too (or be
    a deliberate exception): this fails until purge.purged_models names it."""
    known = set(purged_models())
    for model in apps.get_models():
        for field in model._meta.get_fields():
            if isinstance(field, models.ForeignKey | models.OneToOneField) and field.related_model in (Execution, Task):
                assert model in known, f"{model.__name__}.{field.name} is not purged with its execution"


def test_it_keeps_a_tree_whose_parent_still_runs_and_purges_a_finished_tree_whole(flows):
    parent, child = tree(flows)  # the child ended; the parent runs on
    done_parent = terminated(flows, "parent")  # terminating cascades to its child
    done_child = task_at(parent_view(flows, done_parent), "sub")["subWorkflowId"]
    assert Execution.objects.get(pk=done_child).status == "TERMINATED"
    clock.advance((30 * DAY).total_seconds())

    purged = purge_executions(older_than=clock.now() - DAY)

    assert purged == 2
    assert exists(parent, child, done_parent, done_child) == [True, True, False, False]


def test_it_keeps_a_finished_parent_whose_child_ended_after_the_cutoff(flows):
    parent, child = tree(flows)
    sweep()  # the parent re-decides and completes
    assert Execution.objects.get(pk=parent).status == "COMPLETED"
    clock.advance((30 * DAY).total_seconds())
    # An operator re-ran the child much later (only the child is recent).
    Execution.objects.filter(pk=child).update(ended_at=clock.now())

    assert purge_executions(older_than=clock.now() - DAY) == 0
    assert exists(parent, child) == [True, True]


def test_it_works_in_batches_and_reports_progress(flows):
    ids = [terminated(flows) for _ in range(5)]
    clock.advance((2 * DAY).total_seconds())
    calls: list[tuple[int, int]] = []

    purged = purge_executions(older_than=clock.now() - DAY, batch_size=2, progress=lambda d, t: calls.append((d, t)))

    assert purged == 5
    assert calls == [(2, 5), (4, 5), (5, 5)]
    assert exists(*ids) == [False] * 5


def test_it_counts_without_deleting_on_a_dry_run_and_a_second_run_finds_nothing(flows):
    ids = [completed(flows), terminated(flows)]
    clock.advance((2 * DAY).total_seconds())
    cutoff = clock.now() - DAY

    assert purge_executions(older_than=cutoff, dry_run=True, batch_size=1) == 2
    assert exists(*ids) == [True, True]
    assert purge_executions(older_than=cutoff) == 2
    assert purge_executions(older_than=cutoff) == 0
    assert purge_executions(older_than=cutoff, dry_run=True) == 0


def test_it_purges_one_namespace_only(flows, api_for):
    other = api_for("admin", "other")
    register(other, "one", simple("work"))
    mine, theirs = terminated(flows), terminated(other)
    clock.advance((2 * DAY).total_seconds())

    assert purge_executions(older_than=clock.now() - DAY, namespace="other") == 1
    assert exists(mine, theirs) == [True, False]


def test_it_archives_each_execution_with_its_tasks_before_deleting(flows, tmp_path):
    done = completed(flows)
    Message.objects.create(execution_id=done, payload={"note": "kept"}, created_at=clock.now())
    stopped = terminated(flows)
    clock.advance((2 * DAY).total_seconds())

    assert purge_executions(older_than=clock.now() - DAY, archive_dir=tmp_path, batch_size=1) == 2

    files = sorted(tmp_path.iterdir())
    assert [f.name.endswith(".jsonl.gz") for f in files] == [True, True]  # one file per batch, no partials
    lines = [json.loads(line) for f in files for line in gzip.decompress(f.read_bytes()).splitlines()]
    by_id = {line["id"]: line for line in lines}
    assert set(by_id) == {done, stopped}
    assert by_id[done]["status"] == "COMPLETED" and by_id[done]["namespace"] == "default"
    assert by_id[done]["input"] == {"n": 1}
    assert [(t["path"], t["status"], t["output"]) for t in by_id[done]["tasks"]] == [
        ("work", "COMPLETED", {"done": True})
    ]
    assert [m["payload"] for m in by_id[done]["messages"]] == [{"note": "kept"}]
    assert [t["status"] for t in by_id[stopped]["tasks"]] == ["CANCELED"]


def test_the_command_purges_with_a_progress_bar_and_says_how_many(flows, tmp_path):
    ids = [terminated(flows) for _ in range(3)]
    clock.advance((40 * DAY).total_seconds())
    out, err = io.StringIO(), io.StringIO()

    call_command("nodeflow_purge", "--older-than-days", "30", "--batch-size", "2", "--dry-run", stdout=out, stderr=err)
    assert "would purge 3 execution(s)" in out.getvalue()
    assert exists(*ids) == [True] * 3

    out, err = io.StringIO(), io.StringIO()
    call_command("nodeflow_purge", "--older-than-days", "30", "--archive-dir", str(tmp_path), stdout=out, stderr=err)
    assert "purged 3 execution(s)" in out.getvalue()
    assert "purging [" in err.getvalue() and "3/3 (100%" in err.getvalue()
    assert exists(*ids) == [False] * 3
    assert len(list(tmp_path.iterdir())) == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["--older-than-days", "-1"], "--older-than-days"),
        (["--older-than-days", "1", "--batch-size", "0"], "--batch-size"),
        (["--older-than-days", "1", "--namespace", "ghost"], "namespace 'ghost' does not exist"),
    ],
)
def test_the_command_refuses_bad_arguments(db, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("nodeflow_purge", *args, stdout=io.StringIO(), stderr=io.StringIO())


# --- beside a live server (PostgreSQL) ----------------------------------------


def _hold(sql: str, params: list, holding: threading.Event, release: threading.Event) -> threading.Thread:
    """Another session that locks rows with ``sql`` and holds them until ``release``."""
    import psycopg

    settings_dict = connection.settings_dict
    conninfo = {
        "dbname": settings_dict["NAME"],
        "user": settings_dict["USER"],
        "host": settings_dict["HOST"],
        "port": settings_dict["PORT"] or 5432,
        "password": settings_dict["PASSWORD"] or None,
    }

    def run() -> None:
        with psycopg.connect(**conninfo) as other:
            other.execute(sql, params)
            holding.set()
            release.wait(30)
            other.rollback()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert holding.wait(10), "the other session did not take its lock"
    return thread


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("held", ["execution", "timer"])
def test_it_skips_trees_another_transaction_holds_and_takes_them_next_run(api, frozen_clock, held):
    if connection.vendor != "postgresql":
        pytest.skip("row locks held by another session need PostgreSQL: SQLite has one database-wide writer")
    register(api, "one", simple("work"))
    busy, free = terminated(api), terminated(api)
    Timer.objects.create(kind=TimerKind.WAIT, execution_id=busy, due_at=clock.now())
    clock.advance((2 * DAY).total_seconds())
    sql = {
        # A retry or decision holding the execution's row lock.
        "execution": "SELECT 1 FROM executions_execution WHERE id = %s FOR UPDATE",
        # A sweeper that claimed the timer and waits for the execution.
        "timer": "SELECT 1 FROM executions_timer WHERE execution_id = %s FOR UPDATE",
    }[held]
    holding, release = threading.Event(), threading.Event()
    thread = _hold(sql, [uuid.UUID(busy)], holding, release)
    try:
        # Returns at once: skipped, not waited for (a wait would deadlock the sweeper).
        assert purge_executions(older_than=clock.now() - DAY) == 1
        assert exists(busy, free) == [True, False]
    finally:
        release.set()
        thread.join(10)
    assert purge_executions(older_than=clock.now() - DAY) == 1
    assert exists(busy) == [False]
