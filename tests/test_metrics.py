"""Prometheus metrics at /metrics (SPEC §9, docs/metrics.md): each counter
and the dispatch-latency histogram move with the engine's work, only when
its transaction commits; the state gauges are read from the database; and
one scrape of one process shows the sum of what several processes counted.

Scrapes compare before and after: the multi-process files of a deployment
outlive its processes, so earlier runs' counts are in the sums too. Task
types are named ``mx_*`` so no other test's work moves these series."""

from __future__ import annotations

import os
import socket
import time

import httpx
import pytest
from django.db import connection, transaction
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

from executions import breakers, dispatch, results
from executions.models import DecideRequest, Task
from executions.roles.decider import DeciderRole
from nodeflow import clock, metrics
from nodeflow.keys import create_api_key
from nodeflow.models import Namespace
from tests.controls_helpers import fill
from tests.engine_helpers import (
    advance,
    complete,
    execution,
    fail,
    poll,
    poll_one,
    register,
    report,
    simple,
    start,
    statuses,
    sweep,
    task_def,
)
from tests.metrics_helpers import Samples, scrape, value
from tests.procs.stack import PYTHON, Stack, live_database_url
from tests.system_helpers import http_task

pytestmark = pytest.mark.django_db(transaction=True)


# --- events --------------------------------------------------------------------


def test_it_runs_in_multi_process_mode_with_a_directory_per_deployment():
    # Settings give each deployment (database) a directory under var/.
    assert metrics.multiprocess_mode()
    assert os.path.isdir(os.environ["PROMETHEUS_MULTIPROC_DIR"])


def test_a_process_killed_before_it_sized_its_file_does_not_break_the_scrape(api, moved):
    """A process killed between creating its metrics file and sizing it
    leaves an empty file behind; the scrape sums the others."""
    task_def(api, "mx_killed", retryCount=0)
    register(api, "mx_wf_killed", simple("killed", "mx_killed"))
    start(api, "mx_wf_killed")
    empty = os.path.join(os.environ["PROMETHEUS_MULTIPROC_DIR"], "histogram_999999999.db")
    open(empty, "wb").close()
    try:
        complete(api, poll_one(api, "mx_killed"))
        assert moved("nodeflow_tasks_ended_total", task_type="mx_killed", status="COMPLETED", namespace="default") == 1
    finally:
        os.remove(empty)


def test_it_counts_worker_results_by_end_status(api, moved):
    task_def(api, "mx_ship", retryCount=0)
    register(api, "mx_wf_ship", simple("ship", "mx_ship"))
    for _ in range(4):
        start(api, "mx_wf_ship")
    first, second, third, fourth = poll(api, "mx_ship", count=4)
    complete(api, first)
    fail(api, second)
    fail(api, third, terminal=True)
    # "Not done, offer it again later" is no end.
    assert report(api, fourth, "IN_PROGRESS", callbackAfterSeconds=30).status_code == 200
    assert moved("nodeflow_tasks_ended_total", task_type="mx_ship", status="COMPLETED", namespace="default") == 1
    assert moved("nodeflow_tasks_ended_total", task_type="mx_ship", status="FAILED", namespace="default") == 1
    assert (
        moved(
            "nodeflow_tasks_ended_total", task_type="mx_ship", status="FAILED_WITH_TERMINAL_ERROR", namespace="default"
        )
        == 1
    )
    assert moved("nodeflow_tasks_ended_total", task_type="mx_ship", status="IN_PROGRESS", namespace="default") == 0


def test_it_counts_a_batch_of_results(api, moved):
    register(api, "mx_wf_batch", simple("pack", "mx_pack"))
    for _ in range(3):
        start(api, "mx_wf_batch")
    leased = poll(api, "mx_pack", count=3)
    body = {"results": [{"taskId": t["taskId"], "leaseToken": t["leaseToken"], "status": "COMPLETED"} for t in leased]}
    # The same task twice: its second answer is 409 and counts nothing.
    body["results"].append(dict(body["results"][0]))
    answers = api.post("tasks/results", body).json()["results"]
    assert [a["status"] for a in answers] == [200, 200, 200, 409]
    assert moved("nodeflow_tasks_ended_total", task_type="mx_pack", status="COMPLETED", namespace="default") == 3
    # Written together (one value per bucket), observed three times each.
    timed = {"task_type": "mx_pack", "namespace": "default"}
    assert moved("nodeflow_task_execution_seconds_count", **timed, status="COMPLETED") == 3
    assert moved("nodeflow_task_execution_seconds_bucket", **timed, status="COMPLETED", le="+Inf") == 3
    assert moved("nodeflow_dispatch_latency_seconds_count", **timed) == 3


@pytest.mark.parametrize(
    "amounts", [[0.0], [0.004, 0.005, 0.0051, 7.5, 1e9, 0.0, 0.005], [0.25] * 100, [2.5, 0.001, 2.5, 30.0, 2.5000001]]
)
def test_observations_written_together_are_those_written_one_by_one(amounts):
    # A batch's observations are written once per bucket (metrics.observe_all),
    # reaching into the histogram's own buckets: held here to what observe()
    # does, so a prometheus-client that keeps them otherwise fails this test.
    buckets = (0.005, 0.25, 2.5, 10.0)
    one_by_one, together = (Histogram(name, "h", buckets=buckets, registry=None) for name in ("mx_one", "mx_all"))
    for amount in amounts:
        one_by_one.observe(amount)
    metrics.observe_all(together, amounts)

    def samples(histogram: Histogram) -> list[tuple[str, dict]]:
        return [
            (s.name[6:], s.labels) for family in histogram.collect() for s in family.samples if "created" not in s.name
        ]

    def values(histogram: Histogram) -> list[float]:
        return [s.value for family in histogram.collect() for s in family.samples if "created" not in s.name]

    assert samples(together) == samples(one_by_one)
    assert values(together) == pytest.approx(values(one_by_one))


def test_it_counts_the_ends_the_decider_makes_once(api, moved):
    task_def(api, "mx_maybe", retryCount=0)
    register(
        api,
        "mx_wf_decided",
        {"name": "note", "taskReferenceName": "note", "type": "SET_VARIABLE", "inputParameters": {"seen": True}},
        simple("maybe", "mx_maybe", optional=True),
        simple("after", "mx_after"),
    )
    started = start(api, "mx_wf_decided")
    fail(api, poll_one(api, "mx_maybe"))
    assert statuses(execution(api, started["id"]))["maybe"] == "COMPLETED_WITH_ERRORS"
    assert moved("nodeflow_tasks_ended_total", task_type="SET_VARIABLE", status="COMPLETED", namespace="default") == 1
    # The attempt ended FAILED; the workflow absorbing it is not a second end.
    assert moved("nodeflow_tasks_ended_total", task_type="mx_maybe", status="FAILED", namespace="default") == 1
    assert (
        moved("nodeflow_tasks_ended_total", task_type="mx_maybe", status="COMPLETED_WITH_ERRORS", namespace="default")
        == 0
    )
    assert api.post(f"executions/{started['id']}/terminate", {}).status_code == 200
    assert moved("nodeflow_tasks_ended_total", task_type="mx_after", status="CANCELED", namespace="default") == 1


def test_it_counts_timeouts_and_waits_ended_by_the_sweeper(api, frozen_clock, moved):
    task_def(api, "mx_stuck", retryCount=0, scheduleToStartTimeout=5)
    register(api, "mx_wf_stuck", simple("stuck", "mx_stuck"))
    register(
        api,
        "mx_wf_wait",
        {"name": "pause", "taskReferenceName": "pause", "type": "WAIT", "inputParameters": {"duration": "3s"}},
    )
    start(api, "mx_wf_stuck")
    start(api, "mx_wf_wait")
    advance(6)
    assert moved("nodeflow_tasks_ended_total", task_type="mx_stuck", status="TIMED_OUT", namespace="default") == 1
    assert moved("nodeflow_timeouts_total", timeout="scheduleToStart", policy="RETRY", namespace="default") == 1
    assert moved("nodeflow_tasks_ended_total", task_type="WAIT", status="COMPLETED", namespace="default") == 1


def test_it_observes_dispatch_latency_from_availability_to_lease(api, frozen_clock, moved):
    task_def(api, "mx_fetch", retryCount=1, retryLogic="FIXED", retryDelaySeconds=10, jitter=0)
    register(api, "mx_wf_fetch", simple("fetch", "mx_fetch"))
    start(api, "mx_wf_fetch")
    clock.advance(3)
    fail(api, poll_one(api, "mx_fetch"))  # waited 3 s
    clock.advance(12)
    poll_one(api, "mx_fetch")  # available 10 s after the failure: waited 2 s
    histogram = "nodeflow_dispatch_latency_seconds"
    assert moved(f"{histogram}_count", task_type="mx_fetch", namespace="default") == 2
    assert moved(f"{histogram}_sum", task_type="mx_fetch", namespace="default") == pytest.approx(5.0)
    assert moved(f"{histogram}_bucket", task_type="mx_fetch", le="1.0", namespace="default") == 0
    assert moved(f"{histogram}_bucket", task_type="mx_fetch", le="2.5", namespace="default") == 1
    assert moved(f"{histogram}_bucket", task_type="mx_fetch", le="5.0", namespace="default") == 2
    assert moved(f"{histogram}_bucket", task_type="mx_fetch", le="+Inf", namespace="default") == 2
    assert moved("nodeflow_task_retries_total", task_type="mx_fetch", namespace="default") == 1


def test_it_counts_nothing_when_the_transaction_rolls_back(api, moved):
    register(api, "mx_wf_undo", simple("undo", "mx_undo"))
    start(api, "mx_wf_undo")
    leased = poll_one(api, "mx_undo")
    namespace = Namespace.objects.get(name="default")
    result = results.Result(task_id=leased["taskId"], status="COMPLETED", lease_token=leased["leaseToken"])
    with pytest.raises(RuntimeError), transaction.atomic():
        results.report_result(namespace=namespace, result=result)
        raise RuntimeError("rolled back after the result was applied")
    assert Task.objects.get(pk=leased["taskId"]).status == "IN_PROGRESS"
    assert moved("nodeflow_tasks_ended_total", task_type="mx_undo", status="COMPLETED", namespace="default") == 0
    complete(api, leased)
    assert moved("nodeflow_tasks_ended_total", task_type="mx_undo", status="COMPLETED", namespace="default") == 1


def test_a_transactions_increments_join_one_hook_and_a_savepoint_drops_only_its_own(api, moved):
    namespace = Namespace.objects.get(name="default")
    with transaction.atomic():
        for _ in range(100):
            metrics.record_timeout("mx_joined", "RETRY", namespace.id)
        assert len(connection.run_on_commit) == 1  # a hundred records, one hook
        with pytest.raises(RuntimeError), transaction.atomic():
            metrics.record_timeout("mx_joined", "RETRY", namespace.id)
            metrics.record_timeout("mx_joined", "TIME_OUT_WF", namespace.id)
            raise RuntimeError("rolled back with its savepoint")
        metrics.record_timeout("mx_joined", "TIME_OUT_WF", namespace.id)
        assert moved("nodeflow_timeouts_total", timeout="mx_joined", policy="RETRY", namespace="default") == 0
    assert moved("nodeflow_timeouts_total", timeout="mx_joined", policy="RETRY", namespace="default") == 100
    assert moved("nodeflow_timeouts_total", timeout="mx_joined", policy="TIME_OUT_WF", namespace="default") == 1


def test_it_counts_refusals_by_control_once_each(api, moved):
    register(api, "mx_nightly", simple("t", "mx_reconcile"), maxConcurrentExecutions=1)
    start(api, "mx_nightly")
    start(api, "mx_nightly", expect=429)
    fill(api, "mx_capped", 2, concurrentExecLimit=1)
    poll(api, "mx_capped", count=5)
    poll(api, "mx_capped", count=5)  # held back: one in flight already
    api.put("quotas", {"maxConcurrentExecutions": 3, "maxWorkflowDefinitions": 2})
    start(api, "mx_nightly", expect=429)  # 3 running: the namespace quota refuses first
    assert (
        api.post("metadata/workflow-definitions", {"name": "mx_one_too_many", "tasks": [simple("t")]}).status_code
        == 429
    )
    assert moved("nodeflow_limit_refusals_total", control="maxConcurrentExecutions", namespace="default") == 1
    assert moved("nodeflow_limit_refusals_total", control="concurrentExecLimit", namespace="default") == 1
    assert moved("nodeflow_limit_refusals_total", control="quota:maxConcurrentExecutions", namespace="default") == 1
    assert moved("nodeflow_limit_refusals_total", control="quota:maxWorkflowDefinitions", namespace="default") == 1


def test_a_long_poll_held_back_counts_its_control_once(api, moved):
    fill(api, "mx_held", 2, concurrentExecLimit=1)
    poll(api, "mx_held", count=5)
    # Held back for its whole wait: re-checked many times, counted once.
    assert api.post("tasks/poll/mx_held", {"workerId": "w", "count": 5, "waitSeconds": 0.3}).json() == []
    assert moved("nodeflow_limit_refusals_total", control="concurrentExecLimit", namespace="default") == 1


# --- state read from the database ------------------------------------------------


def test_it_reads_queue_depth_and_in_flight_from_the_database(api):
    ids = fill(api, "mx_depth", 4)
    poll(api, "mx_depth")
    assert api.post(f"executions/{ids[-1]}/pause", {}).status_code == 200  # its task is held: not waiting
    samples = scrape(api)
    assert value(samples, "nodeflow_queue_depth", namespace="default", task_type="mx_depth") == 2
    assert value(samples, "nodeflow_queue_in_flight", namespace="default", task_type="mx_depth") == 1
    assert value(samples, "nodeflow_database_up") == 1


def test_system_tasks_are_counted_under_their_type(api, frozen_clock, moved):
    register(api, "mx_wf_call", http_task("call", "http://127.0.0.1:9/nothing", name="mx_call"))
    start(api, "mx_wf_call")
    start(api, "mx_wf_call")
    assert value(scrape(api), "nodeflow_queue_depth", namespace="default", task_type="HTTP") == 2
    clock.advance(4)
    (leased,) = dispatch.lease_system_tasks(worker_id="runner")
    assert leased.type == "HTTP"
    assert moved("nodeflow_dispatch_latency_seconds_count", task_type="HTTP", namespace="default") == 1
    assert moved("nodeflow_dispatch_latency_seconds_sum", task_type="HTTP", namespace="default") == pytest.approx(4)
    samples = scrape(api)
    assert value(samples, "nodeflow_queue_depth", namespace="default", task_type="HTTP") == 1
    assert value(samples, "nodeflow_queue_in_flight", namespace="default", task_type="HTTP") == 1


def test_it_reads_semaphore_permits_held(api):
    api.put("semaphores/mx_erp", {"permits": 3})
    fill(api, "mx_export", 4, semaphores=["mx_erp"])
    poll(api, "mx_export", count=2)
    samples = scrape(api)
    assert value(samples, "nodeflow_semaphore_permits", namespace="default", semaphore="mx_erp") == 3
    assert value(samples, "nodeflow_semaphore_permits_held", namespace="default", semaphore="mx_erp") == 2


@pytest.fixture
def tripped_breaker():
    config = {"enabled": True, "minimumRequests": 4, "failureRatio": 0.5, "windowMs": 10_000, "openMs": 5_000}
    registry = breakers.configure(config, clock=lambda: 1000.0)
    yield registry
    breakers.configure()


def test_it_reads_breaker_states_the_processes_reported(api, tripped_breaker):
    namespace_id = Namespace.objects.get(name="default").id
    tripped_breaker.acquire("mx-closed.test", namespace_id).release(False)
    for _ in range(4):
        tripped_breaker.acquire("mx-dead.test", namespace_id).release(True)
    breakers.report()
    samples = scrape(api)

    def processes(key: str, state: str) -> float:
        return value(samples, "nodeflow_breakers", namespace="default", key=key, state=state)

    assert [processes("mx-dead.test", s) for s in ("CLOSED", "OPEN", "HALF_OPEN")] == [0, 1, 0]
    assert [processes("mx-closed.test", s) for s in ("CLOSED", "OPEN", "HALF_OPEN")] == [1, 0, 0]


def test_it_reads_decider_timer_and_lease_lag(api, frozen_clock):
    task_def(api, "mx_lease", startToCloseTimeout=60, retryDelaySeconds=0)
    register(
        api,
        "mx_wf_lag",
        simple("work", "mx_lease"),
        {"name": "pause", "taskReferenceName": "pause", "type": "WAIT", "inputParameters": {"duration": "10s"}},
    )
    started = start(api, "mx_wf_lag")
    poll_one(api, "mx_lease")
    # A decide request no process picked up (its maker died after commit).
    DecideRequest.objects.create(execution_id=started["id"], due_at=clock.now())
    clock.advance(70)  # the lease ran out 10 s ago; no role has run
    samples = scrape(api)
    assert value(samples, "nodeflow_decider_lag_seconds") == pytest.approx(70)
    assert value(samples, "nodeflow_decide_requests_due") == 1
    assert value(samples, "nodeflow_lease_expiry_lag_seconds") == pytest.approx(10)
    assert value(samples, "nodeflow_leases_expired") == 1
    while DeciderRole().tick():
        pass
    sweep()  # the lease expires: the task is retried; the WAIT after it is not reached yet
    samples = scrape(api)
    assert value(samples, "nodeflow_decider_lag_seconds") == 0
    assert value(samples, "nodeflow_lease_expiry_lag_seconds") == 0
    assert value(samples, "nodeflow_timer_lag_seconds") == 0
    complete(api, poll_one(api, "mx_lease"))
    clock.advance(25)  # the 10 s WAIT was due 15 s ago
    samples = scrape(api)
    assert value(samples, "nodeflow_timer_lag_seconds") == pytest.approx(15)
    assert value(samples, "nodeflow_timers_due") == 1


# --- several processes ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _api_process(stack: Stack, name: str) -> str:
    port = _free_port()
    stack.add(name, [PYTHON, "manage.py", "nodeflow_run", "--addr", f"127.0.0.1:{port}", "--no-roles"])
    return f"http://127.0.0.1:{port}"


def _wait_until_up(stack: Stack, url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not come up\n{stack.logs()}")


def _work(url: str, key: str, *, leases: int, refused: int) -> None:
    """Lease and complete ``leases`` tasks and be refused ``refused`` starts, through ``url``."""
    client = httpx.Client(base_url=f"{url}/v1/ns/default/", headers={"x-api-key": key}, timeout=30)
    leased = client.post("tasks/poll/mx_multi", json={"workerId": url, "count": leases}).json()
    assert len(leased) == leases, leased
    for task in leased:
        body = {"leaseToken": task["leaseToken"], "status": "COMPLETED", "outputData": {}}
        client.post(f"tasks/{task['taskId']}/result", json=body).raise_for_status()
    for _ in range(refused):
        assert client.post("executions", json={"name": "mx_wf_full"}).status_code == 429


@pytest.mark.django_db
def test_a_stacks_processes_count_in_their_own_databases_directory(tmp_path):
    """Not in the directory this process chose for its own database (the
    settings export it): a benchmark's servers on a database of their own
    had written into the one a `make run` on this database serves."""
    mine = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    show = ["shell", "-c", "import os; print(os.environ['PROMETHEUS_MULTIPROC_DIR'])"]
    theirs = Stack(live_database_url()).manage(*show).splitlines()[-1]
    assert theirs != mine
    assert os.path.basename(theirs).startswith(os.path.basename(connection.settings_dict["NAME"]) + "-")
    named = Stack(live_database_url(), env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
    assert named.manage(*show).splitlines()[-1] == str(tmp_path)


@pytest.mark.slow
def test_one_scrape_sums_what_several_processes_counted(tmp_path):
    key = create_api_key(role="admin", namespace="default")[1]
    stack = Stack(live_database_url())
    stack.env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)  # this deployment's, empty
    try:
        first, second = _api_process(stack, "api-1"), _api_process(stack, "api-2")
        _wait_until_up(stack, first)
        _wait_until_up(stack, second)
        admin = httpx.Client(base_url=f"{first}/v1/ns/default/", headers={"x-api-key": key}, timeout=30)
        admin.post(
            "metadata/workflow-definitions", json={"name": "mx_wf_multi", "tasks": [simple("t", "mx_multi")]}
        ).raise_for_status()
        admin.post(
            "metadata/workflow-definitions",
            json={"name": "mx_wf_full", "maxConcurrentExecutions": 1, "tasks": [simple("t", "mx_never_polled")]},
        ).raise_for_status()
        for _ in range(5):
            admin.post("executions", json={"name": "mx_wf_multi"}).raise_for_status()
        admin.post("executions", json={"name": "mx_wf_full"}).raise_for_status()
        _work(first, key, leases=3, refused=1)
        _work(second, key, leases=2, refused=2)
        scrapes = [Samples(httpx.get(f"{url}/metrics", timeout=30).text) for url in (first, second)]
        for samples in scrapes:
            assert (
                value(
                    samples, "nodeflow_tasks_ended_total", task_type="mx_multi", status="COMPLETED", namespace="default"
                )
                == 5
            )
            assert (
                value(samples, "nodeflow_dispatch_latency_seconds_count", task_type="mx_multi", namespace="default")
                == 5
            )
            assert (
                value(samples, "nodeflow_limit_refusals_total", control="maxConcurrentExecutions", namespace="default")
                == 3
            )
            assert value(samples, "nodeflow_queue_depth", namespace="default", task_type="mx_never_polled") == 1
            # Issue 19.3's series add up across processes too: 3 results and a
            # poll through the first, 2 and a poll through the second.
            multi = {"namespace": "default", "workflow": "mx_wf_multi"}
            assert value(samples, "nodeflow_workflows_started_total", **multi) == 5
            assert value(samples, "nodeflow_workflows_ended_total", **multi, status="COMPLETED") == 5
            assert value(samples, "nodeflow_workflow_duration_seconds_count", **multi, status="COMPLETED") == 5
            assert value(samples, "nodeflow_executions_running", namespace="default", workflow="mx_wf_full") == 1
            polls = {"namespace": "default", "queue": "mx_multi"}
            assert value(samples, "nodeflow_polls_total", **polls, outcome="tasks") == 2
            assert value(samples, "nodeflow_polls_total", **polls, outcome="empty") == 0
            result = {"namespace": "default", "route": "/v1/ns/<str:ns>/tasks/<str:task_id>/result", "method": "POST"}
            assert value(samples, "nodeflow_http_requests_total", **result, status_class="2xx", code="200") == 5
            assert value(samples, "nodeflow_http_request_duration_seconds_count", **result) == 5
            execution_seconds = {"namespace": "default", "task_type": "mx_multi", "status": "COMPLETED"}
            assert value(samples, "nodeflow_task_execution_seconds_count", **execution_seconds) == 5
    finally:
        stack.stop()
    # Both processes are gone; what they counted stays in the directory.
    # The files hold the namespace's id; a scrape shows its name.
    namespace_id = Namespace.objects.get(name="default").id
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    assert (
        registry.get_sample_value(
            "nodeflow_tasks_ended_total",
            {"namespace": f"#{namespace_id}", "task_type": "mx_multi", "status": "COMPLETED"},
        )
        == 5
    )
