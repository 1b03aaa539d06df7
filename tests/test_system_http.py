"""HTTP, HTTP_POLL and WEBHOOK against a real HTTP server on loopback:
output shape, failure classification (SPEC §5), Retry-After, signing,
polling, and the outbound deny-list."""

from __future__ import annotations

import datetime as dt
import email.utils
import hashlib
import hmac
import json

import pytest
from django.test import override_settings

from nodeflow import clock
from tests.engine_helpers import execution, register, start, task_at, task_def, tasks_at
from tests.procs.stack import free_port
from tests.system_helpers import http_task, run_system_tasks, system_task

pytestmark = pytest.mark.django_db


def run_one(api, task: dict, **definition) -> dict:
    """Register a workflow of one task, start it, run the system tasks; the view."""
    register(api, "flow", task, **definition)
    started = start(api, "flow")
    run_system_tasks()
    return execution(api, started["id"])


def parse(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


# --- output shape -----------------------------------------------------------


def test_it_completes_with_the_response(api, http_server):
    task = http_task("call", http_server.url("/ok?x=1"), method="POST", headers={"X-Trace": "abc"}, body={"order": 42})
    view = run_one(api, task)
    assert view["status"] == "COMPLETED"
    response = task_at(view, "call")["outputData"]["response"]
    assert response["statusCode"] == 200
    assert response["headers"]["x-test"] == "yes"
    assert response["body"]["method"] == "POST"
    assert json.loads(response["body"]["body"]) == {"order": 42}
    seen = http_server.requests[0]
    assert seen.headers["x-trace"] == "abc" and seen.headers["content-type"] == "application/json"


def test_it_sends_a_string_body_as_text(api, http_server):
    view = run_one(api, http_task("call", http_server.url("/ok"), method="PUT", body="plain words"))
    assert task_at(view, "call")["status"] == "COMPLETED"
    assert http_server.requests[0].body == b"plain words"
    assert http_server.requests[0].headers["content-type"].startswith("text/plain")


# --- classification ---------------------------------------------------------


def test_it_fails_terminally_on_a_404(api, http_server):
    view = run_one(api, http_task("call", http_server.url("/status/404")))
    task = task_at(view, "call")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "HTTP 404" in task["reasonForIncompletion"]
    assert task["outputData"]["response"]["statusCode"] == 404
    assert len(tasks_at(view, "call")) == 1  # not retried
    assert view["status"] == "FAILED"


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_it_retries_408_429_and_5xx(api, http_server, status):
    view = run_one(api, http_task("call", http_server.url(f"/status/{status}")))
    first, second = tasks_at(view, "call")
    assert first["status"] == "FAILED"
    assert f"HTTP {status}" in first["reasonForIncompletion"]
    assert second["status"] == "SCHEDULED" and second["attempt"] == 2


def test_it_retries_a_read_timeout(api, http_server):
    view = run_one(api, http_task("call", http_server.url("/slow"), readTimeout=0.2))
    first = tasks_at(view, "call")[0]
    assert first["status"] == "FAILED"
    assert first["reasonForIncompletion"].startswith("timeout: ReadTimeout")


def test_it_retries_a_closed_connection(api, http_server):
    view = run_one(api, http_task("call", http_server.url("/close")))
    first = tasks_at(view, "call")[0]
    assert first["status"] == "FAILED"
    assert first["reasonForIncompletion"].startswith("connection error")


def test_it_retries_a_refused_connection(api):
    view = run_one(api, http_task("call", f"http://127.0.0.1:{free_port()}/", connectTimeout=1))
    first = tasks_at(view, "call")[0]
    assert first["status"] == "FAILED"
    assert first["reasonForIncompletion"].startswith("connection error: ConnectError")


def test_it_fails_terminally_on_bad_input(api):
    view = run_one(api, system_task("call", "HTTP", http_request={"uri": "ftp://example.com/x"}))
    task = task_at(view, "call")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "http_request.uri" in task["reasonForIncompletion"]


# --- Retry-After --------------------------------------------------------------


def test_it_waits_at_least_retry_after_seconds(api, http_server, frozen_clock):
    task_def(api, "call", retryDelaySeconds=1, jitter=0)
    view = run_one(api, http_task("call", http_server.url("/status/429?retry_after=7")))
    first, second = tasks_at(view, "call")
    assert first["outputData"]["retryAfterSeconds"] == 7
    assert parse(second["availableAt"]) == parse(first["endedAt"]) + dt.timedelta(seconds=7)
    assert second["blockedBy"]["control"] == "retryBackoff"


def test_it_reads_an_http_date_and_keeps_the_cap(api, http_server, frozen_clock):
    task_def(api, "call", retryDelaySeconds=1, jitter=0, maxRetryDelaySeconds=20)
    later = email.utils.format_datetime(frozen_clock + dt.timedelta(seconds=60), usegmt=True)
    view = run_one(api, http_task("call", http_server.url(f"/status/503?retry_after={later}")))
    first, second = tasks_at(view, "call")
    assert first["outputData"]["retryAfterSeconds"] == 60
    assert parse(second["availableAt"]) == parse(first["endedAt"]) + dt.timedelta(seconds=20)


def test_it_runs_the_retry_when_its_delay_has_passed(api, http_server, frozen_clock):
    task_def(api, "call", retryDelaySeconds=1, jitter=0)
    http_server.sequence = [(503, {}), (200, {"ok": True})]
    view = run_one(api, http_task("call", http_server.url("/sequence")))
    assert task_at(view, "call")["status"] == "SCHEDULED"
    assert run_system_tasks() == 0  # not due yet
    clock.advance(1)
    assert run_system_tasks() == 1
    view = execution(api, view["id"])
    assert view["status"] == "COMPLETED"
    assert task_at(view, "call")["outputData"]["response"]["body"] == {"ok": True}


# --- WEBHOOK ----------------------------------------------------------------------


def test_it_signs_a_webhook_the_receiver_can_verify(api, http_server):
    assert api.put("secrets/partner", {"value": "s3cret"}).status_code == 201
    task = system_task(
        "hook", "WEBHOOK", url=http_server.url("/ok"), payload={"event": "paid", "amount": 5}, secretName="partner"
    )
    view = run_one(api, task)
    done = task_at(view, "hook")
    assert done["status"] == "COMPLETED" and done["outputData"]["response"]["statusCode"] == 200
    seen = http_server.requests[0]
    assert seen.method == "POST" and json.loads(seen.body) == {"event": "paid", "amount": 5}
    timestamp = seen.headers["x-nodeflow-timestamp"]
    expected = hmac.new(b"s3cret", timestamp.encode() + b"." + seen.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(seen.headers["x-nodeflow-signature"], f"sha256={expected}")
    assert seen.headers["x-nodeflow-idempotency-key"] == done["idempotencyKey"]


def test_it_reads_a_webhook_secret_from_the_environment(api, http_server, monkeypatch):
    monkeypatch.setenv("NODE_FLOW_SECRET_DEFAULT__BILLING_HOOK", "from-env")
    view = run_one(api, system_task("hook", "WEBHOOK", url=http_server.url("/ok"), secretName="billing-hook"))
    seen = http_server.requests[0]
    expected = hmac.new(
        b"from-env", seen.headers["x-nodeflow-timestamp"].encode() + b"." + seen.body, hashlib.sha256
    ).hexdigest()
    assert task_at(view, "hook")["status"] == "COMPLETED"
    assert seen.headers["x-nodeflow-signature"] == f"sha256={expected}"


def test_it_fails_a_webhook_without_its_secret_terminally(api, http_server):
    view = run_one(api, system_task("hook", "WEBHOOK", url=http_server.url("/ok"), secretName="nope"))
    task = task_at(view, "hook")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "secret 'nope' is not configured in namespace 'default'" in task["reasonForIncompletion"]
    assert http_server.requests == []


@pytest.mark.parametrize("configured", ["setting", "environment", "api"])
def test_a_webhook_signs_only_with_its_own_namespaces_secret(
    api, api_for, http_server, monkeypatch, settings, configured
):
    # Tenant B's secret "b-key" exists; a developer of namespace default
    # names it: no body of its choosing is ever signed with it.
    if configured == "setting":
        settings.NODE_FLOW_WEBHOOK_SECRETS = {"tenant-b/b-key": "b-secret"}
    elif configured == "environment":
        monkeypatch.setenv("NODE_FLOW_SECRET_TENANT_B__B_KEY", "b-secret")
    else:
        assert api_for("admin", "tenant-b").put("secrets/b-key", {"value": "b-secret"}).status_code == 201
    view = run_one(api, system_task("hook", "WEBHOOK", url=http_server.url("/ok"), secretName="b-key"))
    task = task_at(view, "hook")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "not configured in namespace 'default'" in task["reasonForIncompletion"]
    assert http_server.requests == []


def test_unscoped_operator_secrets_sign_nothing(api, http_server, settings):
    settings.NODE_FLOW_WEBHOOK_SECRETS = {"partner": "global"}
    view = run_one(api, system_task("hook", "WEBHOOK", url=http_server.url("/ok"), secretName="partner"))
    assert task_at(view, "hook")["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert http_server.requests == []


# --- HTTP_POLL ----------------------------------------------------------------------


def test_it_polls_until_the_condition_holds(api, http_server, frozen_clock):
    http_server.sequence = [(200, {"state": "RUNNING"}), (200, {"state": "RUNNING"}), (200, {"state": "DONE"})]
    task = system_task(
        "poll",
        "HTTP_POLL",
        http_request={"uri": http_server.url("/sequence")},
        pollingInterval=5,
        terminationCondition="$.response.body.state == 'DONE'",
    )
    view = run_one(api, task)
    waiting = task_at(view, "poll")
    assert waiting["status"] == "SCHEDULED" and waiting["attempt"] == 1
    assert parse(waiting["availableAt"]) == frozen_clock + dt.timedelta(seconds=5)
    assert waiting["outputData"]["pollCount"] == 1
    for _ in range(2):
        assert run_system_tasks() == 0  # nothing sleeps: the task is simply not due
        clock.advance(5)
        assert run_system_tasks() == 1
    view = execution(api, view["id"])
    done = task_at(view, "poll")
    assert view["status"] == "COMPLETED" and len(tasks_at(view, "poll")) == 1
    assert done["outputData"]["pollCount"] == 3
    assert done["outputData"]["response"]["body"] == {"state": "DONE"}
    assert http_server.hits("/sequence") == 3


def test_it_fails_a_poll_whose_condition_throws_terminally(api, http_server):
    task = system_task(
        "poll",
        "HTTP_POLL",
        http_request={"uri": http_server.url("/ok")},
        pollingInterval=1,
        terminationCondition="$.response.nothing.here",
    )
    task = task_at(run_one(api, task), "poll")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert task["reasonForIncompletion"].startswith("terminationCondition failed")


# --- outbound policy -------------------------------------------------------------------


def test_it_refuses_the_cloud_metadata_address_by_default(api):
    view = run_one(api, http_task("call", "http://169.254.169.254/latest/meta-data/"))
    task = task_at(view, "call")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "refused" in task["reasonForIncompletion"] and "169.254.0.0/16" in task["reasonForIncompletion"]


def test_it_refuses_a_denied_host_name_before_resolving_it(api):
    view = run_one(api, http_task("call", "http://metadata.google.internal/computeMetadata/v1/"))
    task = task_at(view, "call")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "NODE_FLOW_OUTBOUND_DENY" in task["reasonForIncompletion"]


@override_settings(NODE_FLOW_OUTBOUND_DENY=["127.0.0.0/8"])
def test_it_checks_the_deny_list_after_resolving(api, http_server):
    view = run_one(api, http_task("call", http_server.url("/ok").replace("127.0.0.1", "localhost")))
    task = task_at(view, "call")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "resolves to 127.0.0.1" in task["reasonForIncompletion"]
    assert http_server.requests == []


@override_settings(NODE_FLOW_OUTBOUND_ALLOW=["10.0.0.0/8", ".example.com"])
def test_it_refuses_hosts_outside_the_allow_list(api, http_server):
    task = task_at(run_one(api, http_task("call", http_server.url("/ok"))), "call")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "NODE_FLOW_OUTBOUND_ALLOW" in task["reasonForIncompletion"]
    assert http_server.requests == []


@override_settings(NODE_FLOW_OUTBOUND_ALLOW=["127.0.0.1/32"])
def test_it_calls_hosts_on_the_allow_list(api, http_server):
    assert task_at(run_one(api, http_task("call", http_server.url("/ok"))), "call")["status"] == "COMPLETED"


# --- outbound: addresses that cannot be steered (issue 15.3) ---------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "0", "[::]"])
def test_it_refuses_the_unspecified_address_which_reaches_this_host(api, http_server, host):
    # Loopback is allowed in the tests (conftest): 0.0.0.0 must still be refused.
    port = http_server.base.rsplit(":", 1)[1]
    task = task_at(run_one(api, http_task("call", f"http://{host}:{port}/ok")), "call")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR", task
    assert "unspecified address" in task["reasonForIncompletion"]
    assert http_server.requests == []


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:{port}/ok",
        "http://localhost:{port}/ok",
        "http://10.1.2.3:{port}/ok",
        "http://[::ffff:127.0.0.1]:{port}/ok",
        "http://192.168.0.1:{port}/ok",
    ],
)
def test_private_and_loopback_addresses_are_refused_unless_allowed(api, http_server, settings, uri):
    settings.NODE_FLOW_OUTBOUND_ALLOW_PRIVATE = []  # the default: only public addresses
    port = http_server.base.rsplit(":", 1)[1]
    task = task_at(run_one(api, http_task("call", uri.format(port=port))), "call")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "not a public address" in task["reasonForIncompletion"]
    assert "NODE_FLOW_OUTBOUND_ALLOW_PRIVATE" in task["reasonForIncompletion"]
    assert http_server.requests == []


def test_the_connection_goes_to_the_address_that_was_checked(api, http_server, monkeypatch, settings):
    """DNS rebinding: the name answers a checked address once, then another.
    The call must reach the checked one (it never resolves again), and the
    server still sees the name in Host."""
    import socket

    settings.NODE_FLOW_OUTBOUND_ALLOW_PRIVATE = ["127.0.0.1/32", "rebind.test"]
    real, answers = socket.getaddrinfo, []

    def rebinding(host, port, *args, **kwargs):
        if host != "rebind.test":
            return real(host, port, *args, **kwargs)
        answers.append(host)
        address = "127.0.0.1" if len(answers) == 1 else "10.255.255.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    port = http_server.base.rsplit(":", 1)[1]
    task = task_at(run_one(api, http_task("call", f"http://rebind.test:{port}/ok")), "call")
    assert task["status"] == "COMPLETED", task
    assert answers == ["rebind.test"]  # resolved once, by the check
    assert http_server.requests[0].headers["host"] == f"rebind.test:{port}"


def test_a_host_name_is_checked_as_it_is_sent_idna_2008():
    from executions.system_tasks.outbound import normalise

    assert normalise("Straße.DE.") == "xn--strae-oqa.de"  # IDNA 2003 would check strasse.de instead
    assert normalise("[::1]") == "::1"


def test_an_ipv6_translation_of_a_denied_address_is_held_to_the_same_rules():
    import ipaddress

    from executions.system_tasks.outbound import aliases

    for translated in ("64:ff9b::7f00:1", "2002:7f00:1::1"):  # NAT64 and 6to4 of 127.0.0.1
        assert ipaddress.ip_address("127.0.0.1") in aliases(ipaddress.ip_address(translated))
