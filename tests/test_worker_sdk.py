"""The Python worker SDK (nodeflow_worker.Worker) against a real server: the
API and every role run as a separate process on loopback (nodeflow_run), the
SDK worker runs here in threads or as its own process. Real time, bounded
waits; each function's own work is the only thing that takes time.

One server serves the whole module (each test has its own task types), and
the tests read what happened through the API, as a user would. They use no
``django_db`` mark, so they run after the database tests; the module
fixture opens the test database itself and flushes it at the end, as a
transactional test does."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.management import call_command

from nodeflow.keys import create_api_key
from nodeflow_worker import Client, LeasedTask, TaskError, TerminalError, Worker, WorkerError
from nodeflow_worker import Task as WorkerTask
from nodeflow_worker.client import parse_time
from nodeflow_worker.heartbeats import AFTER_EXPIRY_S, MIN_INTERVAL_S, Heartbeats, next_beat_in
from nodeflow_worker.reporter import Report, Reporter
from nodeflow_worker.worker import as_output, run_function
from tests.procs.stack import PYTHON, ROOT, Stack, live_database_url

FINISH_S = 20.0


class Server:
    """The real server in its own process, and an admin client of it."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.stack = Stack(live_database_url())
        self.url = self.stack.url
        self.client = Client(self.url, self.key)

    def start(self) -> None:
        self.stack.add("server", [PYTHON, "manage.py", "nodeflow_run", "--addr", f"127.0.0.1:{self.stack.port}"])
        self.stack.wait_for_api(timeout_s=60)

    def post(self, path: str, body: dict) -> dict:
        response = self.client.http.post(f"/v1/ns/default/{path}", json=body)
        assert response.status_code < 300, response.text
        return response.json()

    def one_task_flow(self, task_type: str, **task_definition) -> None:
        self.post("metadata/task-definitions", {"name": task_type, **task_definition})
        self.post(
            "metadata/workflow-definitions",
            {
                "name": f"{task_type}_flow",
                "tasks": [
                    {"name": task_type, "taskReferenceName": "only", "inputParameters": {"n": "${workflow.input.n}"}}
                ],
                "outputParameters": {"result": "${only.output}"},
            },
        )

    def start_flow(self, task_type: str, n: int = 0) -> str:
        return self.client.start(f"{task_type}_flow", {"n": n})["id"]

    def worker(self, **options) -> Worker:
        return Worker(self.url, self.key, **{"poll_wait_s": 0.5, **options})

    def tasks(self, execution_id: str) -> list[dict]:
        return sorted(self.client.execution(execution_id)["tasks"], key=lambda t: (t["path"], t["attempt"]))

    def wait_until_ended(self, *ids: str, timeout_s: float = FINISH_S) -> dict[str, dict]:
        found: dict[str, dict] = {}

        def ended() -> bool:
            found.update({pk: self.client.execution(pk) for pk in ids})
            return all(found[pk]["status"] != "RUNNING" for pk in ids)

        wait_for(ended, timeout_s, lambda: f"executions still running; server logs:\n{self.stack.logs()}")
        return found

    def close(self) -> None:
        self.client.close()
        self.stack.stop()


def wait_for(done: Callable[[], bool], timeout_s: float, why: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            pytest.fail(f"not done within {timeout_s} s. {why()}")
        time.sleep(0.05)


def _session_sets_up_the_database(session: pytest.Session) -> bool:
    """Whether pytest-django creates the test database for this session: it
    does only when some collected test asks for the database."""
    return any(
        item.get_closest_marker("django_db") or {"db", "transactional_db", "live_server"} & set(item.fixturenames)
        for item in session.items
    )


@pytest.fixture(scope="module")
def live_db(request, django_db_setup, django_db_blocker):
    """The test database, open to this module's fixtures (the server process
    writes to it; the tests read through the API). Created here when no other
    collected test needed it; flushed afterwards, as a transactional test does."""
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        created = None
        if not _session_sets_up_the_database(request.session):
            created = setup_databases(verbosity=0, interactive=False, aliases={"default"})
        yield
        call_command("flush", verbosity=0, interactive=False)
        if created is not None:
            teardown_databases(created, verbosity=0)


@pytest.fixture(scope="module")
def key(live_db) -> str:
    return create_api_key(role="admin", namespace="default")[1]


@pytest.fixture(scope="module")
def server(key):
    server = Server(key)
    server.start()
    yield server
    server.close()


@pytest.fixture
def running():
    """running(worker): start it now; it is stopped (gracefully) at the end."""
    started: list[Worker] = []

    def start(worker: Worker) -> Worker:
        worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        assert worker.stop(timeout=15)


# --- importable without Django -------------------------------------------------


def test_it_imports_without_django_or_its_settings():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import sys, nodeflow_worker, nodeflow_worker.__main__\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))"
    )
    done = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --- pure parts ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("left_s", "extended", "expected"),
    [
        (3.0, True, 1.0),  # a third of what the lease has left
        (90.0, True, 30.0),  # never later than the cap
        (0.03, True, MIN_INTERVAL_S),  # never sooner than the floor
        (-1.0, True, MIN_INTERVAL_S),  # already expired on our clock: beat at once
        (None, True, 30.0),  # no expiry known
        (2.0, False, 2.0 + AFTER_EXPIRY_S),  # at the start-to-close cap: look once it has ended
        (-1.0, False, AFTER_EXPIRY_S),
    ],
)
def test_the_next_heartbeat_comes_at_a_third_of_the_lease_left(left_s, extended, expected):
    assert next_beat_in(left_s, extended=extended, max_interval_s=30.0) == pytest.approx(expected)


class _Lease:
    def __init__(self, task_id: str, lease_s: float) -> None:
        self.task_id = task_id
        self.lease_expires_at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=lease_s)


def test_the_heartbeat_loop_is_woken_only_by_a_task_due_before_it_would_wake():
    # A worker adds a task to the heartbeat loop for every lease: waking the
    # loop for each one cost a thread switch per task, though a lease is long
    # and its first beat is seldom the soonest.
    beats = Heartbeats(client=None, max_interval_s=30.0)  # type: ignore[arg-type] # nothing is due: no beat is sent
    woken = []
    notify_all = beats._cond.notify_all
    beats._cond.notify_all = lambda: woken.append(1) or notify_all()  # type: ignore[method-assign] # counts the loop's wake-ups
    beats.start()

    def asleep_until(low_s: float, high_s: float) -> Callable[[], bool]:
        return lambda: low_s < beats._sleeps_until - time.monotonic() < high_s

    try:
        wait_for(asleep_until(25, 31), 5)  # idle: asleep for its longest interval (30 s)
        beats.add(_Lease("a", 60.0))  # type: ignore[arg-type] # due in 20 s, before the loop would wake
        wait_for(asleep_until(15, 21), 5)  # woken, and asleep until a's beat
        assert woken == [1]
        beats.add(_Lease("b", 90.0))  # type: ignore[arg-type] # due in 30 s: after a's, the loop need not wake
        assert woken == [1]
        beats.add(_Lease("c", 3.0))  # type: ignore[arg-type] # due in 1 s: before a's, so it must
        assert woken == [1, 1]
    finally:
        beats.close()


def _task(worker: Worker, attempt: int = 1) -> WorkerTask:
    leased = LeasedTask(
        task_id="t1",
        execution_id="e1",
        task_type="x",
        input={"n": 1},
        attempt=attempt,
        idempotency_key="e1:x",
        lease_token="tok",
        raw={},
    )
    return WorkerTask(leased, worker)


def _raise(exc: BaseException):
    def fn(task):
        raise exc

    return fn


@pytest.mark.parametrize(
    ("fn", "status", "reason", "output"),
    [
        (lambda task: {"id": 7}, "COMPLETED", "", {"id": 7}),
        (lambda task: None, "COMPLETED", "", {}),
        (lambda task: [1, 2], "COMPLETED", "", {"result": [1, 2]}),
        (lambda task: {"when": dt.datetime.now()}, "FAILED", "output is not JSON-serializable", {}),
        (
            _raise(ValueError("boom")),
            "FAILED",
            "ValueError: boom",
            {"error": {"type": "ValueError", "message": "boom"}},
        ),
        (
            _raise(TaskError("declined", code="card_declined", output={"tries": 1})),
            "FAILED",
            "card_declined: declined",
            {"tries": 1, "error": {"code": "card_declined", "message": "declined"}},
        ),
        (
            _raise(TerminalError("bad amount", code="INVALID_ARGUMENT")),
            "FAILED_WITH_TERMINAL_ERROR",
            "INVALID_ARGUMENT: bad amount",
            {"error": {"code": "INVALID_ARGUMENT", "message": "bad amount"}},
        ),
        (
            _raise(TerminalError("no code")),
            "FAILED_WITH_TERMINAL_ERROR",
            "no code",
            {"error": {"code": "", "message": "no code"}},
        ),
    ],
)
def test_what_a_function_does_becomes_its_result(fn, status, reason, output):
    report = run_function(fn, _task(Worker("http://127.0.0.1:9", "k")))
    assert (report.status, report.output) == (status, output)
    assert report.reason.startswith(reason)


def test_a_failure_sends_its_traceback_in_the_logs():
    report = run_function(_raise(KeyError("missing")), _task(Worker("http://127.0.0.1:9", "k")))
    assert any("Traceback" in line and "KeyError" in line for line in report.logs)


@pytest.mark.parametrize(
    ("value", "output"), [({"a": 1}, {"a": 1}), (None, {}), (3, {"result": 3}), ("s", {"result": "s"})]
)
def test_a_return_value_becomes_output_data(value, output):
    assert as_output(value) == output


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("bad name!", lambda t: None), {}, "not a task type name"),
        (("x", lambda t: None), {"concurrency": 0}, "concurrency"),
    ],
)
def test_registration_rejects_bad_names_and_concurrency(args, kwargs, message):
    worker = Worker("http://127.0.0.1:9", "k")
    with pytest.raises(ValueError, match=message):
        worker.register(*args, **kwargs)


def test_a_task_type_is_registered_once():
    worker = Worker("http://127.0.0.1:9", "k")
    worker.task("x")(lambda t: None)
    with pytest.raises(ValueError, match="registered already"):
        worker.register("x", lambda t: None)


# --- against a real server -----------------------------------------------------


def test_the_readme_example_worker_runs_the_checkout_workflow_to_completion(server):
    server.post(
        "metadata/task-definitions",
        {"name": "charge", "retryCount": 5, "retryDelaySeconds": 0.1, "nonRetryableErrors": ["card_declined"]},
    )
    server.post(
        "metadata/workflow-definitions",
        {
            "name": "checkout",
            "tasks": [
                {
                    "name": "charge",
                    "taskReferenceName": "charge",
                    "inputParameters": {"amount": "${workflow.input.amount}"},
                },
                {
                    "name": "notify",
                    "taskReferenceName": "notify",
                    "optional": True,
                    "retryCount": 1,
                    "inputParameters": {"chargeId": "${charge.output.id}"},
                },
            ],
        },
    )
    paid = server.client.start("checkout", {"amount": 42}, idempotencyKey="order-1001")["id"]
    refused = server.client.start("checkout", {"amount": -5})["id"]
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    worker = subprocess.Popen(
        [PYTHON, "-m", "examples.worker"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**env, "NF_URL": server.url, "NF_API_KEY": server.key},
    )
    try:
        ended = server.wait_until_ended(paid, refused)
    finally:
        # Two signals: the second exits at once, without waiting for the poll in progress.
        worker.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=5)[0]
    assert worker.returncode == 128 + signal.SIGTERM, output
    assert ended[paid]["status"] == "COMPLETED", output
    charge, notify = server.tasks(paid)
    assert charge["outputData"] == {"id": f"ch_{charge['idempotencyKey'][-12:]}", "amount": 42}
    assert (notify["status"], notify["outputData"]) == ("COMPLETED", {"sent": True})
    assert "notifying about charge ch_" in notify["logs"][0]["log"]
    # Bad input is a terminal error: one attempt, though five retries were allowed.
    assert ended[refused]["status"] == "FAILED", output
    [only] = server.tasks(refused)
    assert only["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert only["reasonForIncompletion"].startswith("INVALID_ARGUMENT: amount must be a positive number")


def test_it_never_runs_more_than_concurrency_functions_at_once(server, running):
    server.one_task_flow("capped")
    lock, now, most, leased_most = threading.Lock(), [0], [0], [0]
    threads: set[threading.Thread] = set()
    worker = server.worker(concurrency=3)

    @worker.task("capped")
    def capped(task):
        with lock:
            threads.add(threading.current_thread())
            now[0] += 1
            most[0] = max(most[0], now[0])
            leased_most[0] = max(leased_most[0], worker.in_flight)
        time.sleep(0.2)
        with lock:
            now[0] -= 1
        return {"n": task.input["n"]}

    ids = [server.start_flow("capped", n) for n in range(10)]
    running(worker)
    ended = server.wait_until_ended(*ids)
    assert {e["status"] for e in ended.values()} == {"COMPLETED"}
    assert most[0] == 3  # pressed against the limit, never past it
    assert leased_most[0] <= 3  # nor more leased than slots
    assert len(threads) <= 3, threads  # ten tasks on the threads of three slots, kept between tasks
    assert {e["output"]["result"]["n"] for e in ended.values()} == set(range(10))
    assert {t["attempt"] for e in ended.values() for t in e["tasks"]} == {1}


def test_heartbeats_keep_a_task_alive_past_its_heartbeat_timeout(server, running):
    # Without a beat the task would time out after 1 s and, with no retries, fail the execution.
    server.one_task_flow("slow", heartbeatTimeout=1, startToCloseTimeout=20, retryCount=0)
    worker = server.worker()
    lost = []

    @worker.task("slow")
    def slow(task):
        time.sleep(2.5)
        lost.append(task.lease_lost.is_set())
        return {"done": True}

    execution_id = server.start_flow("slow")
    running(worker)
    ended = server.wait_until_ended(execution_id)
    [task] = server.tasks(execution_id)
    assert (ended[execution_id]["status"], task["status"], task["outputData"]) == (
        "COMPLETED",
        "COMPLETED",
        {"done": True},
    )
    assert lost == [False]
    assert parse_time(task["endedAt"]) - parse_time(task["startedAt"]) > dt.timedelta(seconds=2)


def test_a_raised_exception_fails_the_attempt_and_the_server_retries_it(server, running):
    server.one_task_flow("flaky", retryCount=2, retryDelaySeconds=0, jitter=0)
    worker = server.worker()

    @worker.task("flaky")
    def flaky(task):
        if task.attempt == 1:
            raise RuntimeError("connection reset")
        return {"attempt": task.attempt}

    execution_id = server.start_flow("flaky")
    running(worker)
    assert server.wait_until_ended(execution_id)[execution_id]["status"] == "COMPLETED"
    first, second = server.tasks(execution_id)
    assert (first["status"], first["reasonForIncompletion"]) == ("FAILED", "RuntimeError: connection reset")
    assert "Traceback" in first["logs"][-1]["log"]
    assert (second["status"], second["outputData"]) == ("COMPLETED", {"attempt": 2})


def test_a_terminal_error_is_not_retried(server, running):
    server.one_task_flow("declines", retryCount=3, retryDelaySeconds=0)
    worker = server.worker()
    calls = []

    @worker.task("declines")
    def declines(task):
        calls.append(task.attempt)
        raise TerminalError("card declined", code="card_declined", output={"last4": "4242"})

    execution_id = server.start_flow("declines")
    running(worker)
    ended = server.wait_until_ended(execution_id)
    [task] = server.tasks(execution_id)
    assert ended[execution_id]["status"] == "FAILED"
    assert (task["status"], task["reasonForIncompletion"]) == (
        "FAILED_WITH_TERMINAL_ERROR",
        "card_declined: card declined",
    )
    assert task["outputData"] == {"last4": "4242", "error": {"code": "card_declined", "message": "card declined"}}
    assert calls == [1]


def test_the_idempotency_key_is_the_same_for_every_attempt(server, running):
    server.one_task_flow("keyed", retryCount=3, retryDelaySeconds=0, jitter=0)
    worker = server.worker()
    seen = []

    @worker.task("keyed")
    def keyed(task):
        seen.append((task.attempt, task.task_id, task.idempotency_key))
        if task.attempt < 3:
            raise TaskError("try again")
        return {}

    execution_id = server.start_flow("keyed")
    running(worker)
    assert server.wait_until_ended(execution_id)[execution_id]["status"] == "COMPLETED"
    rows = server.tasks(execution_id)
    assert [attempt for attempt, _, _ in seen] == [1, 2, 3]
    assert [task_id for _, task_id, _ in seen] == [row["taskId"] for row in rows]  # three rows, three ids
    key = rows[0]["idempotencyKey"]
    assert key and {k for _, _, k in seen} == {row["idempotencyKey"] for row in rows} == {key}  # one key


def test_stop_lets_the_task_in_flight_finish_and_report_and_leases_no_more(server):
    server.one_task_flow("drained")
    worker = server.worker(concurrency=1)
    entered, release, calls = threading.Event(), threading.Event(), []

    @worker.task("drained")
    def drained(task):
        calls.append(task.task_id)
        entered.set()
        release.wait(10)
        return {"finished": True}

    ids = [server.start_flow("drained", n) for n in range(2)]
    worker.start()
    assert entered.wait(10)
    stopped = []
    stopper = threading.Thread(target=lambda: stopped.append(worker.stop()))
    stopper.start()
    stopper.join(0.3)
    assert stopper.is_alive()  # waiting for the task in flight
    release.set()
    stopper.join(10)
    assert stopped == [True]
    # Reported before stop returned; the other task was never leased.
    tasks = {t["taskId"]: t for pk in ids for t in server.tasks(pk)}
    assert sorted(t["status"] for t in tasks.values()) == ["COMPLETED", "SCHEDULED"]
    assert calls and tasks[calls[0]]["outputData"] == {"finished": True}
    assert len(calls) == 1 and worker.in_flight == 0


def test_a_canceled_task_loses_its_lease_and_its_result_is_dropped(server, running):
    server.one_task_flow("doomed", heartbeatTimeout=1, startToCloseTimeout=20)
    worker = server.worker()
    entered, noticed = threading.Event(), []

    @worker.task("doomed")
    def doomed(task):
        entered.set()
        noticed.append(task.lease_lost.wait(10))  # the next heartbeat answers 409
        return {"too": "late"}

    execution_id = server.start_flow("doomed")
    running(worker)
    assert entered.wait(10)
    server.post(f"executions/{execution_id}/terminate", {"reason": "customer left"})
    wait_for(lambda: bool(noticed), 10)
    wait_for(lambda: worker.in_flight == 0, 5)
    [task] = server.tasks(execution_id)
    assert noticed == [True]
    assert (task["status"], task["outputData"]) == ("CANCELED", {})


def test_a_task_that_arrives_while_stopping_is_handed_back_not_run(server):
    server.one_task_flow("late")
    worker = server.worker(poll_wait_s=5)
    calls, polling = [], threading.Event()
    worker.task("late")(lambda task: calls.append(task.task_id))
    real_poll = worker.client.poll
    worker.client.poll = lambda *a, **k: polling.set() or real_poll(*a, **k)
    worker.start()
    assert polling.wait(10)
    worker.stop(wait=False)  # the poll in progress is not abandoned: it could still lease
    execution_id = server.start_flow("late")
    assert worker.stop(timeout=15)
    assert calls == []
    # Handed back at once (not left to sit out its lease): another worker runs it.
    other = server.worker()
    other.task("late")(lambda task: {"by": "other"})
    other.start()
    try:
        assert server.wait_until_ended(execution_id, timeout_s=10)[execution_id]["status"] == "COMPLETED"
    finally:
        other.stop(timeout=15)
    [task] = server.tasks(execution_id)
    assert (task["attempt"], task["outputData"]) == (1, {"by": "other"})


def test_run_raises_when_the_server_refuses_the_key(server):
    worker = Worker(server.url, "nf_not_a_key", poll_wait_s=0.5)
    worker.task("refused")(lambda task: {})
    began = time.monotonic()
    with pytest.raises(WorkerError, match="401"):
        worker.run()
    assert time.monotonic() - began < 5


def test_results_that_finish_together_go_in_one_batch(server):
    server.one_task_flow("batched")
    ids = [server.start_flow("batched", n) for n in range(5)]
    leased: list[LeasedTask] = []
    wait_for(
        lambda: (
            bool(leased.extend(server.client.poll("batched", worker_id="b", count=5 - len(leased)))) or len(leased) == 5
        ),
        10,
    )
    client, calls, reported = Client(server.url, server.key), [], []
    send_batch, send_one = client.post_results, client.result
    client.post_results = lambda bodies: calls.append(len(bodies)) or send_batch(bodies)
    client.result = lambda *a, **k: calls.append(1) or send_one(*a, **k)
    reporter, worker = Reporter(client), server.worker()
    for item in leased:
        reporter.submit(
            Report(
                WorkerTask(item, worker), "COMPLETED", output={"n": item.input["n"]}, done=lambda: reported.append(1)
            )
        )
    reporter.start()
    reporter.close()
    client.close()
    assert calls == [5] and len(reported) == 5
    assert {e["status"] for e in server.wait_until_ended(*ids).values()} == {"COMPLETED"}


@pytest.mark.parametrize(("eager", "leased_by_polls"), [(True, 1), (False, 5)])
def test_a_result_leases_the_next_step_in_the_same_request(server, running, eager, leased_by_polls):
    # Eager dispatch: each step's result brings the next step back with it,
    # so a sequential flow is one request per step (without it, a result and a poll).
    task_type = f"stepper_{eager}"
    server.post("metadata/task-definitions", {"name": task_type})
    steps = [{"name": task_type, "taskReferenceName": f"s{i}", "inputParameters": {"i": i}} for i in range(5)]
    server.post("metadata/workflow-definitions", {"name": f"{task_type}_steps", "tasks": steps})
    worker = server.worker(concurrency=1, eager_dispatch=eager)
    polled: list[int] = []
    poll = worker.client.poll
    worker.client.poll = lambda *a, **k: (lambda got: polled.append(len(got)) or got)(poll(*a, **k))
    worker.task(task_type)(lambda task: {"i": task.input["i"]})
    execution_id = server.client.start(f"{task_type}_steps")["id"]
    running(worker)
    assert server.wait_until_ended(execution_id)[execution_id]["status"] == "COMPLETED"
    assert sum(polled) == leased_by_polls, polled


def test_it_keeps_polling_until_the_server_comes_up(key):
    server = Server(key)
    try:
        worker = server.worker()
        worker.task("patient")(lambda task: {"ok": True})
        worker.start()  # nothing listens yet: its polls fail and are retried with backoff
        server.start()
        server.one_task_flow("patient")
        execution_id = server.start_flow("patient")
        assert server.wait_until_ended(execution_id)[execution_id]["status"] == "COMPLETED"
        assert worker.stop(timeout=15)
    finally:
        server.close()


WORKER_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from nodeflow_worker import Worker

    url, key, task_type, marker, seconds = sys.argv[1:4] + [Path(sys.argv[4]), float(sys.argv[5])]
    worker = Worker(url, key, poll_wait_s=0.5)

    @worker.task(task_type)
    def signalled(task):
        marker.write_text("started")
        time.sleep(seconds)
        return {"slept": seconds}

    worker.run()
""")


def _script_worker(server: Server, tmp_path: Path, task_type: str, seconds: float) -> tuple[subprocess.Popen, Path]:
    script, marker = tmp_path / "signalled_worker.py", tmp_path / "started"
    script.write_text(WORKER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    process = subprocess.Popen(
        [PYTHON, str(script), server.url, server.key, task_type, str(marker), str(seconds)],
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return process, marker


def _wait_started(process: subprocess.Popen, marker: Path) -> None:
    wait_for(lambda: marker.exists() or process.poll() is not None, 15)
    assert marker.exists(), process.communicate()[0]


def test_sigterm_lets_the_task_in_flight_finish_and_report_then_exits(server, tmp_path):
    server.one_task_flow("signalled", retryCount=0)
    execution_id = server.start_flow("signalled")
    process, marker = _script_worker(server, tmp_path, "signalled", seconds=1.0)
    _wait_started(process, marker)
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=10)[0]
    assert process.returncode == 0, output
    [task] = server.tasks(execution_id)
    assert (task["status"], task["outputData"]) == ("COMPLETED", {"slept": 1.0}), output


def test_a_second_signal_exits_at_once(server, tmp_path):
    server.one_task_flow("abandoned", retryCount=0)
    execution_id = server.start_flow("abandoned")
    process, marker = _script_worker(server, tmp_path, "abandoned", seconds=60)
    _wait_started(process, marker)
    process.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert process.poll() is None  # still finishing its task
    began = time.monotonic()
    process.send_signal(signal.SIGINT)
    output = process.communicate(timeout=5)[0]
    assert time.monotonic() - began < 2
    assert process.returncode == 128 + signal.SIGINT, output
    assert server.tasks(execution_id)[0]["status"] == "IN_PROGRESS"  # abandoned: its lease will run out
