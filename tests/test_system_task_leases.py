"""A system task's lease is short and renewed while its call runs
(executions/system_tasks/renewals.py), on the role's path and on Celery's
(``runner.run_task``) alike: a long call keeps it, a runner that stops
renewing (killed) loses it within NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS and
the attempt is offered again, how long a call may take does not depend on
the lease, and a report after the lease was lost is refused (409).

No test sleeps: the clock is frozen and moved, and the keeper's turn
(``renew_due``, what its thread repeats) is taken by the hook itself.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.conf import settings as django_settings

from executions import dispatch, results
from executions.models import Task
from executions.roles.systemtasks import SystemTaskRole
from executions.system_tasks import registry, renewals, runner
from executions.system_tasks.base import Context, completed
from nodeflow import clock
from nodeflow.errors import Conflict
from nodeflow.models import Namespace
from tests.engine_helpers import execution, register, start, sweep, task_at, task_def
from tests.system_helpers import http_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def keeper(monkeypatch) -> renewals.LeaseKeeper:
    """The runner's keeper without its thread: each turn is taken by the test."""
    keeper = renewals.LeaseKeeper(background=False)
    monkeypatch.setattr(runner, "keeper", keeper)
    return keeper


@pytest.fixture
def flow(api, http_server) -> str:
    """A flow of one HTTP task whose definition gives an attempt an hour."""
    task_def(api, "call", startToCloseTimeout=3600)
    register(api, "flow", http_task("call", http_server.url("/ok"), name="call"))
    return "flow"


def lease_s() -> float:
    return float(django_settings.NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS)


def the_task(execution_id: str) -> Task:
    return Task.objects.get(execution_id=execution_id, ref="call")


def run_by(path: str, execution_id: str) -> None:
    """Run the ready system task as the role does, or as a Celery message does."""
    if path == "role":
        assert SystemTaskRole().run_once() == 1
    else:
        assert runner.run_task(the_task(execution_id).id, worker=runner.worker_id("celery")) is not None


def test_the_default_lease_is_a_few_seconds_and_the_call_limit_is_apart():
    assert 0 < lease_s() <= 5
    assert django_settings.NODE_FLOW_SYSTEM_TASK_CALL_SECONDS == 120


@pytest.mark.parametrize("path", ["role", "celery"])
def test_it_renews_the_lease_while_a_long_call_runs(api, flow, keeper, monkeypatch, frozen_clock, path):
    left: list[float] = []

    def long_call(ctx: Context):
        for _ in range(6):  # twice the lease, a third of it at a time
            clock.advance(lease_s() / 3)
            keeper.renew_due()
            row = Task.objects.get(pk=ctx.task_id)
            left.append((row.lease_expires_at - clock.now()).total_seconds())
        return completed({"long": True})

    monkeypatch.setattr(registry.get("HTTP"), "start", long_call)
    started = start(api, flow)
    run_by(path, started["id"])

    # Each renewal gave the short lease again, never the policy's hour.
    assert left == [pytest.approx(lease_s())] * 6
    row = the_task(started["id"])
    assert (row.status, row.output, row.deliveries) == ("COMPLETED", {"long": True}, 1)
    assert row.last_heartbeat_at == frozen_clock + dt.timedelta(seconds=2 * lease_s())
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_a_runner_that_stops_renewing_leaves_the_task_to_another_after_the_short_lease(api, flow, frozen_clock):
    started = start(api, flow)
    (killed,) = dispatch.lease_system_tasks(worker_id="killed-runner")  # leased, then never renewed
    assert (killed.lease_expires_at - frozen_clock).total_seconds() == lease_s()  # not the policy's hour

    clock.advance(lease_s() - 0.1)
    sweep()
    assert the_task(started["id"]).status == "IN_PROGRESS"  # still its lease
    clock.advance(0.1)
    sweep()  # lapsed: the same attempt is offered again
    assert (the_task(started["id"]).status, the_task(started["id"]).attempt) == ("SCHEDULED", 1)

    assert SystemTaskRole().run_once() == 1
    done = task_at(execution(api, started["id"]), "call")
    assert done["status"] == "COMPLETED" and done["workerId"].startswith("systemtasks@")
    assert the_task(started["id"]).deliveries == 2


@pytest.mark.parametrize(
    ("lease", "call", "start_to_close", "limit"),
    [
        (3, 120, 3600, 120),  # the defaults: a long lease is not needed for a long call
        (1, 120, 3600, 120),  # a shorter lease leaves the call's limit alone
        (600, 30, 3600, 30),  # and a longer one does not stretch it
        (3, 120, 20, 15),  # the attempt's start-to-close, less the margin to report, shortens it
        (3, 120, 6, 3),  # but never below half of it
        (3, 120, 0, 120),  # no start-to-close: the call's limit
    ],
)
def test_the_call_limit_is_independent_of_the_lease(settings, lease, call, start_to_close, limit):
    settings.NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS = lease
    settings.NODE_FLOW_SYSTEM_TASK_CALL_SECONDS = call
    assert runner.call_seconds({"startToCloseTimeout": start_to_close}) == limit


def test_a_call_gets_the_call_limit_as_its_deadline_not_the_lease(api, flow, keeper, monkeypatch, settings):
    settings.NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS = 2
    settings.NODE_FLOW_SYSTEM_TASK_CALL_SECONDS = 90
    seen: list[float] = []
    monkeypatch.setattr(
        registry.get("HTTP"), "start", lambda ctx: seen.append(ctx.deadline - time.monotonic()) or completed({})
    )
    start(api, flow)
    assert SystemTaskRole().run_once() == 1
    assert 89 < seen[0] <= 90


def test_a_report_after_the_lease_was_lost_is_refused(api, flow, keeper, frozen_clock):
    started = start(api, flow)
    (stalled,) = dispatch.lease_system_tasks(worker_id="stalled-runner")
    namespace = Namespace.objects.get(pk=stalled.namespace_id)
    late = runner.to_result(stalled, completed({"late": True}))
    with keeper.keep(stalled, namespace) as held:
        clock.advance(lease_s())  # no renewal got through before the lease lapsed
        keeper.renew_due()
        assert held.lost and held.renewals == 0

    with pytest.raises(Conflict) as before_the_sweep:  # fenced by time: no sweeper needed
        results.report_result(namespace=namespace, result=late)
    assert before_the_sweep.value.status_code == 409

    sweep()  # offered again, and run by another runner
    assert SystemTaskRole().run_once() == 1
    with pytest.raises(Conflict) as after_it:
        results.report_result(namespace=namespace, result=late)
    assert after_it.value.status_code == 409
    runner.report(stalled, namespace, runner.context_of(stalled, namespace), completed({"late": True}))  # ignored
    (row,) = Task.objects.filter(execution_id=started["id"], ref="call")
    assert (row.status, row.deliveries, row.worker_id.startswith("systemtasks@")) == ("COMPLETED", 2, True)
    assert "late" not in row.output


def test_the_keepers_thread_runs_only_while_a_call_is_held(api, flow, frozen_clock):
    start(api, flow)
    (leased,) = dispatch.lease_system_tasks(worker_id="runner")
    keeper = renewals.LeaseKeeper()
    with keeper.keep(leased, Namespace.objects.get(pk=leased.namespace_id)):
        thread = keeper._thread
        assert thread is not None and thread.is_alive()
    thread.join(timeout=10)  # woken by the release: it finds nothing held and stops
    assert not thread.is_alive() and keeper._thread is None
