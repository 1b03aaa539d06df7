"""The host-local hand-off (executions/handoff.py, PostgreSQL): a task made
ready is leased, in the transaction that made it ready, for a long-poll
parked in any process of the host, and handed to it once that commits;
the poll leases nothing itself and no ready notice is sent. One task wakes
one poll; a task made ready while a poll looks is not missed; a claimer
that dies, a poll's process that dies and a hand-off too large for one
datagram all end with the task leased once and answered, or offered again.

tests/test_sync_match.py runs the same rules with the poll in another
thread of this process (through the registry on PostgreSQL)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from executions import dispatch, handoff, lifecycle, notify
from executions.models import Task, TaskStatus
from metadata.workflows import register_workflow
from nodeflow import transactions
from tests.procs.stack import PYTHON, ROOT, live_database_url
from tests.wakeup_helpers import one_task_namespace, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

QUEUE = "handed"
WAIT_S = 6.0


@pytest.fixture(autouse=True)
def on_postgres():
    if connection.vendor != "postgresql" or not handoff.active():
        pytest.skip("the host-local hand-off is PostgreSQL's")


@pytest.fixture
def namespace():
    return one_task_namespace(QUEUE)


@pytest.fixture
def key(namespace) -> str:
    return notify.queue_key(namespace.id, QUEUE)


def start_one(namespace) -> None:
    """A start as the route makes it: one service transaction."""
    with transactions.outermost():
        lifecycle.start_execution(namespace=namespace, name="one")


def pollers(count: int) -> subprocess.Popen:
    """A process of ``count`` long-polls of QUEUE (tests/procs/pollers.py),
    once its polls are parked in the registry."""
    env = {**os.environ, "DATABASE_URL": live_database_url(), "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [PYTHON, str(ROOT / "tests" / "procs" / "pollers.py"), QUEUE, str(count), str(WAIT_S), "own"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "listed"
    return process


def answers(process: subprocess.Popen) -> tuple[list[list[int]], list[str]]:
    """Each poll's lease statements (tasks leased by each), and the tasks the polls got."""
    out = process.communicate(timeout=WAIT_S + 30)[0].strip().splitlines()
    return json.loads(out[-2]), json.loads(out[-1])


def ready_notices(key: str) -> tuple[psycopg.Connection, list[str]]:
    """A session listening to the task channel, and the ready notices of ``key`` it heard so far."""
    listening = psycopg.connect(live_database_url(), autocommit=True)
    listening.execute(f"LISTEN {notify.TASKS_CHANNEL}")
    return listening, [f"{notify.READY}{key}|"]


def heard_ready(listening: psycopg.Connection, prefix: str) -> list[str]:
    return [note.payload for note in listening.notifies(timeout=0.3, stop_after=100) if note.payload.startswith(prefix)]


def test_a_start_leases_for_a_poll_of_another_process_which_answers_without_a_lease_or_a_notice(namespace, key):
    process = pollers(1)
    try:
        listening, (prefix,) = ready_notices(key)
        with listening:
            start_one(namespace)
            leases, got = answers(process)
            assert heard_ready(listening, prefix) == []  # no ready notice: the task was handed over
    finally:
        process.kill()
    assert leases == [[0]]  # the poll's one look found nothing; it leased nothing itself
    task = Task.objects.get()
    assert got == [str(task.pk)]
    assert (task.status, task.worker_id, task.deliveries) == (TaskStatus.IN_PROGRESS, "w", 1)


def test_across_processes_a_ready_task_goes_to_one_poll(namespace):
    processes = [pollers(3), pollers(3)]
    try:
        with transactions.outermost():
            for _ in range(2):
                lifecycle.start_execution(namespace=namespace, name="one")
        results = [answers(process) for process in processes]
    finally:
        for process in processes:
            process.kill()
    got = [task for _, tasks in results for task in tasks]
    assert sorted(got) == sorted(str(pk) for pk in Task.objects.values_list("pk", flat=True))
    looks = [poll for leases, _ in results for poll in leases]
    # No poll leased anything itself: two were handed a task each, the other
    # four looked once more at their deadline (a look their queue being known
    # empty skips) and went home empty.
    assert all(sum(poll) == 0 and 1 <= len(poll) <= 2 for poll in looks), looks
    assert Task.objects.filter(status=TaskStatus.IN_PROGRESS).count() == 2


class Poller(threading.Thread):
    """One long-poll of QUEUE in a thread of this process; ``got`` is its answer."""

    def __init__(self, namespace, *, wait_s: float = WAIT_S) -> None:
        super().__init__()
        self.namespace, self.wait_s = namespace, wait_s
        self.got: list[Task] | None = None

    def run(self) -> None:
        try:
            self.got = dispatch.poll(namespace=self.namespace, queue=QUEUE, worker_id="w", count=1, wait_s=self.wait_s)
        finally:
            connection.close()

    def parked(self, key: str) -> Poller:
        self.start()
        wait_for(lambda: notify.parked.waiting(key) >= 1)
        return self


def registry_files(key: str) -> list[str]:
    base = handoff._base()
    assert base is not None
    directory = handoff._queue_dir(base, key)
    return sorted(os.listdir(directory)) if directory.exists() else []


def dead_process() -> str:
    """A PROCESS name whose process has ended."""
    finished = subprocess.run([PYTHON, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return f"{finished.stdout.strip()}-000000"


def test_a_poll_whose_claimer_died_before_its_commit_looks_again(namespace, key, monkeypatch):
    monkeypatch.setattr(dispatch, "LISTEN_RECHECK_S", 0.2)
    poller = Poller(namespace).parked(key)
    (parked,) = registry_files(key)
    directory = Path(handoff._queue_dir(handoff._base(), key))
    # A claimer won the poll (renamed its file) and died before it committed anything.
    os.rename(directory / parked, directory / (parked[: -len(handoff.PARKED)] + handoff.CLAIMED + dead_process()))
    start_one(namespace)  # finds no parked poll: ready for the next look
    began = time.monotonic()
    poller.join()
    assert poller.got is not None and len(poller.got) == 1
    assert time.monotonic() - began < WAIT_S / 2
    assert registry_files(key) == []


def test_a_task_made_ready_while_a_poll_looks_wakes_it():
    spot = handoff.Spot("q:0:looking", [0, "looking", "w", 1])
    try:
        handoff.wake("q:0:looking", 1)  # after a commit the look did not see
        assert not spot.park()  # woken while it looked: it looks again
        assert spot.park()
        handoff.wake("q:0:looking", 1)
        assert spot.wait(5)
        assert spot.unpark() == []  # woken, nothing handed: it looks
        assert not spot.parked
    finally:
        spot.close()
    assert registry_files("q:0:looking") == []
    assert not os.path.exists(spot.address)


def test_a_wake_up_tells_the_queue_it_is_not_empty():
    """A poll trusts its queue to be empty only until tasks of it are made
    ready and not handed over (the registry's mark), as until a ready
    notice is heard."""
    key = "q:0:marked"
    parked = notify.Parked()
    parked.saw_empty(key, parked.epoch(key), time.monotonic())
    assert parked.known_empty(key, 5.0) > 0
    handoff.wake(key, 1)
    assert parked.known_empty(key, 5.0) == 0


def test_the_files_of_a_process_that_is_gone_are_removed(key):
    base = handoff._base()
    directory = handoff._queue_dir(base, key)
    directory.mkdir(exist_ok=True)
    gone = f"{dead_process()}.0"
    (directory / (gone + handoff.PARKED)).write_text(json.dumps([1, QUEUE, "w", 1]))
    (directory / (gone + handoff.WOKEN)).write_text("[]")
    assert handoff.claim(key) is None
    assert registry_files(key) == []


def test_a_hand_off_too_large_for_a_datagram_is_read_by_the_poll(namespace, key):
    step = {"name": QUEUE, "taskReferenceName": "t", "inputParameters": {"blob": "${workflow.input.blob}"}}
    register_workflow(namespace=namespace, body={"name": "big", "tasks": [step]})
    poller = Poller(namespace).parked(key)
    with transactions.outermost():
        lifecycle.start_execution(namespace=namespace, name="big", input={"blob": "x" * (2 * handoff.MAX_DATAGRAM)})
    poller.join()
    assert poller.got is not None and len(poller.got) == 1
    assert poller.got[0].input == {"blob": "x" * (2 * handoff.MAX_DATAGRAM)}
    assert poller.got[0].lease_token == Task.objects.get().lease_token
