"""Sync match (executions/notify.py): a service transaction that makes tasks
of a queue ready, in a process where a long-poll of that queue is parked,
leases them for that poll before it commits, and the poll answers with
them; a poll that comes straight back after a lease parks without looking
while its queue is known empty. On both databases, through the start route
and the services, with the poll in another thread of this process.

Every control still holds: a queue with controls is never matched (its
lease takes its gate's locks in the poll's own transaction), and the one
statement that leases for a match leases nothing if the queue turns out to
have controls after all."""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest
from django.db import DataError, connection

from executions import attempts, dispatch, lifecycle, notify
from executions.models import Execution, Task, TaskStatus
from metadata.taskdefs import upsert_task_definition
from nodeflow import transactions
from nodeflow.keys import ensure_namespace
from quotas import controls
from tests.engine_helpers import register, simple, start
from tests.libpq_trace import Sent, traced
from tests.wakeup_helpers import one_task_namespace, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "matched"
WAIT_S = 5.0


@pytest.fixture(autouse=True, params=["notify", "host"])
def wake(request, settings, tmp_path):
    """Each test with ready notices, and on PostgreSQL again with host-local
    wake-ups (executions/host_wake.py), whose registry the match claims in."""
    if request.param == "host":
        if connection.vendor != "postgresql":
            pytest.skip("host-local wake-ups are PostgreSQL's")
        settings.NODE_FLOW_HOST_WAKE = True
        settings.NODE_FLOW_HOST_WAKE_DIR = str(tmp_path)
    return request.param


@pytest.fixture
def namespace():
    return one_task_namespace(QUEUE)


@pytest.fixture
def leases(monkeypatch):
    """Every lease of a worker queue: (thread name, tasks leased, gated)."""
    seen: list[tuple[str, int, bool]] = []
    lease_queue = attempts.lease_queue

    def recording(*args, gated=True, **kwargs):
        lease = lease_queue(*args, gated=gated, **kwargs)
        seen.append((threading.current_thread().name, len(lease.tasks), gated))
        return lease

    monkeypatch.setattr(attempts, "lease_queue", recording)
    return seen


class Poller(threading.Thread):
    """One long-poll of QUEUE in a thread of its own; ``got`` is its answer."""

    def __init__(self, namespace, *, count: int = 1, wait_s: float = WAIT_S, name: str = "poller") -> None:
        super().__init__(name=name)
        self.namespace, self.count, self.wait_s = namespace, count, wait_s
        self.got: list[Task] | None = None
        self.took_s = 0.0

    def run(self) -> None:
        began = time.monotonic()
        try:
            self.got = dispatch.poll(
                namespace=self.namespace, queue=QUEUE, worker_id="w", count=self.count, wait_s=self.wait_s
            )
        finally:
            self.took_s = time.monotonic() - began
            connection.close()

    def parked(self) -> Poller:
        self.start()
        key = notify.queue_key(self.namespace.id, QUEUE)
        wait_for(lambda: notify.parked.waiting(key) >= 1)
        return self


def start_one(namespace) -> None:
    """A start as the route makes it: one service transaction."""
    with transactions.outermost():
        lifecycle.start_execution(namespace=namespace, name="one")


def test_a_start_leases_its_task_for_a_parked_poll_before_it_commits(namespace, leases):
    poller = Poller(namespace, count=2).parked()
    start_one(namespace)
    poller.join()
    assert poller.got is not None and len(poller.got) == 1
    assert poller.took_s < WAIT_S / 2
    # The poll looked once, found nothing and parked; the start's own thread leased for it.
    assert leases == [("poller", 0, True), ("MainThread", 1, False)]
    task = Task.objects.get(pk=poller.got[0].pk)
    assert (task.status, task.worker_id, task.lease_token) == (TaskStatus.IN_PROGRESS, "w", poller.got[0].lease_token)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite has no round trips to save")
def test_a_start_sends_its_rows_and_the_lease_for_the_poll_in_one_round_trip(namespace, monkeypatch):
    """The start's read went with its ``BEGIN`` (``transactions.with_begin``);
    its task's row and the lease of it for the parked poll go in one round
    trip, and its ``COMMIT`` in the next: two fewer than leaving the
    pipeline first (its sync), then the row, then the lease. (Each way run
    until psycopg has prepared its statements.)"""

    def traced_match() -> Sent:
        for _ in range(6):
            poller = Poller(namespace).parked()
            with traced() as sent:
                start_one(namespace)
            poller.join()
            assert poller.got is not None and len(poller.got) == 1
        return sent

    pipelined = traced_match()
    # BEGIN with the read; the row and the lease (two Binds), before one
    # Flush and no Sync; the COMMIT with the Sync.
    messages = [message for message, _ in pipelined]
    read = messages.index("Flush")
    flushed = messages.index("Flush", read + 1)
    assert messages[read + 1 : flushed] == ["Bind", "Bind"], pipelined
    assert pipelined.transaction_control() == ["BEGIN", "COMMIT"] and pipelined.round_trips() == 3, pipelined
    monkeypatch.setattr(transactions, "in_pipeline", contextlib.nullcontext)
    assert traced_match().round_trips() == 5


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite has no pipeline")
def test_a_lease_that_fails_in_the_pipeline_writes_nothing(namespace, monkeypatch):
    """The lease's error is raised at its fetch, in the pipeline with the
    start's rows: the start fails whole, the poll waits on, and the
    connection goes on as usual."""
    poller = Poller(namespace, wait_s=1.0).parked()
    monkeypatch.setattr(attempts, "_lease_fast_sql", lambda: "SELECT 1 / (%(count)s - %(count)s)")
    with pytest.raises(DataError):
        start_one(namespace)
    monkeypatch.undo()
    poller.join()
    assert poller.got == []
    assert not Execution.objects.exists() and not Task.objects.exists()
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    start_one(namespace)
    assert Task.objects.filter(status=TaskStatus.SCHEDULED).count() == 1


def test_through_the_start_route_too(api, leases):
    register(api, "routed", simple("routed_step", QUEUE))
    poller = Poller(ensure_namespace(name="default")).parked()
    started = start(api, "routed")
    poller.join()
    assert poller.got is not None and str(poller.got[0].execution_id) == started["id"]
    assert [lease for lease in leases if lease[0] != "poller"] == [("MainThread", 1, False)]


def test_a_rolled_back_start_hands_nothing_and_the_poll_waits_on(namespace, leases):
    poller = Poller(namespace, wait_s=1.0).parked()
    with pytest.raises(RuntimeError), transactions.outermost():
        lifecycle.start_execution(namespace=namespace, name="one")
        raise RuntimeError("the start fails after its task was leased for the poll")
    poller.join()
    assert poller.got == []
    assert poller.took_s >= 0.9
    assert not Task.objects.exists()


def test_each_parked_poll_gets_what_it_asks_for_and_no_more(namespace, leases):
    first = Poller(namespace, count=1, name="first").parked()
    second = Poller(namespace, count=1, name="second")
    second.start()
    key = notify.queue_key(namespace.id, QUEUE)
    wait_for(lambda: notify.parked.waiting(key) == 2)
    with transactions.outermost():
        for _ in range(3):
            lifecycle.start_execution(namespace=namespace, name="one")
    first.join()
    second.join()
    assert first.got is not None and second.got is not None
    assert (len(first.got), len(second.got)) == (1, 1)
    assert Task.objects.filter(status=TaskStatus.SCHEDULED).count() == 1


def test_a_queue_with_controls_is_never_matched(namespace, leases):
    upsert_task_definition(namespace=namespace, values={"name": QUEUE, "concurrent_exec_limit": 1})
    start_one(namespace)
    assert len(dispatch.poll(namespace=namespace, queue=QUEUE, worker_id="w", count=1, wait_s=0)) == 1
    leases.clear()
    poller = Poller(namespace, wait_s=1.0).parked()
    start_one(namespace)  # the cap is full: the task must wait
    poller.join()
    assert poller.got == []
    assert Task.objects.filter(status=TaskStatus.IN_PROGRESS).count() == 1
    assert all(lease[0] == "poller" for lease in leases), leases


@pytest.mark.parametrize(
    "control",
    [{"concurrent_exec_limit": 1}, {"rate_limit_per_frequency": 1, "rate_limit_frequency_seconds": 60.0}],
    ids=["concurrentExecLimit", "rateLimit"],
)
def test_the_match_statement_refuses_a_queue_this_process_has_not_seen_controlled(
    namespace, leases, control, frozen_clock
):
    """The controls cache does not know the control yet (another process
    set it): the match is tried and its statement leases nothing; the
    control holds. (The clock stands still: a rate window that ends between
    the two leases would rightly let the second through.)"""
    upsert_task_definition(namespace=namespace, values={"name": QUEUE, **control})
    start_one(namespace)
    assert len(dispatch.poll(namespace=namespace, queue=QUEUE, worker_id="w", count=1, wait_s=0)) == 1
    poller = Poller(namespace, wait_s=1.0).parked()
    controls.forget()
    start_one(namespace)
    poller.join()
    assert poller.got == [], leases
    assert Task.objects.filter(status=TaskStatus.IN_PROGRESS).count() == 1


def test_a_poll_back_at_once_after_a_match_parks_without_looking(namespace, leases):
    poller = Poller(namespace).parked()
    start_one(namespace)
    poller.join()
    assert poller.got is not None and len(poller.got) == 1
    again = Poller(namespace, name="again").parked()
    start_one(namespace)
    again.join()
    assert again.got is not None and len(again.got) == 1
    # The second poll never looked: its queue was known empty, and the start matched it.
    assert [lease for lease in leases if lease[0] == "again"] == []


def test_a_queue_known_empty_is_looked_at_again_once_a_ready_notice_is_heard(namespace, leases):
    assert dispatch.poll(namespace=namespace, queue=QUEUE, worker_id="w", count=1, wait_s=0.05) == []
    # Outside a service transaction there is no match: the ready notice goes out.
    lifecycle.start_execution(namespace=namespace, name="one")
    began = time.monotonic()
    got = dispatch.poll(namespace=namespace, queue=QUEUE, worker_id="w", count=1, wait_s=WAIT_S)
    assert len(got) == 1
    assert time.monotonic() - began < WAIT_S / 2


def test_a_queue_known_empty_is_looked_at_again_after_a_recheck(namespace, leases):
    """A task made ready without a notice (here written by hand, as a
    retry whose delay ends is) is found within the re-check's time."""
    assert dispatch.poll(namespace=namespace, queue=QUEUE, worker_id="w", count=1, wait_s=0.05) == []
    key = notify.queue_key(namespace.id, QUEUE)
    heard = notify.parked.epoch(key)
    lifecycle.start_execution(namespace=namespace, name="one")
    wait_for(lambda: notify.parked.epoch(key) != heard)  # its notice heard (at once on SQLite)
    # As if the notice had never come: the queue is marked empty after it.
    notify.parked.saw_empty(key, notify.parked.epoch(key), time.monotonic())
    recheck = dispatch.LISTEN_RECHECK_S if notify.ensure_listener() else dispatch.POLL_RECHECK_S
    began = time.monotonic()
    got = dispatch.poll(namespace=namespace, queue=QUEUE, worker_id="w", count=1, wait_s=recheck + 3)
    assert len(got) == 1
    assert time.monotonic() - began < recheck + 1


def test_a_matched_start_sends_no_notice_and_costs_one_statement_more(api, namespace):
    """The hot path's budget (tests/test_hot_path.py): a start is five
    statements on PostgreSQL with its NOTIFY; a start that meets a parked
    poll leases instead of notifying: still five, no pg_notify, and the
    poll itself runs nothing after its first look."""
    from django.test.utils import CaptureQueriesContext

    from tests.test_hot_path import statements

    register(api, "routed", simple("routed_step", QUEUE))
    for _ in range(2):  # caches: the snapshot, the controls, the last poll
        start(api, "routed")
        assert len(dispatch.poll(namespace=namespace, queue=QUEUE, worker_id="w", count=1, wait_s=0)) == 1
    poller = Poller(namespace).parked()
    with CaptureQueriesContext(connection) as queries:
        start(api, "routed")
    poller.join()
    assert poller.got is not None and len(poller.got) == 1
    done = statements(queries)
    assert not [s for s in done if s.lstrip().startswith("SELECT pg_notify")], done
    if connection.vendor == "postgresql":
        assert len(done) <= 5, [s[:90] for s in done]
