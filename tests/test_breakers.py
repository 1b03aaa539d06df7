"""Circuit breakers (SPEC §8): the state machine on an injected clock, and
end to end: a host driven open, tasks failing fast and retryably with
blockedBy circuitOpen, one probe in half-open, recovery, and the route."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from executions import breakers
from executions.system_tasks import registry
from executions.system_tasks.base import Context
from nodeflow import clock
from nodeflow.models import Namespace
from tests.engine_helpers import execution, register, start, task_at, task_def, tasks_at
from tests.system_helpers import http_task, run_system_tasks, system_task

CONFIG = {
    "enabled": True,
    "minimumRequests": 4,
    "failureRatio": 0.5,
    "windowMs": 10_000,
    "openMs": 5_000,
    "maxOpenMs": 20_000,
}


class FakeClock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def ticks():
    fake = FakeClock()
    breakers.configure(CONFIG, clock=fake)
    yield fake
    breakers.configure()  # back to the settings: off


def breaker(fake: FakeClock, **overrides) -> breakers.Breaker:
    return breakers.Breaker("host", breakers.Config.parse({**CONFIG, **overrides}), fake)


def calls(b: breakers.Breaker, *outcomes: bool | None) -> None:
    for counts in outcomes:
        permit = b.acquire()
        assert permit is not None
        permit.release(counts)


# --- the state machine ------------------------------------------------------------


def test_it_opens_at_the_failure_ratio_once_enough_calls_ended():
    b = breaker(FakeClock())
    calls(b, True, True, True)
    assert b.state == breakers.CLOSED  # below minimumRequests
    calls(b, False)
    assert b.state == breakers.OPEN  # 2 of 4 would do; 3 of 4 failed
    assert b.acquire() is None


def test_it_counts_answers_but_not_calls_never_made():
    b = breaker(FakeClock())
    calls(b, False, False, False, True, True, None, None)
    assert b.state == breakers.CLOSED  # 2 failures in 5 calls
    calls(b, True)
    assert b.state == breakers.OPEN


def test_it_forgets_failures_older_than_the_window():
    fake = FakeClock()
    b = breaker(fake)
    calls(b, True, True, True)
    fake.advance(10.001)
    calls(b, True, False, False, False)
    assert b.state == breakers.CLOSED


def test_it_admits_exactly_one_probe_when_half_open():
    fake = FakeClock()
    b = breaker(fake)
    calls(b, True, True, True, True)
    fake.advance(5)
    barrier, permits = threading.Barrier(16), []

    def race() -> None:
        barrier.wait()
        permits.append(b.acquire())

    threads = [threading.Thread(target=race) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    admitted = [p for p in permits if p is not None]
    assert len(admitted) == 1 and admitted[0].probe
    assert b.state == breakers.HALF_OPEN


def test_it_doubles_the_open_period_while_probes_fail_up_to_the_cap():
    fake = FakeClock()
    b = breaker(fake)
    calls(b, True, True, True, True)
    for expected in (10, 20, 20):
        fake.advance(b.open_remaining_s())
        calls(b, True)  # the probe fails
        assert b.state == breakers.OPEN and b.open_remaining_s() == expected


def test_it_closes_when_the_probe_succeeds_and_starts_afresh():
    fake = FakeClock()
    b = breaker(fake)
    calls(b, True, True, True, True)
    fake.advance(5)
    calls(b, True)  # open for 10 s now
    fake.advance(10)
    calls(b, False)
    assert b.state == breakers.CLOSED
    calls(b, True, True, True, True)
    assert b.open_remaining_s() == 5  # the open period started over


def test_it_lets_another_probe_through_when_one_made_no_call():
    fake = FakeClock()
    b = breaker(fake)
    calls(b, True, True, True, True)
    fake.advance(5)
    b.acquire().release(None)  # e.g. refused by the outbound policy: says nothing
    probe = b.acquire()
    assert probe is not None and probe.probe


def test_it_is_off_unless_enabled():
    off = breakers.Breakers(breakers.Config.parse({}))
    for _ in range(50):
        off.acquire("host", 1).release(True)
    assert off.acquire("host", 1) is not None and off.all() == []


def test_it_keys_http_webhook_by_host_and_grpc_by_service():
    def key(task_type: str, **inputs) -> str:
        ctx = Context(
            task_id="t", type=task_type, namespace="default", input=inputs, output={}, attempt=1, idempotency_key="k"
        )
        return registry.get(task_type).breaker_key(ctx)

    assert key("HTTP", http_request={"uri": "https://API.example.com:8443/x"}) == "api.example.com"
    assert (
        key("HTTP_POLL", http_request={"uri": "http://api.example.com/y"}, terminationCondition="true")
        == "api.example.com"
    )
    assert key("WEBHOOK", url="https://api.example.com/hook", secretName="s") == "api.example.com"
    assert (
        key("GRPC", grpc_request={"host": "10.0.0.1:50051", "service": "shop.Orders", "method": "Get"}) == "shop.Orders"
    )
    assert key("INLINE", expression="1") is None


# --- end to end ------------------------------------------------------------------


def start_calls(api, uri: str, count: int, workflow: str = "flow") -> list[str]:
    ids = [start(api, workflow, {"uri": uri})["id"] for _ in range(count)]
    run_system_tasks()
    return ids


def break_host(api, uri: str, count: int = 4) -> None:
    """Failing calls that are not retried (so they stay out of the way)."""
    start_calls(api, uri, count, "failing")


@pytest.fixture
def flow(api, ticks, frozen_clock):
    task_def(api, "call", retryCount=5, retryDelaySeconds=1, jitter=0)
    task_def(api, "boom", retryCount=0)
    register(api, "flow", http_task("call", "${workflow.input.uri}"))
    register(api, "failing", http_task("call", "${workflow.input.uri}", name="boom"))


@pytest.mark.django_db
def test_it_fails_fast_and_retryably_while_open(api, http_server, flow, ticks):
    break_host(api, http_server.url("/status/503"))
    assert http_server.hits("/status/503") == 4

    held = execution(api, start_calls(api, http_server.url("/ok"), 1)[0])
    assert http_server.hits("/ok") == 0  # not called
    first, second = tasks_at(held, "call")
    assert first["status"] == "FAILED"  # retryable, never terminal
    assert first["reasonForIncompletion"].startswith("circuitOpen:127.0.0.1")
    assert first["outputData"] == {"circuitOpen": "127.0.0.1", "retryAfterSeconds": 5.0}
    # The retry waits for the breaker (5 s) rather than its 1 s back-off.
    blocked = second["blockedBy"]
    assert blocked["control"] == "circuitOpen:127.0.0.1"
    assert blocked["until"] == second["availableAt"]
    assert second["availableAt"] == (clock.now() + dt.timedelta(seconds=5)).isoformat().replace("+00:00", "Z")


@pytest.mark.django_db
def test_it_shares_a_host_between_http_and_webhook_but_not_other_hosts(api, http_server, flow, settings):
    settings.NODE_FLOW_WEBHOOK_SECRETS = {"default/s": "x"}
    break_host(api, http_server.url("/status/500"))
    register(api, "hook", system_task("hook", "WEBHOOK", url=http_server.url("/ok"), secretName="s"))
    hooked = start(api, "hook")
    other = start_calls(api, http_server.url("/ok").replace("127.0.0.1", "localhost"), 1)[0]
    assert tasks_at(execution(api, hooked["id"]), "hook")[0]["reasonForIncompletion"].startswith(
        "circuitOpen:127.0.0.1"
    )
    assert task_at(execution(api, other), "call")["status"] == "COMPLETED"  # its own breaker, "localhost"


@pytest.mark.django_db
def test_it_does_not_open_on_client_errors(api, http_server, flow):
    break_host(api, http_server.url("/status/404"), 6)
    ok = start_calls(api, http_server.url("/ok"), 1)[0]
    assert task_at(execution(api, ok), "call")["status"] == "COMPLETED"


@pytest.mark.django_db
def test_it_probes_once_then_recovers(api, http_server, flow, ticks):
    break_host(api, http_server.url("/status/503"))
    held = start_calls(api, http_server.url("/ok"), 1)[0]
    ticks.advance(5)
    probe = breakers.registry().acquire("127.0.0.1", Namespace.objects.get(name="default").id)
    assert probe is not None and probe.probe  # half-open: the probe is out

    clock.advance(5)  # the held execution's retry is due, but the probe is still out
    run_system_tasks()
    attempts = tasks_at(execution(api, held), "call")
    assert len(attempts) == 3 and attempts[1]["reasonForIncompletion"].startswith("circuitOpen:")
    assert http_server.hits("/ok") == 0

    probe.release(False)  # the probe got an answer: closed
    clock.advance(5)
    run_system_tasks()
    view = execution(api, held)
    assert view["status"] == "COMPLETED" and http_server.hits("/ok") == 1


@pytest.mark.django_db
def test_it_reopens_for_longer_when_the_probe_fails(api, http_server, flow, ticks):
    break_host(api, http_server.url("/status/503"))
    ticks.advance(5)
    probe = execution(api, start_calls(api, http_server.url("/status/503"), 1)[0])
    assert http_server.hits("/status/503") == 5  # the probe was let through, and failed
    held = execution(api, start_calls(api, http_server.url("/ok"), 1)[0])
    assert tasks_at(probe, "call")[0]["reasonForIncompletion"].startswith("HTTP 503")
    assert tasks_at(held, "call")[0]["outputData"]["retryAfterSeconds"] == 10.0


@pytest.mark.django_db
def test_it_lists_breakers_per_namespace(api, api_for, http_server, flow):
    break_host(api, http_server.url("/status/503"))
    assert breakers.report() == 1
    response = api_for("developer").get("breakers")
    assert response.status_code == 200
    (entry,) = response.json()
    assert entry["key"] == "127.0.0.1" and entry["state"] == "OPEN"
    assert entry["failures"] == 4 and entry["requests"] == 4
    assert entry["process"] == breakers.process_id()
    assert entry["openedUntil"] == (clock.now() + dt.timedelta(seconds=5)).isoformat().replace("+00:00", "Z")
    assert api_for("admin", "other").get("breakers").json() == []  # another namespace never called it
    assert api_for("worker").get("breakers").status_code == 403


@pytest.mark.django_db
def test_it_leaves_out_processes_that_stopped_reporting(api, http_server, flow):
    break_host(api, http_server.url("/status/503"))
    breakers.report()
    clock.advance(breakers.LISTED_FOR_S + 1)
    assert api.get("breakers").json() == []
