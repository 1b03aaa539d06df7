"""One wake-up per ready task (executions.notify.Parked): a task made ready
wakes one parked long-poll, not every one; in one process on both
databases, and across processes on PostgreSQL; and no poller a wake-up
reaches comes back empty. The pollers' periodic re-check is pushed past
their wait, so every lease after the first is a wake-up's."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest
from django.db import connection

from executions import attempts, dispatch, lifecycle, notify
from tests.procs.stack import PYTHON, ROOT, live_database_url
from tests.wakeup_helpers import one_task_namespace, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

QUEUE = "solo"
WAIT_S = 6.0


@pytest.fixture
def namespace():
    return one_task_namespace(QUEUE)


@pytest.mark.parametrize("host_wake", [False, True], ids=["notices", "host"])
def test_in_one_process_a_ready_task_wakes_one_poller(namespace, monkeypatch, settings, tmp_path, host_wake):
    """With ready notices, and on PostgreSQL with host-local wake-ups
    (executions/host_wake.py, whose registry lists the parked polls)."""
    if host_wake:
        if connection.vendor != "postgresql":
            pytest.skip("host-local wake-ups are PostgreSQL's")
        settings.NODE_FLOW_HOST_WAKE, settings.NODE_FLOW_HOST_WAKE_DIR = True, str(tmp_path)
    monkeypatch.setattr(dispatch, "LISTEN_RECHECK_S", WAIT_S + 60)
    monkeypatch.setattr(dispatch, "POLL_RECHECK_S", WAIT_S + 60)
    leases: list[tuple[int, int]] = []
    lease_queue = attempts.lease_queue

    def counting(*args, **kwargs):
        lease = lease_queue(*args, **kwargs)
        leases.append((threading.get_ident(), len(lease.tasks)))
        return lease

    monkeypatch.setattr(attempts, "lease_queue", counting)
    got: list[int] = []

    def poll() -> None:
        try:
            got.append(len(dispatch.poll(namespace=namespace, queue=QUEUE, worker_id="w", count=1, wait_s=3)))
        finally:
            connection.close()

    threads = [threading.Thread(target=poll) for _ in range(4)]
    for thread in threads:
        thread.start()
    key = notify.queue_key(namespace.id, QUEUE)
    wait_for(lambda: notify.parked.listed(key) == 4)
    lifecycle.start_execution(namespace=namespace, name="one")
    lifecycle.start_execution(namespace=namespace, name="one")
    for thread in threads:
        thread.join()
    assert sorted(got) == [0, 0, 1, 1]
    by_poller: dict[int, list[int]] = {}
    for thread, n in leases:
        by_poller.setdefault(thread, []).append(n)
    assert_one_wakeup_each(list(by_poller.values()), ready=2)


def assert_one_wakeup_each(pollers: list[list[int]], *, ready: int) -> None:
    """Each poller looked first (nothing there), then once more: woken
    with a task, or at its deadline, empty. A look is skipped where its
    queue is known empty (another poller's look found nothing, and no ready
    notice came since): at the start or at the deadline, never after a
    wake-up. No wake-up came back empty."""
    assert sum(poller[-1:] == [1] for poller in pollers) == ready, pollers
    assert all(poller in ([0], [0, 0], [1], [0, 1]) for poller in pollers), pollers


def run_two_poller_processes(namespace, env: dict[str, str] | None = None) -> list[list[int]]:
    """Two processes of three long-polls each (tests/procs/pollers.py), all
    six listed, then two tasks made ready here: each poller's leases."""
    env = {**os.environ, "DATABASE_URL": live_database_url(), "PYTHONPATH": str(ROOT), **(env or {})}
    processes = [
        subprocess.Popen(
            [PYTHON, str(ROOT / "tests" / "procs" / "pollers.py"), QUEUE, "3", str(WAIT_S), "6"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for process in processes:  # each process lists all six, its own and the other's
            assert process.stdout is not None and process.stdout.readline().strip() == "listed"
        for _ in range(2):
            lifecycle.start_execution(namespace=namespace, name="one")
        outputs = [process.communicate(timeout=WAIT_S + 30)[0] for process in processes]
    finally:
        for process in processes:
            process.kill()
    leases = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    return [poller for process in leases for poller in process]


@pytest.mark.postgres
def test_across_processes_a_ready_task_wakes_one_poller(namespace):
    if connection.vendor != "postgresql":
        pytest.skip("across processes the wake-up is PostgreSQL's NOTIFY")
    assert_one_wakeup_each(run_two_poller_processes(namespace), ready=2)


@pytest.mark.postgres
def test_a_process_alone_tells_no_one_and_stops_listening_when_idle(namespace, monkeypatch):
    """With no other process listening there is no one to tell of a park
    (no notice, no transaction in each listener); a process with no
    poller stops listening, so notices cost it nothing."""
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN is PostgreSQL's")
    monkeypatch.setattr(notify, "IDLE_UNLISTEN_S", 0.2)
    told: list[tuple[str, str]] = []
    lease_queue = attempts.lease_queue

    def recording(*args, park="", leave="", **kwargs):
        told.append((park, leave))
        return lease_queue(*args, park=park, leave=leave, **kwargs)

    monkeypatch.setattr(attempts, "lease_queue", recording)
    assert dispatch.poll(namespace=namespace, queue=QUEUE, worker_id="w", count=1, wait_s=0.3) == []
    assert told and all(notice == ("", "") for notice in told), told
    listener = notify._listeners[notify.TASKS_CHANNEL]
    wait_for(lambda: not listener.listening.is_set(), timeout_s=5)
    lifecycle.start_execution(namespace=namespace, name="one")  # heard by no one; the next poll finds it
    assert len(dispatch.poll(namespace=namespace, queue=QUEUE, worker_id="w", count=1, wait_s=1)) == 1


def test_a_poller_parking_as_another_process_begins_to_listen_is_told_to_it():
    """The race behind a lost park: a poller looks while no other process
    listens (nothing to tell), the other process's census is answered
    before the poller is listed (so the answer leaves it out), then the
    poller parks. It is not listed here alone: its park notice is sent,
    and lists it in every process."""
    parked = notify.Parked()
    poller = parked.begin("k", time.time() + 60, threading.Event())
    assert parked.notices(poller) == ("", "")  # no one else listens: nothing to tell
    assert parked.heard_listener("other", census=True) == [notify.HERE + notify.PROCESS]  # not listed yet
    late = parked.park(poller, parked.epoch("k"))
    assert late.startswith(notify.PARK + poller + "|k|")
    assert parked.listed("k") == 0  # listed when its notice is heard, as in the other process
    parked.hear(late)
    assert parked.listed("k") == 1
    assert parked.park(poller, parked.epoch("k")) == ""  # listed already: nothing more to say


def test_a_poller_parked_before_the_census_is_in_its_answer():
    parked = notify.Parked()
    poller = parked.begin("k", time.time() + 60, threading.Event())
    assert parked.park(poller, parked.epoch("k")) == ""
    answer = parked.heard_listener("other", census=True)
    assert [notice.split("|")[1] for notice in answer[1:]] == [poller]


@pytest.mark.postgres
def test_a_listener_that_lost_its_connection_listens_again(namespace, monkeypatch):
    """The listening session is killed under a parked poller: the listener
    reconnects, listens again (it went on believing it listened, and so
    never did, before), and the next ready task wakes the poller well
    before its periodic re-check."""
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN is PostgreSQL's")
    monkeypatch.setattr(dispatch, "LISTEN_RECHECK_S", WAIT_S + 60)
    assert dispatch.poll(namespace=namespace, queue=QUEUE, worker_id="w", count=1, wait_s=0.1) == []
    listener = notify._listeners[notify.TASKS_CHANNEL]
    lost = listener.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [lost])
    wait_for(lambda: listener.backend_pid != lost and listener.listening.is_set())
    got: list[int] = []

    def poll() -> None:
        try:
            got.append(len(dispatch.poll(namespace=namespace, queue=QUEUE, worker_id="w", count=1, wait_s=WAIT_S)))
        finally:
            connection.close()

    thread = threading.Thread(target=poll)
    thread.start()
    wait_for(lambda: notify.parked.listed(notify.queue_key(namespace.id, QUEUE)) == 1)
    started = time.monotonic()
    lifecycle.start_execution(namespace=namespace, name="one")
    thread.join()
    assert got == [1]
    assert time.monotonic() - started < WAIT_S / 2
