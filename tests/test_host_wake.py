"""Host-local wake-ups (executions/host_wake.py, PostgreSQL, NODE_FLOW_HOST_WAKE):
a ready task wakes one poll parked in any process of the host, the longest
parked first, through the host's registry and the poll's own socket, with
no NOTIFY for any listening session to read; a poll that parks just after
a start made its queue ready looks again; a dead poll's entry is skipped.
In one process: tests/test_one_wakeup.py; the sync match through the
registry: tests/test_sync_match.py."""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection

from executions import host_wake, notify
from tests.procs.stack import live_database_url
from tests.test_one_wakeup import assert_one_wakeup_each, run_two_poller_processes
from tests.wakeup_helpers import one_task_namespace

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
