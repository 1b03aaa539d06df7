"""Host-local wake-ups (executions/host_wake.py, PostgreSQL, NODE_FLOW_HOST_WAKE):
a ready task wakes one poll parked in any process of the host, the longest
parked first, through the host's registry and the poll's own socket, with
no NOTIFY for any listening session to read; a poll that parks just after
a start made its queue ready looks again; a dead poll's entry is skipped. A start claims a poll parked in another
process, leases for it in its own transaction and sends it the leased
task once it commits (the sync match across processes).
In one process: tests/test_one_wakeup.py; the sync match in one process:
tests/test_sync_match.py."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import time

import psycopg
import pytest
from django.db import DataError, connection

from executions import attempts, dispatch, host_wake, lifecycle, notify
from executions.models import Task, TaskStatus
from metadata.workflows import register_workflow
from nodeflow import transactions
from tests.procs.stack import PYTHON, ROOT, live_database_url
from tests.test_one_wakeup import assert_one_wakeup_each, run_two_poller_processes
from tests.wakeup_helpers import one_task_namespace, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

QUEUE = "solo"
WAIT_S = 6.0


@pytest.fixture
def host(settings, tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("host-local wake-ups replace PostgreSQL's NOTIFY")
    settings.NODE_FLOW_HOST_WAKE = True
    settings.NODE_FLOW_HOST_WAKE_DIR = str(tmp_path)
    assert host_wake.enabled()
    return tmp_path


@pytest.fixture
def namespace(host):
    return one_task_namespace(QUEUE)


def test_a_wake_up_sets_the_longest_parked_waiter_only(host):
    first, second = host_wake.Waiter(), host_wake.Waiter()
    try:
        first.park("k")
        second.park("k")
        assert host_wake.parked("k") == 2
        before = host_wake.mark("k")
        host_wake.wake({"k": 1})
        assert host_wake.mark("k") == before  # a poll was woken for it: no one need look again
        assert first.wait(2) and not second.wait(0.05)
        assert first.unpark() is False  # the waker took it off the registry
        assert second.unpark() is True and host_wake.parked("k") == 0
    finally:
        first.close()
        second.close()


def test_a_ready_task_no_poll_was_woken_for_marks_its_queue(host):
    before = host_wake.mark("k")
    host_wake.wake({"k": 1})
    assert host_wake.mark("k") > before


def test_a_dead_polls_entry_is_skipped_and_removed(host):
    dead = host_wake.Waiter()
    dead.park("k")
    dead._socket.close()  # its process is gone: the file stays, the socket does not
    live = host_wake.Waiter()
    try:
        live.park("k")
        host_wake.wake({"k": 1})
        assert live.wait(2)
        assert host_wake.parked("k") == 0
    finally:
        live.close()


def test_a_registry_removed_under_the_server_is_made_again(host):
    """A /dev/shm cleaned while the server runs: a poll lists itself again,
    and a wake-up after a commit never raises."""
    waiter = host_wake.Waiter()
    try:
        base = host_wake._base()
        assert base is not None
        for path in sorted(base.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        base.rmdir()
        host_wake.wake({"k": 1})  # no poll, and the mark made again
        assert host_wake.mark("k") > 0
        waiter.park("k")
        host_wake.wake({"k": 1})
        assert waiter.wait(2)
        assert not host_wake.Waiter().wait(0)  # a zero wait answers at once
    finally:
        waiter.close()


def test_a_poll_parking_after_its_queue_was_marked_ready_looks_again(host):
    """The look found nothing, then a start committed and its waker ran
    before the poll listed itself (it found no one to wake): the mark moved
    since the look began, so the poll is set at once."""
    parked = notify.Parked()
    waiter = parked.waiter()
    assert isinstance(waiter, host_wake.Waiter)
    poller = parked.begin("k", time.time() + 60, waiter)
    try:
        epoch = parked.epoch("k")
        host_wake.wake({"k": 1})  # no one listed yet
        assert parked.park(poller, epoch) == ""
        assert waiter.wait(0)
    finally:
        parked.end(poller)
    assert host_wake.parked("k") == 0


def test_across_processes_a_ready_task_wakes_one_poll_without_a_notice(namespace, host):
    """Two processes of three pollers each; two starts here wake two of the
    six, each leasing its task, none empty; a session listening on the
    task channel hears no ready notice."""
    with psycopg.connect(live_database_url(), autocommit=True) as listener:
        listener.execute(f"LISTEN {notify.TASKS_CHANNEL}")
        pollers = run_two_poller_processes(
            namespace, {"NODE_FLOW_HOST_WAKE": "true", "NODE_FLOW_HOST_WAKE_DIR": str(host)}
        )
        heard = [note.payload for note in listener.notifies(timeout=0.2)]
    assert not [payload for payload in heard if payload.startswith(notify.READY)], heard
    assert_one_wakeup_each(pollers, ready=2)


class PollerProcess:
    """tests/procs/pollers.py: one long-poll of QUEUE in a process of its
    own, with host-local wake-ups on; ``finish`` gives the ids of the tasks
    it answered with and its own lease statements (how many each leased)."""

    def __init__(self, host, wait_s: float = WAIT_S) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": live_database_url(),
            "PYTHONPATH": str(ROOT),
            "NODE_FLOW_HOST_WAKE": "true",
            "NODE_FLOW_HOST_WAKE_DIR": str(host),
        }
        self.process = subprocess.Popen(
            [PYTHON, str(ROOT / "tests" / "procs" / "pollers.py"), QUEUE, "1", str(wait_s), "1"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "listed"

    def finish(self) -> tuple[list[str], list[int]]:
        try:
            out = self.process.communicate(timeout=WAIT_S + 30)[0].strip().splitlines()
        finally:
            self.process.kill()
        got = json.loads(out[-2].removeprefix("got "))
        (leases,) = json.loads(out[-1])
        return got[0], leases


@pytest.fixture
def leases_here(monkeypatch):
    """The leases of a worker queue in this process: (tasks leased, gated)."""
    seen: list[tuple[int, bool]] = []
    lease_queue = attempts.lease_queue

    def recording(*args, gated=True, **kwargs):
        lease = lease_queue(*args, gated=gated, **kwargs)
        seen.append((len(lease.tasks), gated))
        return lease

    monkeypatch.setattr(attempts, "lease_queue", recording)
    return seen


def start_one(namespace, name: str = "one", **values) -> Task:
    """A start as the route makes it: one service transaction; its task."""
    with transactions.outermost():
        execution, _ = lifecycle.start_execution(namespace=namespace, name=name, **values)
    return Task.objects.get(execution=execution)


def test_a_start_hands_its_task_to_a_poll_parked_in_another_process(namespace, host, leases_here):
    """The start's transaction claims the poll's file, leases for it (its
    worker id, by the statement a sync match uses) and sends it the task
    once it commits: the poll answers with it having looked only once (and
    found nothing), no lease transaction of its own."""
    poller = PollerProcess(host)
    task = start_one(namespace)
    got, leases = poller.finish()
    assert got == [str(task.pk)]
    assert leases == [0]  # its one look, before it parked
    assert leases_here == [(1, False)]  # the start's lease for it
    assert (task.status, task.worker_id) == (TaskStatus.IN_PROGRESS, "w")
    assert host_wake.parked(notify.queue_key(namespace.id, QUEUE)) == 0


def test_a_hand_off_larger_than_a_datagram_goes_by_its_ids(namespace, host, leases_here):
    register_workflow(
        namespace=namespace,
        body={
            "name": "blob",
            "tasks": [{"name": QUEUE, "taskReferenceName": "t", "inputParameters": {"blob": "${workflow.input.blob}"}}],
        },
    )
    blob = "x" * (host_wake.MAX_HANDED + 1)
    poller = PollerProcess(host)
    task = start_one(namespace, "blob", input={"blob": blob})
    got, leases = poller.finish()
    assert (got, leases, leases_here) == ([str(task.pk)], [0], [(1, False)])
    assert len(pickle.dumps(task)) > host_wake.MAX_HANDED
    packed = dispatch._Matcher.pack([task])
    assert len(packed) < 1_000  # its id
    (read,) = dispatch._Matcher.unpack(packed)
    assert (read.pk, read.input, read.lease_token) == (task.pk, {"blob": blob}, task.lease_token)


def test_a_claimed_poll_whose_start_rolled_back_looks_again(namespace, host, leases_here, monkeypatch):
    """The claiming transaction failed after its claim (its lease, in the
    pipeline with the start's rows): the poll is woken, looks (nothing
    there), parks again, and the next start hands it its task."""
    poller = PollerProcess(host)
    key = notify.queue_key(namespace.id, QUEUE)
    with monkeypatch.context() as failing:
        failing.setattr(attempts, "_lease_fast_sql", lambda: "SELECT 1 / (%(count)s - %(count)s)")
        with pytest.raises(DataError):
            start_one(namespace)
    assert not Task.objects.exists()
    time.sleep(0.2)  # the poll's second look, after the wake-up
    wait_for(lambda: host_wake.parked(key) == 1)  # parked again
    task = start_one(namespace)
    got, leases = poller.finish()
    assert (got, leases) == ([str(task.pk)], [0, 0])


def test_a_dead_polls_entry_is_not_leased_for(namespace, host, leases_here):
    """A poll whose process died left its file: the claim finds no socket
    behind it and removes it, leasing nothing; the task waits, ready."""
    base = host_wake._base()
    assert base is not None
    directory = host_wake._names(base, notify.queue_key(namespace.id, QUEUE))[0]
    directory.mkdir(parents=True)
    ghost = directory / f"{time.time_ns():019d}-999999999.0.abcdef"
    ghost.write_bytes(pickle.dumps(dispatch._Ask(namespace.id, QUEUE, "ghost", 1)))
    task = start_one(namespace)
    assert (task.status, leases_here) == (TaskStatus.SCHEDULED, [])
    assert not ghost.exists()
