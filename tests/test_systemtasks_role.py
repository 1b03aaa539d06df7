"""The system-task runner and role without Celery: leases across namespaces,
a stale run changes nothing, a canceled run calls the cancel hook, the
thread pool, the stop path and ``manage.py nodeflow_systemtasks --once``."""

from __future__ import annotations

import threading
import time
from io import StringIO

import pytest
from django.core.management import call_command

from executions import dispatch
from executions.models import Execution, Task
from executions.roles.systemtasks import SystemTaskRole
from executions.system_tasks import registry, runner
from nodeflow import clock
from tests.engine_helpers import execution, register, start, sweep, task_at, tasks_at
from tests.system_helpers import http_task, system_task


def inline_flow(api, name: str = "flow") -> None:
    register(api, name, system_task("t", "INLINE", expression="$.n + 1", n="${workflow.input.n}"))


@pytest.mark.django_db
def test_it_leases_system_tasks_of_every_namespace(api_for):
    apis = [api_for("admin", "default"), api_for("admin", "other")]
    for api in apis:
        inline_flow(api)
    ids = [start(api, "flow", {"n": n})["id"] for n, api in enumerate(apis)]
    assert SystemTaskRole().run_once() == 2
    for (n, api), execution_id in zip(enumerate(apis), ids, strict=True):
        done = task_at(execution(api, execution_id), "t")
        assert done["outputData"] == {"result": n + 1} and done["workerId"].startswith("systemtasks@")


@pytest.mark.django_db
def test_it_ignores_a_stale_run(api, http_server):
    register(api, "flow", http_task("call", http_server.url("/ok")))
    started = start(api, "flow")
    (stale,) = dispatch.lease_system_tasks(worker_id="dead-runner")
    clock.advance(dispatch.system_lease_seconds(stale.lease_seconds) + 1)
    sweep()  # the lease expired: the same attempt is offered again
    assert SystemTaskRole().run_once() == 1
    runner.run_leased(stale)  # the first runner wakes up and reports: 409, ignored
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert [t["status"] for t in tasks_at(view, "call")] == ["COMPLETED"]
    assert Task.objects.get(pk=stale.id).deliveries == 2


@pytest.mark.django_db
def test_it_calls_the_cancel_hook_when_the_task_was_canceled(api, http_server, monkeypatch):
    canceled = []
    monkeypatch.setattr(registry.get("HTTP"), "cancel", lambda ctx: canceled.append(ctx.task_id), raising=False)
    register(api, "flow", http_task("call", http_server.url("/ok")))
    started = start(api, "flow")
    (leased,) = dispatch.lease_system_tasks(worker_id="runner")
    assert api.post(f"executions/{started['id']}/terminate", {"reason": "stop"}).status_code == 200
    runner.run_leased(leased)
    assert canceled == [str(leased.id)]
    assert task_at(execution(api, started["id"]), "call")["status"] == "CANCELED"


@pytest.mark.django_db
def test_it_caps_the_lease_of_a_system_task(api, settings):
    settings.NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS = 30
    inline_flow(api)
    start(api, "flow", {"n": 1})
    (leased,) = dispatch.lease_system_tasks(worker_id="runner")
    assert leased.lease_seconds == 3600  # the default startToCloseTimeout
    assert (leased.lease_expires_at - leased.started_at).total_seconds() == 30


@pytest.mark.django_db
def test_it_runs_once_from_the_command(api):
    inline_flow(api)
    started = start(api, "flow", {"n": 4})
    out = StringIO()
    call_command("nodeflow_systemtasks", "--once", stdout=out)
    assert "systemtasks: 1 unit(s) of work" in out.getvalue()
    assert task_at(execution(api, started["id"]), "t")["outputData"] == {"result": 5}


@pytest.mark.django_db(transaction=True)
def test_it_runs_tasks_on_its_threads_and_stops_promptly(api, http_server):
    register(api, "flow", http_task("call", http_server.url("/hold")))
    ids = [start(api, "flow")["id"] for _ in range(3)]
    role = SystemTaskRole(threads=3)
    thread = threading.Thread(target=role.run)
    thread.start()
    deadline = time.monotonic() + 10
    while http_server.hits("/hold") < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert http_server.hits("/hold") == 3  # all three in flight at once
    role.request_stop()
    http_server.release.set()  # the calls in flight finish; then the role stops
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert {e.status for e in Execution.objects.filter(pk__in=ids)} == {"COMPLETED"}
