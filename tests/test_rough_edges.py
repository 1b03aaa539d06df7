"""The rough edges a new user hit (issue 19.5), each with the test that
would have caught it: a forged lease token's answer, a worker key on a
HUMAN task, a failureWorkflow naming nothing, reasonForIncompletion when
there is none, ALERT_ONLY on an attempt that runs on, the ``since`` of a
maxConcurrentTasks block, the browsable API's header, the admin's ids, a
poll without a worker id, and the docs of the webhook route and PATCH."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from prometheus_client import REGISTRY

from executions.models import Execution, Task
from nodeflow import clock
from nodeflow.auth import Principal
from nodeflow.models import Role
from tests.engine_helpers import (
    advance,
    complete,
    execution,
    poll,
    poll_one,
    register,
    simple,
    start,
    task_at,
    task_def,
)
from tests.timeout_helpers import at

TIMEOUTS = "nodeflow_timeouts_total"


def alerts(timeout: str) -> float:
    """ALERT_ONLY alerts counted for ``timeout``, over every other label."""
    return sum(
        sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name == TIMEOUTS
        and sample.labels.get("timeout") == timeout
        and sample.labels.get("policy") == "ALERT_ONLY"
    )


def human(ref: str = "approve") -> dict:
    return {"name": ref, "taskReferenceName": ref, "type": "HUMAN"}


# --- a lease token that is not the task's --------------------------------------


@pytest.mark.parametrize("route", ["result", "heartbeat"])
def test_it_tells_a_forged_lease_token_it_is_not_the_tasks_current_one(api, route):
    register(api, "one", simple("work"))
    start(api, "one")
    leased = poll_one(api, "work")
    body = {"leaseToken": "forged-token", "status": "COMPLETED"} if route == "result" else {"leaseToken": "x"}
    response = api.post(f"tasks/{leased['taskId']}/{route}", body)
    assert response.status_code == 409
    message = response.json()["message"]
    assert "not the task's current one" in message
    assert "re-delivered" not in message  # nothing was: the task's own lease is live
    complete(api, leased)  # and the real lease still works


# --- a worker key on a HUMAN task -------------------------------------------------


def test_it_answers_a_worker_key_completing_a_human_task_with_403_naming_the_role(api, api_for):
    register(api, "approval", human())
    task = task_at(start(api, "approval"), "approve")
    response = api_for("worker").post(f"tasks/{task['taskId']}/result", {"status": "COMPLETED"})
    assert response.status_code == 403
    assert "developer or admin" in response.json()["message"]
    assert "human:write" in response.json()["message"]
    assert api_for("developer").post(f"tasks/{task['taskId']}/result", {"status": "COMPLETED"}).status_code == 200


def test_it_still_asks_a_worker_for_the_lease_token_of_a_leased_task(api, api_for):
    register(api, "one", simple("work"))
    start(api, "one")
    leased = poll_one(api, "work")
    response = api_for("worker").post(f"tasks/{leased['taskId']}/result", {"status": "COMPLETED"})
    assert response.status_code == 400
    assert response.json()["field"] == "leaseToken"


# --- failureWorkflow ------------------------------------------------------------


def test_it_refuses_a_failure_workflow_that_names_no_workflow(api):
    response = api.post(
        "metadata/workflow-definitions", {"name": "orders", "tasks": [simple("charge")], "failureWorkflow": "on_fial"}
    )
    assert response.status_code == 400
    assert response.json()["field"] == "failureWorkflow"
    assert "on_fial" in response.json()["message"]


def test_it_accepts_a_failure_workflow_that_exists_or_is_an_expression_or_itself(api):
    register(api, "on_failure", simple("notify"))
    register(api, "orders", simple("charge"), failureWorkflow="on_failure")
    register(api, "dynamic", simple("charge"), failureWorkflow="${workflow.input.onFailure}")
    register(api, "self_healing", simple("charge"), failureWorkflow="self_healing")


# --- reasonForIncompletion is null when there is none ------------------------------


def test_it_answers_null_for_a_task_completed_without_a_reason(api):
    register(api, "one", simple("work"))
    started = start(api, "one")
    leased = poll_one(api, "work")
    answer = api.post(f"tasks/{leased['taskId']}/result", {"leaseToken": leased["leaseToken"], "status": "COMPLETED"})
    assert answer.json()["reasonForIncompletion"] is None
    view = execution(api, started["id"])
    assert view["reasonForIncompletion"] is None
    assert [t["reasonForIncompletion"] for t in view["tasks"]] == [None]
    page = api.get(f"executions/{started['id']}/tasks").json()["results"]
    assert [t["reasonForIncompletion"] for t in page] == [None]


# --- ALERT_ONLY on a start-to-close or heartbeat timeout ---------------------------------


@pytest.mark.parametrize(
    ("definition", "timeout"), [({"startToCloseTimeout": 1}, "startToClose"), ({"heartbeatTimeout": 1}, "heartbeat")]
)
def test_it_alerts_once_per_timeout_not_every_period(
    api, frozen_clock, django_capture_on_commit_callbacks, caplog, definition, timeout
):
    task_def(api, "work", timeoutPolicy="ALERT_ONLY", **definition)
    register(api, "one", simple("work"))
    started = start(api, "one")
    leased = poll_one(api, "work")
    before = alerts(timeout)
    with caplog.at_level(logging.WARNING, "executions.timers"), django_capture_on_commit_callbacks(execute=True):
        for _ in range(420):  # seven minutes of one-second sweeps
            advance(1)
    assert alerts(timeout) - before == 1
    assert len([r for r in caplog.records if r.getMessage().startswith("ALERT_ONLY: task")]) == 1
    assert task_at(execution(api, started["id"]), "work")["status"] == "IN_PROGRESS"
    complete(api, leased)  # it ran on: its lease is still good
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_a_heartbeat_after_the_alert_keeps_the_lease_and_a_new_silence_alerts_again(
    api, frozen_clock, django_capture_on_commit_callbacks
):
    task_def(api, "work", timeoutPolicy="ALERT_ONLY", startToCloseTimeout=10, heartbeatTimeout=5)
    register(api, "one", simple("work"))
    started = start(api, "one")
    leased = poll_one(api, "work")
    beat = {"leaseToken": leased["leaseToken"]}
    before = alerts("startToClose"), alerts("heartbeat")
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(3):
            advance(4)
            assert api.post(f"tasks/{leased['taskId']}/heartbeat", beat).status_code == 200
        for _ in range(30):  # past start-to-close at 10 s, heartbeating every 4 s
            advance(4)
            answer = api.post(f"tasks/{leased['taskId']}/heartbeat", beat)
            assert answer.status_code == 200, answer.json()
        for _ in range(60):  # then silent for a minute
            advance(1)
    assert (alerts("startToClose") - before[0], alerts("heartbeat") - before[1]) == (1, 1)
    complete(api, leased)
    assert execution(api, started["id"])["status"] == "COMPLETED"


# --- the since of a maxConcurrentTasks block ---------------------------------------------


def test_the_since_of_a_max_concurrent_tasks_block_is_when_it_began(api, frozen_clock):
    register(
        api,
        "fan_out",
        {
            "name": "fan",
            "taskReferenceName": "fan",
            "type": "FORK_JOIN",
            "forkTasks": [[simple(f"b{i}", "leaf")] for i in range(6)],
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
        maxConcurrentTasks=2,
    )
    started = start(api, "fan_out")
    began = execution(api, started["id"])["blockedBy"]["since"]
    for _ in range(2):
        clock.advance(30)
        for leased in poll(api, "leaf", count=1):
            complete(api, leased)  # a slot frees and the next held task takes it
        blocked = execution(api, started["id"])["blockedBy"]
        assert blocked["control"] == "maxConcurrentTasks"
        assert blocked["since"] == began  # not the last dispatch


def test_a_block_that_lapsed_begins_again(api, frozen_clock):
    register(
        api,
        "lapses",
        {
            "name": "fan",
            "taskReferenceName": "fan",
            "type": "FORK_JOIN",
            "forkTasks": [
                [simple("a", "leaf")],
                [simple("b", "leaf")],
                [simple("c", "leaf")],
                [human("h1"), simple("x1", "late")],
                [human("h2"), simple("x2", "late")],
            ],
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
        maxConcurrentTasks=2,
    )
    started = start(api, "lapses")
    assert execution(api, started["id"])["blockedBy"]["since"] == at(frozen_clock)  # c held behind a and b
    clock.advance(60)
    for leased in poll(api, "leaf", count=2):
        complete(api, leased)  # c runs alone: the cap is not full for a minute
    assert execution(api, started["id"])["blockedBy"] is None
    clock.advance(60)
    view = execution(api, started["id"])
    for ref in ("h1", "h2"):
        assert api.post(f"tasks/{task_at(view, ref)['taskId']}/result", {"status": "COMPLETED"}).status_code == 200
    blocked = execution(api, started["id"])["blockedBy"]  # x1 runs beside c, x2 is held
    assert (blocked["control"], blocked["since"]) == ("maxConcurrentTasks", at(frozen_clock, 120))


# --- the browsable API's header ---------------------------------------------------------


def test_a_principal_reads_as_a_user_would_say_it():
    key = Principal(role="admin", namespace="default", label="key nf_ab12", key_id=7)
    assert str(key) == "admin key nf_ab12… (namespace default)"
    staff = Principal(role=Role.ADMIN, namespace=None, label="staff root")
    assert str(staff) == "admin staff root (every namespace)"


def test_the_browsable_api_header_names_the_user_readably(api):
    page = _staff().get("/v1/ns/default/queues", HTTP_ACCEPT="text/html").content.decode()
    assert "Principal(" not in page
    assert "admin staff root (every namespace)" in page


# --- the admin's ids ---------------------------------------------------------------------


def test_the_admin_lists_short_ids_on_one_line(api, db):
    register(api, "one", simple("work"))
    started = start(api, "one")
    client = _staff()
    for model, pk in ((Execution, started["id"]), (Task, task_at(started, "work")["taskId"])):
        page = client.get(f"/admin/executions/{model._meta.model_name}/").content.decode()
        assert f'<span title="{pk}" style="white-space: nowrap">{pk[:8]}…</span>' in page
        assert f">{pk}<" not in page


# --- a poll without a worker id -------------------------------------------------------


# --- the docs a user reads first ----------------------------------------------------------


def test_the_schema_says_what_names_a_webhook_and_that_post_replaces(api):
    schema = api.get("/api/schema/?format=json").json()
    webhook = schema["paths"]["/v1/ns/{ns}/webhooks/{name}"]["post"]["description"]
    assert "taskReferenceName" in webhook and "task definition name" in webhook
    definitions = schema["paths"]["/v1/ns/{ns}/metadata/task-definitions"]["post"]["description"]
    assert "PATCH" in definitions and "default" in definitions
    assert "patch" in schema["paths"]["/v1/ns/{ns}/metadata/task-definitions/{name}"]


def test_a_patch_keeps_the_fields_it_does_not_name_where_a_post_resets_them(api):
    task_def(api, "charge", retryCount=7, concurrentExecLimit=3)
    patched = api.patch("metadata/task-definitions/charge", {"concurrentExecLimit": 5}).json()
    assert (patched["retryCount"], patched["concurrentExecLimit"]) == (7, 5)
    posted = api.post("metadata/task-definitions", {"name": "charge", "concurrentExecLimit": 5}).json()
    assert posted["retryCount"] == 3  # POST replaces: back to the default


def test_the_documented_do_while_example_runs(api):
    """docs/decisions.md, "What a DO_WHILE's condition reads": its YAML, as written there."""
    text = (Path(__file__).parent.parent / "docs" / "decisions.md").read_text(encoding="utf-8")
    example = text.split("### What a DO_WHILE's condition reads")[1].split("```yaml\n")[1].split("```")[0]
    body = "name: ready_or_not\ntasks:\n" + "\n".join(f"  {line}" for line in example.splitlines())
    response = api.call("POST", "metadata/workflow-definitions", raw=body, content_type="application/yaml")
    assert response.status_code == 201, response.json()
    started = start(api, "ready_or_not")
    for done in (False, False, True):
        complete(api, poll_one(api, "check"), {"done": done})
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert task_at(view, "loop")["outputData"]["iteration"] == 3
    assert [t["path"] for t in view["tasks"] if t["taskDefName"] == "check"] == [
        "loop[1].check",
        "loop[2].check",
        "loop[3].check",
    ]


# --- the controls page's queue list ------------------------------------------------------


def _staff() -> Client:
    User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(User.objects.get(username="root"))
    return client


def test_the_controls_page_pages_its_queues_and_filters_them(api):
    for index in range(7):
        task_def(api, f"q{index}")
    task_def(api, "capped", concurrentExecLimit=1)
    register(api, "one", simple("capped"))
    start(api, "one")
    start(api, "one")
    poll_one(api, "capped")
    client = _staff()
    url = "/console/ns/default/controls"
    first = client.get(url, {"limit": 3}).content.decode()
    assert first.count("<tr data-queue=") == 3 and "page 1 of 3" in first and 'rel="next"' in first
    last = client.get(url, {"limit": 3, "page": 3}).content.decode()
    assert last.count("<tr data-queue=") == 2 and 'rel="prev"' in last
    held = client.get(url, {"held": "on"}).content.decode()
    assert held.count("<tr data-queue=") == 1 and 'data-queue="capped"' in held
    named = client.get(url, {"queue": "Q"}).content.decode()
    assert named.count("<tr data-queue=") == 7
    assert "No queue matches." in client.get(url, {"queue": "nothing"}).content.decode()
    refused = client.get(url, {"page": "0"})
    assert refused.status_code == 400 and 'data-field="page"' in refused.content.decode()
