"""The metrics an operator charts (issue 19.3, docs/metrics.md): workflow
counters and the running gauge, task and workflow duration histograms,
polls, 409s, HTTP requests by route, build and process info; a namespace
on every series; zeros before the first event; the text a Prometheus
parser accepts; and the optional key.

As in test_metrics, scrapes compare before and after (the multi-process
files outlive the test database), and names are ``mo_*``. Namespaces made
here get an id no earlier run used (the test database reuses ids, and the
files keep what earlier runs counted under them), so their zeros are theirs."""

from __future__ import annotations

import random
import shutil
import subprocess
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeflow import clock
from nodeflow.models import Namespace
from tests.conftest import Api
from tests.engine_helpers import advance, complete, fail, poll, poll_one, register, report, simple, start, task_def
from tests.metrics_helpers import scrape, value

pytestmark = pytest.mark.django_db(transaction=True)

POLL_ROUTE = "/v1/ns/<str:ns>/tasks/poll/<str:task_type>"
RESULT_ROUTE = "/v1/ns/<str:ns>/tasks/<str:task_id>/result"


def heartbeat(api, leased: dict):
    return api.post(f"tasks/{leased['taskId']}/heartbeat", {"leaseToken": leased["leaseToken"]})


# --- workflows ---------------------------------------------------------------------


def test_it_counts_workflows_started_and_ended_by_status(api, frozen_clock, moved):
    task_def(api, "mo_step", retryCount=0)
    register(api, "mo_order", simple("step", "mo_step"))
    register(api, "mo_slow", simple("step", "mo_never"), timeoutSeconds=30)
    ids = [start(api, "mo_order")["id"] for _ in range(4)]
    start(api, "mo_slow")
    first, second = poll(api, "mo_step", count=2)
    clock.advance(3)
    complete(api, first)
    fail(api, second)
    assert api.post(f"executions/{ids[2]}/terminate", {}).status_code == 200
    advance(31)  # mo_slow's workflow timeout
    labels = {"namespace": "default", "workflow": "mo_order"}
    assert moved("nodeflow_workflows_started_total", **labels) == 4
    assert moved("nodeflow_workflows_started_total", namespace="default", workflow="mo_slow") == 1
    assert moved("nodeflow_workflows_ended_total", **labels, status="COMPLETED") == 1
    assert moved("nodeflow_workflows_ended_total", **labels, status="FAILED") == 1
    assert moved("nodeflow_workflows_ended_total", **labels, status="TERMINATED") == 1
    assert moved("nodeflow_workflows_ended_total", namespace="default", workflow="mo_slow", status="TIMED_OUT") == 1
    assert value(scrape(api), "nodeflow_executions_running", **labels) == 1
    assert value(scrape(api), "nodeflow_executions_running", namespace="default", workflow="mo_slow") == 0
    # Durations, startedAt → endedAt: 3 s for the completed one, 34 s for the timed-out one.
    histogram = "nodeflow_workflow_duration_seconds"
    assert moved(f"{histogram}_sum", **labels, status="COMPLETED") == pytest.approx(3)
    assert moved(f"{histogram}_bucket", **labels, status="COMPLETED", le="2.5") == 0
    assert moved(f"{histogram}_bucket", **labels, status="COMPLETED", le="5.0") == 1
    assert moved(f"{histogram}_sum", namespace="default", workflow="mo_slow", status="TIMED_OUT") == pytest.approx(34)


def test_it_reads_executions_held_for_admission_apart_from_running_ones(api):
    key = "${workflow.input.tenantId}"
    register(
        api, "mo_admitted", simple("sync", "mo_sync"), rateLimitConfig={"rateLimitKey": key, "concurrentExecLimit": 1}
    )
    for _ in range(3):
        start(api, "mo_admitted", {"tenantId": "acme"})
    labels = {"namespace": "default", "workflow": "mo_admitted"}
    samples = scrape(api)
    assert value(samples, "nodeflow_executions_running", **labels) == 1
    assert value(samples, "nodeflow_executions_awaiting_admission", **labels) == 2


def test_a_sub_workflow_is_a_started_workflow_too(api, moved):
    register(api, "mo_child", simple("inner", "mo_inner"))
    register(
        api,
        "mo_parent",
        {"name": "sub", "taskReferenceName": "sub", "type": "SUB_WORKFLOW", "subWorkflowParam": {"name": "mo_child"}},
    )
    start(api, "mo_parent")
    complete(api, poll_one(api, "mo_inner"))
    assert moved("nodeflow_workflows_started_total", namespace="default", workflow="mo_child") == 1
    assert moved("nodeflow_workflows_ended_total", namespace="default", workflow="mo_child", status="COMPLETED") == 1
    assert moved("nodeflow_workflows_ended_total", namespace="default", workflow="mo_parent", status="COMPLETED") == 1
    assert moved("nodeflow_tasks_ended_total", namespace="default", task_type="SUB_WORKFLOW", status="COMPLETED") == 1


# --- tasks ---------------------------------------------------------------------------


def test_it_observes_task_execution_time_from_start_to_end(api, frozen_clock, moved):
    task_def(api, "mo_render", retryCount=0)
    register(api, "mo_wf_render", simple("render", "mo_render"))
    start(api, "mo_wf_render")
    start(api, "mo_wf_render")
    ok, bad = poll(api, "mo_render", count=2)
    clock.advance(7)
    complete(api, ok)
    clock.advance(40)
    fail(api, bad)
    histogram = "nodeflow_task_execution_seconds"
    labels = {"namespace": "default", "task_type": "mo_render"}
    assert moved(f"{histogram}_count", **labels, status="COMPLETED") == 1
    assert moved(f"{histogram}_sum", **labels, status="COMPLETED") == pytest.approx(7)
    assert moved(f"{histogram}_bucket", **labels, status="COMPLETED", le="5.0") == 0
    assert moved(f"{histogram}_bucket", **labels, status="COMPLETED", le="10.0") == 1
    assert moved(f"{histogram}_sum", **labels, status="FAILED") == pytest.approx(47)
    assert moved(f"{histogram}_bucket", **labels, status="FAILED", le="60.0") == 1


def test_it_counts_polls_by_outcome(api, moved):
    register(api, "mo_wf_poll", simple("p", "mo_polled"))
    poll(api, "mo_polled")  # nothing yet
    start(api, "mo_wf_poll")
    poll(api, "mo_polled")
    poll(api, "mo_polled")
    assert moved("nodeflow_polls_total", namespace="default", queue="mo_polled", outcome="empty") == 2
    assert moved("nodeflow_polls_total", namespace="default", queue="mo_polled", outcome="tasks") == 1


def test_it_counts_409s_by_route_and_reason(make_key, frozen_clock, moved):
    # A namespace of its own: other test processes may share the files.
    ns_api = fresh_namespace(make_key, "mo-409")
    task_def(ns_api, "mo_late", retryCount=0, heartbeatTimeout=5)
    register(ns_api, "mo_wf_late", simple("late", "mo_late"))
    for _ in range(3):
        start(ns_api, "mo_wf_late")
    done, canceled, expired = poll(ns_api, "mo_late", count=3)
    complete(ns_api, done)
    assert report(ns_api, done).status_code == 409  # ended
    assert heartbeat(ns_api, done).status_code == 409  # ended
    assert report(ns_api, {**canceled, "leaseToken": "forged"}).status_code == 409  # not its lease
    assert ns_api.post(f"executions/{canceled['executionId']}/terminate", {}).status_code == 200
    assert heartbeat(ns_api, canceled).status_code == 409  # canceled
    clock.advance(6)  # past its lease, before any sweep
    assert report(ns_api, expired).status_code == 409  # lease expired
    result = {"namespace": ns_api.namespace, "route": "result"}
    assert moved("nodeflow_task_conflicts_total", **result, reason="ended") == 1
    assert moved("nodeflow_task_conflicts_total", **result, reason="lease_lost") == 1
    assert moved("nodeflow_task_conflicts_total", **result, reason="lease_expired") == 1
    beat = {"namespace": ns_api.namespace, "route": "heartbeat"}
    assert moved("nodeflow_task_conflicts_total", **beat, reason="ended") == 1
    assert moved("nodeflow_task_conflicts_total", **beat, reason="canceled") == 1


def test_refusals_and_retries_carry_the_namespace(make_key, moved):
    # A namespace of its own: other test processes may share the files.
    ns_api = fresh_namespace(make_key, "mo-refused")
    task_def(ns_api, "mo_flaky", retryCount=1, retryDelaySeconds=0)
    register(ns_api, "mo_wf_flaky", simple("f", "mo_flaky"), maxConcurrentExecutions=1)
    start(ns_api, "mo_wf_flaky")
    start(ns_api, "mo_wf_flaky", expect=429)
    fail(ns_api, poll_one(ns_api, "mo_flaky"))
    assert moved("nodeflow_limit_refusals_total", namespace=ns_api.namespace, control="maxConcurrentExecutions") == 1
    assert moved("nodeflow_task_retries_total", namespace=ns_api.namespace, task_type="mo_flaky") == 1


# --- HTTP --------------------------------------------------------------------------------


def test_it_counts_http_requests_by_route_pattern_and_status(make_key, moved):
    # A namespace of its own: other test processes may share the files.
    ns_api = fresh_namespace(make_key, "mo-http")
    register(ns_api, "mo_wf_http", simple("h", "mo_http"))
    start(ns_api, "mo_wf_http")
    complete(ns_api, poll_one(ns_api, "mo_http"))
    poll(ns_api, "mo_http")
    ns_api.post("tasks/poll/mo_http", {"count": 0})  # refused: 400
    assert ns_api.client.get(f"/v1/ns/{ns_api.namespace}/no/such/route").status_code == 404
    ok = {"namespace": ns_api.namespace, "route": POLL_ROUTE, "method": "POST"}
    assert moved("nodeflow_http_requests_total", **ok, status_class="2xx", code="200") == 2
    assert moved("nodeflow_http_requests_total", **ok, status_class="4xx", code="400") == 1
    assert moved("nodeflow_http_request_duration_seconds_count", **ok) == 3
    result = {
        "namespace": ns_api.namespace,
        "route": RESULT_ROUTE,
        "method": "POST",
        "status_class": "2xx",
        "code": "200",
    }
    assert moved("nodeflow_http_requests_total", **result) == 1
    unmatched = {"namespace": "", "route": "unmatched", "method": "GET", "status_class": "4xx", "code": "404"}
    assert moved("nodeflow_http_requests_total", **unmatched) >= 1  # of no namespace: others' count here too


def test_a_caller_without_a_key_for_the_namespace_makes_no_namespace_label(api, moved):
    made_up = f"mo-nowhere-{uuid.uuid4().hex[:8]}"
    assert api.client.post(f"/v1/ns/{made_up}/tasks/poll/x", {}, format="json").status_code == 401
    labels = {"route": POLL_ROUTE, "method": "POST", "status_class": "4xx", "code": "401"}
    assert moved("nodeflow_http_requests_total", namespace="", **labels) >= 1  # others' count here too
    assert all(made_up not in str(key) for key in scrape(api))


# --- every series, zeros, the text ------------------------------------------------------------


# Families of the whole engine, with no namespace (documented): lags of the
# roles, the database, the build, and the process that served the scrape.
NOT_PER_NAMESPACE = {
    "nodeflow_decider_lag_seconds",
    "nodeflow_decide_requests_due",
    "nodeflow_timer_lag_seconds",
    "nodeflow_timers_due",
    "nodeflow_lease_expiry_lag_seconds",
    "nodeflow_leases_expired",
    "nodeflow_database_up",
    "nodeflow_build_info",
}


def test_every_series_carries_a_namespace(api):
    # Only what this test moves: files of an older checkout may hold series
    # from before the label (docs/metrics.md, "Upgrading").
    before = scrape(api)
    register(api, "mo_wf_all", simple("a", "mo_all"), maxConcurrentExecutions=1)
    start(api, "mo_wf_all")
    start(api, "mo_wf_all", expect=429)
    complete(api, poll_one(api, "mo_all"))
    heartbeat(api, {"taskId": str(uuid.uuid4()), "leaseToken": "x"})
    text = api.client.get("/metrics").content.decode()
    checked = 0
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("nodeflow_") or family.name in NOT_PER_NAMESPACE:
            continue
        for sample in family.samples:
            if before.get((sample.name, frozenset(sample.labels.items()))) == sample.value:
                continue
            checked += sample.labels.get("namespace") == "default"
            # Other test processes may share the files (their namespaces are
            # ids here). Routes of no namespace (/metrics, the admin) have none.
            assert sample.labels.get("namespace") or "<str:ns>" not in sample.labels.get("route", "<str:ns>"), sample
            assert not sample.labels["namespace"].startswith("#"), sample  # ids become names
    assert checked > 20


def fresh_namespace(make_key, prefix: str) -> Api:
    """An admin of a new namespace, with an id no earlier run gave out."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    Namespace.objects.create(id=random.randrange(10**8, 10**9), name=name)
    return Api(make_key("admin", name), name)


def test_known_label_sets_are_zero_before_any_event(make_key):
    other = fresh_namespace(make_key, "mo-zero")
    name = other.namespace
    task_def(other, "mo_z_task")
    register(other, "mo_z_flow", simple("z", "mo_z_task"))
    samples = scrape(other)
    wf = {"namespace": name, "workflow": "mo_z_flow"}
    assert ("nodeflow_workflows_started_total", frozenset(wf.items())) in samples
    for status in ("COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED"):
        assert samples[("nodeflow_workflows_ended_total", frozenset({**wf, "status": status}.items()))] == 0
    assert samples[("nodeflow_executions_running", frozenset(wf.items()))] == 0
    task = {"namespace": name, "task_type": "mo_z_task"}
    for status in ("COMPLETED", "FAILED", "FAILED_WITH_TERMINAL_ERROR", "TIMED_OUT", "CANCELED", "SKIPPED"):
        assert samples[("nodeflow_tasks_ended_total", frozenset({**task, "status": status}.items()))] == 0
    for outcome in ("tasks", "empty"):
        key = frozenset({"namespace": name, "queue": "mo_z_task", "outcome": outcome}.items())
        assert samples[("nodeflow_polls_total", key)] == 0
    for route in ("result", "heartbeat"):
        for reason in ("canceled", "ended", "lease_expired", "lease_lost"):
            key = frozenset({"namespace": name, "route": route, "reason": reason}.items())
            assert samples[("nodeflow_task_conflicts_total", key)] == 0
    for control in ("maxConcurrentExecutions", "concurrentExecLimit", "rateLimit", "quota:maxExecutionsPerMinute"):
        key = frozenset({"namespace": name, "control": control}.items())
        assert samples[("nodeflow_limit_refusals_total", key)] == 0
    timeout = frozenset({"namespace": name, "timeout": "startToClose", "policy": "RETRY"}.items())
    assert samples[("nodeflow_timeouts_total", timeout)] == 0


def test_a_zero_becomes_the_count_once_something_happens(make_key):
    other = fresh_namespace(make_key, "mo-count")
    name = other.namespace
    register(other, "mo_c_flow", simple("c", "mo_c_task"))
    task_def(other, "mo_c_task")
    start(other, "mo_c_flow")
    complete(other, poll_one(other, "mo_c_task"))
    samples = scrape(other)
    wf = {"namespace": name, "workflow": "mo_c_flow"}
    assert samples[("nodeflow_workflows_ended_total", frozenset({**wf, "status": "COMPLETED"}.items()))] == 1
    assert samples[("nodeflow_workflows_ended_total", frozenset({**wf, "status": "FAILED"}.items()))] == 0
    # One sample per label set: the zero is not served beside the count.
    text = other.client.get("/metrics").content.decode()
    lines = [line for line in text.splitlines() if line.startswith("nodeflow_workflows_ended_total{") and name in line]
    assert len(lines) == len(set(lines)) == 4


def test_build_info_and_the_serving_process(api):
    from django.db import connection

    samples = scrape(api)
    (build,) = [labels for (name, labels) in samples if name == "nodeflow_build_info"]
    build = dict(build)
    assert build["database"] == connection.vendor
    assert build["python"].count(".") == 2 and build["django"] and build["version"]
    assert samples[("nodeflow_build_info", frozenset(build.items()))] == 1
    rss = [labels for (name, labels) in samples if name == "process_resident_memory_bytes"]
    assert rss and all("pid" in dict(labels) for labels in rss)


def test_the_text_is_what_prometheus_accepts(api):
    register(api, "mo_wf_text", simple("t", "mo_text"))
    start(api, "mo_wf_text")
    complete(api, poll_one(api, "mo_text"))
    text = api.client.get("/metrics").content.decode()
    families = list(text_string_to_metric_families(text))
    names = [family.name for family in families]
    assert len(names) == len(set(names)), "a family is served twice"
    for family in families:
        seen = [(sample.name, tuple(sorted(sample.labels.items()))) for sample in family.samples]
        assert len(seen) == len(set(seen)), f"{family.name} repeats a sample"
    promtool = shutil.which("promtool")
    if promtool:
        checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr


# --- the key --------------------------------------------------------------------------------------


def test_metrics_can_require_any_api_key(api, settings, make_key):
    settings.NODE_FLOW_METRICS_REQUIRE_KEY = True
    worker = make_key("worker")
    client = api.client
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert "API key" in refused.json()["message"]
    assert client.get("/metrics", HTTP_X_API_KEY=worker).status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {worker}").status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer not-a-key").status_code == 401
    settings.NODE_FLOW_METRICS_KEY = "s3cret-scraper"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scraper").status_code == 200
    assert client.get("/metrics", HTTP_X_API_KEY=worker).status_code == 200


def test_metrics_stay_open_by_default(api):
    assert api.client.get("/metrics").status_code == 200


def test_a_key_of_one_namespace_scrapes_only_its_namespace(api, settings, make_key):
    settings.NODE_FLOW_METRICS_REQUIRE_KEY = True
    other = fresh_namespace(make_key, "mo-tenant")
    register(other, "mo_t_flow", simple("t", "mo_t_task"))
    register(api, "mo_d_flow", simple("d", "mo_d_task"))

    def namespaces(key: str) -> set[str]:
        response = api.client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {key}")
        assert response.status_code == 200
        text = response.content.decode()
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        assert any(s.name == "nodeflow_decider_lag_seconds" for s in samples)  # the engine's own: for every key
        return {s.labels["namespace"] for s in samples if "namespace" in s.labels}

    assert namespaces(make_key("worker", "default")) == {"default"}
    assert namespaces(make_key("developer", other.namespace)) == {other.namespace}
    assert {"default", other.namespace} <= namespaces(make_key("admin", None))
