"""A system task's controls are those of the task definition its ``name``
names (SPEC §5, §8), shared with SIMPLE tasks of that name, and they hold on
every path that leases it: the system-task role, several runner processes,
Celery's ``run_task``. Seed 000's semaphore example is run with HTTP tasks
against a real loopback server that counts the calls it answers at once.
Also: a freed permit or slot wakes the waiting system task at once; a held
system task says why (the control, ``runnerCapacity``, ``noPollers``); and
queue depth counts system tasks.

Rate windows are crossed by moving ``nodeflow.clock``, never by sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

import pytest
from django.db import connection

from executions import dispatch
from executions.models import Execution, Task, TaskStatus
from executions.roles.systemtasks import SystemTaskRole
from executions.system_tasks import celery_handoff, runner
from nodeflow import clock
from tests import test_celery_systemtasks as celery_tests
from tests.engine_helpers import complete, execution, poll, register, simple, start, sweep, task_at, task_def
from tests.metrics_helpers import scrape
from tests.procs.stack import Stack, live_database_url
from tests.system_helpers import http_task, run_system_tasks, serving

WAIT_S = 20.0
# The Celery tests' fixtures (a queue of its own on the test broker, a real worker).
broker = celery_tests.broker
celery_worker = celery_tests.celery_worker


@pytest.fixture
def fresh_celery_pool() -> Iterator[None]:
    """The broker fixture closes the app's connection pool when its test
    ends, and kombu keeps the closed pool: a later test's first send would
    fail ("Acquire on closed pool") and its message would never go. Start
    with fresh pools, and leave fresh ones (requested before the broker,
    this ends after it)."""
    _reset_celery_pools()
    yield
    _reset_celery_pools()


def _reset_celery_pools() -> None:
    from kombu import pools

    from nodeflow.celery import app

    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


# --- a loopback server that counts calls in progress -----------------------------


@dataclass
class Gauge:
    """Answers every path with 200 after ``hold_s``, or, while ``holding``,
    only once ``let_go`` lets a call through. Counts, per path, the calls it
    is answering at once and the most it ever answered at once."""

    base: str = ""
    hold_s: float = 0.1
    holding: bool = False
    active: dict[str, int] = field(default_factory=dict)
    most: dict[str, int] = field(default_factory=dict)
    arrived: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    gate: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    def hits(self, path: str) -> int:
        with self.lock:
            return self.arrived.count(path)

    def let_go(self, calls: int = 1) -> None:
        for _ in range(calls):
            self.gate.release()

    def enter(self, path: str) -> None:
        with self.lock:
            self.arrived.append(path)
            self.active[path] = self.active.get(path, 0) + 1
            self.most[path] = max(self.most.get(path, 0), self.active[path])

    def leave(self, path: str) -> None:
        with self.lock:
            self.active[path] -= 1


def _handler(gauge: Gauge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            gauge.enter(path)
            try:
                if gauge.holding:
                    gauge.gate.acquire(timeout=WAIT_S)
                else:
                    time.sleep(gauge.hold_s)
            finally:
                gauge.leave(path)
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture
def gauge() -> Iterator[Gauge]:
    found = Gauge()
    with serving(_handler(found)) as found.base:
        yield found
        found.holding = False
        found.let_go(1000)


# --- helpers --------------------------------------------------------------------


def http_flow(api, definition: str, url: str, *, workflow: str | None = None) -> str:
    """A one-task workflow: an HTTP task whose ``name`` is ``definition``."""
    workflow = workflow or f"wf_{definition}"
    register(api, workflow, http_task("call", url, name=definition, readTimeout=WAIT_S + 5))
    return workflow


def start_many(api, workflow: str, count: int) -> list[str]:
    return [start(api, workflow)["id"] for _ in range(count)]


@contextmanager
def role_running(threads: int = 8) -> Iterator[SystemTaskRole]:
    role = SystemTaskRole(threads=threads)
    thread = threading.Thread(target=role.run, daemon=True)
    thread.start()
    try:
        yield role
    finally:
        role.request_stop()
        thread.join(timeout=WAIT_S)
        assert not thread.is_alive(), "the system-task role did not stop"


def run_then_close(task: Task) -> None:
    """Run a leased task in a thread of the test's own, as a runner thread would."""
    try:
        runner.run_leased(task)
    finally:
        connection.close()


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def all_ended(ids: list[str]) -> bool:
    return not Execution.objects.filter(pk__in=ids, status="RUNNING").exists()


def blocked(api, execution_id: str) -> dict | None:
    return task_at(execution(api, execution_id), "call")["blockedBy"]


def scheduled(ids: list[str]) -> list[str]:
    return [
        str(pk)
        for pk in Task.objects.filter(execution_id__in=ids, status=TaskStatus.SCHEDULED)
        .order_by("scheduled_at")
        .values_list("execution_id", flat=True)
    ]


def refusals(api, control: str) -> float:
    return sum(
        value
        for labels, value in scrape(api).of("nodeflow_limit_refusals_total").items()
        if ("control", control) in labels
    )


# --- the issue, reproduced --------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_each_control_holds_for_http_tasks_in_the_role(api, gauge, frozen_clock, settings):
    """Three definitions (a semaphore of one permit, concurrentExecLimit 1,
    one dispatch per 30 s), three HTTP executions each, a slow server: one
    call of each at a time, and each held task names its control."""
    # The clock jumps 30 s while a metered call may still be reporting: its
    # lease must outlast the jump (to the runner, a jump past it is a lapse).
    settings.NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS = 120
    api.put("semaphores/legacy", {"permits": 1})
    task_def(api, "legacy_call", semaphores=["legacy"])
    task_def(api, "capped_call", concurrentExecLimit=1)
    task_def(api, "metered_call", rateLimitPerFrequency=1, rateLimitFrequencySeconds=30)
    gauge.holding = True
    ids = {
        name: start_many(api, http_flow(api, name, gauge.url(f"/{name}")), 3)
        for name in ("legacy_call", "capped_call", "metered_call")
    }
    with role_running(threads=8):
        wait_for(lambda: len(gauge.arrived) >= 3, "one call of each definition")
        time.sleep(0.3)  # the role ticks again meanwhile: nothing more may get through
        assert sorted(gauge.arrived) == ["/capped_call", "/legacy_call", "/metered_call"], gauge.arrived
        in_flight = Task.objects.filter(status=TaskStatus.IN_PROGRESS, kind="system")
        assert in_flight.count() == 3, list(in_flight.values_list("task_def_name", "worker_id"))
        assert api.get("semaphores").json() == [{"name": "legacy", "permits": 1, "held": 1}]
        waiting = {name: scheduled(pks) for name, pks in ids.items()}
        reasons = {name: [blocked(api, pk) for pk in pks] for name, pks in waiting.items()}
        assert {(r["control"], r["limit"], r["current"]) for r in reasons["legacy_call"]} == {
            ("semaphore:legacy", 1, 1)
        }
        assert {(r["control"], r["limit"], r["current"]) for r in reasons["capped_call"]} == {
            ("concurrentExecLimit", 1, 1)
        }
        assert {(r["control"], r["limit"], r["current"], r["until"]) for r in reasons["metered_call"]} == {
            ("rateLimit", 1, 1, "2026-06-01T12:00:30Z")
        }

        gauge.let_go(1000)  # every call answers from now on, as it arrives
        gauge.holding = False
        wait_for(lambda: all_ended(ids["legacy_call"] + ids["capped_call"]), "the semaphore and capped runs")
        assert gauge.hits("/metered_call") == 1  # the window is still used up
        for expected in (2, 3):
            clock.advance(30)  # the next window: one more dispatch
            wait_for(lambda: gauge.hits("/metered_call") == expected, f"metered call {expected}")
        wait_for(lambda: all_ended(ids["metered_call"]), "the metered runs")
    assert gauge.most == {"/legacy_call": 1, "/capped_call": 1, "/metered_call": 1}, gauge.arrived
    assert {e.status for e in Execution.objects.all()} == {"COMPLETED"}
    assert api.get("semaphores").json() == [{"name": "legacy", "permits": 1, "held": 0}]


@pytest.mark.django_db(transaction=True)
def test_the_seed_semaphore_example_with_http_tasks(api, gauge):
    """Seed 000: "six different tasks must not exceed four concurrent hits on
    one fragile legacy API", here three HTTP task definitions sharing two
    permits, nine runs, eight runner threads: never more than two at once."""
    api.put("semaphores/legacy_erp", {"permits": 2})
    ids = []
    for name in ("export_report", "sync_ledger", "push_invoice"):
        task_def(api, name, semaphores=["legacy_erp"])
        ids += start_many(api, http_flow(api, name, gauge.url("/legacy")), 3)
    gauge.hold_s = 0.15
    with role_running(threads=8):
        wait_for(lambda: all_ended(ids), "every run")
    assert gauge.hits("/legacy") == 9
    assert gauge.most["/legacy"] == 2  # pressed against, never past
    assert {e.status for e in Execution.objects.filter(pk__in=ids)} == {"COMPLETED"}
    assert api.get("semaphores").json() == [{"name": "legacy_erp", "permits": 2, "held": 0}]


@pytest.mark.django_db(transaction=True)
def test_concurrent_exec_limit_holds_for_http_tasks(api, gauge):
    task_def(api, "fragile", concurrentExecLimit=2)
    ids = start_many(api, http_flow(api, "fragile", gauge.url("/fragile")), 6)
    gauge.hold_s = 0.15
    with role_running(threads=8):
        wait_for(lambda: all_ended(ids), "every run")
    assert gauge.hits("/fragile") == 6
    assert gauge.most["/fragile"] == 2


@pytest.mark.django_db
def test_the_rate_window_holds_for_http_tasks(api, gauge, frozen_clock):
    task_def(api, "partner_api", rateLimitPerFrequency=2, rateLimitFrequencySeconds=60)
    ids = start_many(api, http_flow(api, "partner_api", gauge.url("/partner")), 5)
    gauge.hold_s = 0
    hits = []
    for _ in range(3):
        run_system_tasks()
        hits.append(gauge.hits("/partner"))
        run_system_tasks()  # the same window: nothing more
        assert gauge.hits("/partner") == hits[-1]
        clock.advance(60)
    assert hits == [2, 4, 5]  # two per window, completion gives nothing back
    assert all_ended(ids)


# --- one definition, both kinds -----------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the freed notice is sent when the result commits
def test_a_simple_and_an_http_task_naming_one_definition_share_its_cap(api, gauge):
    task_def(api, "shared", concurrentExecLimit=1)
    register(api, "by_worker", simple("work", "shared"))
    http_flow(api, "shared", gauge.url("/shared"))
    worker_run = start(api, "by_worker")["id"]
    http_run = start(api, "wf_shared")["id"]
    (leased,) = poll(api, "shared")  # the worker holds the one slot
    assert dispatch.lease_system_tasks(worker_id="runner") == []
    reason = blocked(api, http_run)
    assert (reason["control"], reason["limit"], reason["current"]) == ("concurrentExecLimit", 1, 1)
    complete(api, leased)
    (system_task,) = dispatch.lease_system_tasks(worker_id="runner")  # the slot passed to the HTTP task
    start(api, "by_worker")
    assert poll(api, "shared") == []  # and now it holds it against the worker
    assert api.get("queues/shared/depth").json() == {"taskType": "shared", "depth": 1, "inFlight": 1}
    runner.run_leased(system_task)
    assert len(poll(api, "shared")) == 1
    assert execution(api, worker_run)["status"] == "COMPLETED"


# --- a freed permit wakes the waiting system task at once ---------------------------------


@pytest.fixture
def no_timed_rechecks(monkeypatch):
    """Only a wake-up can make the role try a held group again: its idle
    re-check and the hold's own re-check are a minute away."""
    monkeypatch.setattr(SystemTaskRole, "idle_wait_s", 60.0)
    monkeypatch.setattr(dispatch, "HOLD_RECHECK_S", 60.0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("freed_by", ["the system task's result", "a worker's result", "terminate", "a timeout"])
def test_a_freed_permit_wakes_the_waiting_system_task_at_once(api, gauge, no_timed_rechecks, freed_by):
    api.put("semaphores/legacy", {"permits": 1})
    task_def(api, "legacy_call", semaphores=["legacy"])
    # Another definition naming the semaphore, whose task times out holding it.
    task_def(api, "legacy_slow", semaphores=["legacy"], timeoutSeconds=5, retryCount=0)
    register(api, "by_worker", simple("work", "legacy_call"))
    gauge.holding = True
    holding_call = None
    if freed_by == "a worker's result":
        holder = start(api, "by_worker")["id"]
        (leased,) = poll(api, "legacy_call")
    else:
        definition = "legacy_slow" if freed_by == "a timeout" else "legacy_call"
        holder = start(api, http_flow(api, definition, gauge.url("/legacy"), workflow="holder"))["id"]
        # The holder's call goes first: it is leased before the role starts.
        (first,) = dispatch.lease_system_tasks(
            worker_id="test-runner", task_id=Task.objects.get(execution_id=holder).id
        )
        holding_call = threading.Thread(target=run_then_close, args=(first,), daemon=True)
        holding_call.start()
        wait_for(lambda: gauge.hits("/legacy") == 1, "the holder's call")
    waiting = start_many(api, http_flow(api, "legacy_call", gauge.url("/legacy")), 1)
    before = refusals(api, "semaphore:legacy")
    with role_running(threads=4):
        wait_for(lambda: refusals(api, "semaphore:legacy") > before, "the role to be refused")
        assert blocked(api, waiting[0])["control"] == "semaphore:legacy"
        calls = gauge.hits("/legacy")
        if freed_by == "a worker's result":
            complete(api, leased)
        elif freed_by == "terminate":
            assert api.post(f"executions/{holder}/terminate", {"reason": "stop"}).status_code == 200
        elif freed_by == "a timeout":
            clock.advance(6)
            sweep()  # the holder's timeoutSeconds fires: TIMED_OUT
            assert Task.objects.get(execution_id=holder).status == TaskStatus.TIMED_OUT
        else:
            gauge.let_go(1)
        wait_for(lambda: gauge.hits("/legacy") == calls + 1, "the waiting task's call", timeout_s=10)
        gauge.holding = False
        gauge.let_go(10)
        wait_for(lambda: all_ended(waiting), "the waiting run")
    if holding_call is not None:
        holding_call.join(timeout=WAIT_S)
    assert Execution.objects.get(pk=waiting[0]).status == "COMPLETED"


@pytest.mark.django_db(transaction=True)
def test_a_freed_slot_wakes_the_waiting_system_task_at_once(api, gauge, no_timed_rechecks):
    task_def(api, "capped_call", concurrentExecLimit=1)
    ids = start_many(api, http_flow(api, "capped_call", gauge.url("/capped")), 2)
    gauge.holding = True
    before = refusals(api, "concurrentExecLimit")
    with role_running(threads=4):
        wait_for(lambda: gauge.hits("/capped") == 1, "the first call")
        wait_for(lambda: refusals(api, "concurrentExecLimit") > before, "the role to be refused")
        assert blocked(api, scheduled(ids)[0])["control"] == "concurrentExecLimit"
        gauge.let_go(1)
        wait_for(lambda: gauge.hits("/capped") == 2, "the second call", timeout_s=10)
        gauge.let_go(1)
        wait_for(lambda: all_ended(ids), "both runs")


# --- Celery's run_task goes through the gate too --------------------------------------------


@pytest.mark.django_db
def test_run_task_leases_only_what_the_gate_allows(api, gauge):
    api.put("semaphores/legacy", {"permits": 1})
    task_def(api, "legacy_call", semaphores=["legacy"])
    first, second = start_many(api, http_flow(api, "legacy_call", gauge.url("/legacy")), 2)
    first_task, second_task = (Task.objects.get(execution_id=pk).id for pk in (first, second))
    (held,) = dispatch.lease_system_tasks(worker_id="celery@a", task_id=first_task)
    assert held.id == first_task
    assert runner.run_task(second_task, worker="celery@b") is None  # the permit is taken
    assert Task.objects.get(pk=second_task).status == TaskStatus.SCHEDULED
    runner.run_leased(held)
    assert runner.run_task(second_task, worker="celery@b") is not None
    assert Execution.objects.get(pk=second).status == "COMPLETED"


@pytest.mark.django_db
def test_run_task_held_by_a_rate_window_is_sent_again_for_the_next_window(api, gauge, monkeypatch, frozen_clock):
    sent = []
    monkeypatch.setattr(celery_handoff, "_publish", lambda task_id, countdown: sent.append((task_id, countdown)))
    task_def(api, "metered_call", rateLimitPerFrequency=1, rateLimitFrequencySeconds=30)
    ids = start_many(api, http_flow(api, "metered_call", gauge.url("/metered")), 2)
    first, second = (Task.objects.get(execution_id=pk).id for pk in ids)
    clock.advance(10)
    gauge.hold_s = 0
    assert runner.run_task(first, worker="celery@a") is not None
    assert runner.run_task(second, worker="celery@a") is None
    assert sent == [(str(second), pytest.approx(20, abs=0.1))]  # when this window ends
    clock.advance(20)
    assert runner.run_task(second, worker="celery@a") is not None
    assert all_ended(ids)


# --- why a system task is not running ------------------------------------------------------


@pytest.mark.django_db
def test_a_ready_system_task_with_no_runner_says_no_pollers(api, gauge):
    (run,) = start_many(api, http_flow(api, "call", gauge.url("/ok")), 1)
    reason = blocked(api, run)
    assert (reason["control"], reason["current"]) == ("noPollers", 0)


@pytest.mark.django_db(transaction=True)
def test_a_system_task_waiting_for_a_runner_thread_says_runner_capacity(api, gauge):
    before = refusals(api, "runnerCapacity")
    ids = start_many(api, http_flow(api, "call", gauge.url("/busy")), 3)
    gauge.holding = True
    with role_running(threads=2):
        wait_for(lambda: gauge.hits("/busy") == 2, "two calls")
        (waiting,) = scheduled(ids)
        reason = blocked(api, waiting)
        assert (reason["control"], reason["limit"], reason["current"]) == ("runnerCapacity", 2, 2)
        wait_for(lambda: refusals(api, "runnerCapacity") > before, "the refusal to be counted")
        gauge.let_go(1)
        wait_for(lambda: gauge.hits("/busy") == 3, "the third call")
        assert blocked(api, waiting) is None  # IN_PROGRESS now
        gauge.holding = False
        gauge.let_go(10)
        wait_for(lambda: all_ended(ids), "every run")


# --- queue depth counts system tasks ---------------------------------------------------


@pytest.mark.django_db
def test_queue_depth_and_in_flight_count_system_tasks(api, gauge):
    task_def(api, "call")
    start_many(api, http_flow(api, "call", gauge.url("/ok")), 3)
    register(api, "by_worker", simple("work", "call"))
    start(api, "by_worker")
    dispatch.lease_system_tasks(worker_id="runner")
    expected = {"taskType": "call", "depth": 3, "inFlight": 1}  # 2 HTTP + 1 SIMPLE waiting, 1 HTTP leased
    assert api.get("queues/call/depth").json() == expected
    assert [q for q in api.get("queues").json() if q["taskType"] == "call"] == [expected]
    assert not [q for q in api.get("queues").json() if q["taskType"].startswith("@")]


# --- several runner processes (PostgreSQL) ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.postgres
def test_several_runner_processes_never_exceed_a_control(api, gauge):
    if connection.vendor != "postgresql":
        pytest.skip("multi-process races need PostgreSQL: SQLite serialises every writer already")
    api.put("semaphores/legacy", {"permits": 2})
    ids = []
    for name in ("export_report", "sync_ledger"):
        task_def(api, name, semaphores=["legacy"])
        ids += start_many(api, http_flow(api, name, gauge.url("/legacy")), 5)
    task_def(api, "fragile", concurrentExecLimit=1)
    ids += start_many(api, http_flow(api, "fragile", gauge.url("/fragile")), 4)
    gauge.hold_s = 0.2
    stack = Stack(live_database_url(), env={"NODE_FLOW_SYSTEM_TASK_THREADS": "4"})
    try:
        for index in range(3):
            stack.add_role(f"systemtasks-{index}", "nodeflow_systemtasks")
        deadline = time.monotonic() + 60
        while not all_ended(ids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all_ended(ids), stack.logs()
    finally:
        stack.stop()
    assert gauge.hits("/legacy") == 10 and gauge.hits("/fragile") == 4
    assert gauge.most["/legacy"] <= 2 and gauge.most["/fragile"] == 1
    assert {e.status for e in Execution.objects.filter(pk__in=ids)} == {"COMPLETED"}
    runners = set(Task.objects.filter(execution_id__in=ids).values_list("worker_id", flat=True))
    assert len(runners) >= 2, runners  # the work was shared out among the processes


# --- Celery ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_celery_worker_holds_the_controls_and_sends_freed_tasks_at_once(api, gauge, fresh_celery_pool, celery_worker):
    """No beat runs, so nothing recovers a spent message: each held task
    runs because the commit that freed its permit or slot sent it again."""
    celery_handoff.install()
    celery_worker()
    api.put("semaphores/legacy", {"permits": 1})
    task_def(api, "legacy_call", semaphores=["legacy"])
    task_def(api, "fragile", concurrentExecLimit=1)
    gauge.hold_s = 0.3
    ids = start_many(api, http_flow(api, "legacy_call", gauge.url("/legacy")), 3)
    ids += start_many(api, http_flow(api, "fragile", gauge.url("/fragile")), 3)
    for pk in ids:
        assert celery_tests.wait_until_ended(pk).status == "COMPLETED"
    assert gauge.hits("/legacy") == 3 and gauge.hits("/fragile") == 3
    assert gauge.most == {"/legacy": 1, "/fragile": 1}
