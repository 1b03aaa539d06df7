"""The application client (nodeflow_client.Client) against a live server:
the README's walk-through (definitions from files, start, a worker of the
worker SDK completes the tasks, wait → COMPLETED), the server's refusals
as typed errors carrying its body, paging, the actions, and the signals
(a message, a webhook, a HUMAN completion). One server for the module
(tests/client_live.py); each test names its own definitions."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import fields

import httpx
import pytest

from nodeflow_client import (
    BlockedBy,
    Client,
    Conflict,
    ConnectionFailed,
    Execution,
    Forbidden,
    Invalid,
    LimitExceeded,
    NodeFlowError,
    NotFound,
    QuotaExceeded,
    ServerError,
    Task,
    TaskDefinition,
    TooManyRequests,
    Unauthenticated,
    Unavailable,
    WaitTimeout,
    start_body,
)
from nodeflow_client import files as definition_files
from nodeflow_client.errors import error_class, from_answer
from nodeflow_client.models import Model, camel
from nodeflow_worker import Task as WorkerTask
from nodeflow_worker import Worker
from tests.client_live import PYTHON, ROOT, LiveServer

WAIT_S = 20.0
# The execution view shows this many tasks at most (1,000 by default): few, so that a test can go past it.
VIEW_TASKS = 4


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = LiveServer("app", env={"NODE_FLOW_EXECUTION_VIEW_TASKS": str(VIEW_TASKS)})
    try:
        live.start()
        yield live
    finally:  # a server that failed to start leaves its database and files behind otherwise
        live.stop()


@pytest.fixture
def client(server) -> Iterator[Client]:
    with Client(server.url, server.key("admin")) as client:
        yield client


@pytest.fixture
def worker(server) -> Iterator[Worker]:
    """A worker SDK worker (threads), started by the test once it has registered its functions."""
    worker = Worker(server.url, server.key("worker"), poll_wait_s=0.5, concurrency=4)
    yield worker
    assert worker.stop(timeout=15)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def checkout_yaml(name: str, charge: str, notify: str) -> str:
    """The README's checkout workflow, under names of the test's own."""
    return textwrap.dedent(f"""\
        name: {name}
        tasks:
          - name: {charge}
            taskReferenceName: charge
            inputParameters:
              amount: ${{workflow.input.amount}}
          - name: {notify}
            taskReferenceName: notify
            optional: true
            retryCount: 1
            inputParameters:
              chargeId: ${{charge.output.id}}
        outputParameters:
          chargeId: ${{charge.output.id}}
        """)


def assert_typed(*answers: Model) -> None:
    """Every field the server sent has a typed attribute (none is only in ``raw``)."""
    for answer in answers:
        typed = {camel(item.name) for item in fields(answer)}
        assert set(answer.raw) <= typed, f"{type(answer).__name__} lacks {set(answer.raw) - typed}"


def one_task_workflow(client: Client, name: str, task: str, **definition) -> None:
    client.register_workflow({"name": name, "tasks": [{"name": task, "taskReferenceName": "only"}], **definition})


# --- without a server ---------------------------------------------------------------


def test_it_imports_without_django():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import sys, nodeflow_client, nodeflow_client.cli, nodeflow_client.__main__\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'rest_framework', 'nodeflow', 'nodeflow_worker'}))"
    )
    done = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (400, "VALIDATION_ERROR", Invalid),
        (400, "MALFORMED_REQUEST", Invalid),
        (401, "UNAUTHENTICATED", Unauthenticated),
        (403, "FORBIDDEN", Forbidden),
        (404, "NOT_FOUND", NotFound),
        (409, "CONFLICT", Conflict),
        (415, "UNSUPPORTED_MEDIA_TYPE", Invalid),
        (429, "LIMIT_EXCEEDED", LimitExceeded),
        (429, "QUOTA_EXCEEDED", QuotaExceeded),
        (429, "THROTTLED", TooManyRequests),
        (500, "INTERNAL", ServerError),
        (503, "UNAVAILABLE", Unavailable),
        (405, "METHOD_NOT_ALLOWED", NodeFlowError),
    ],
)
def test_each_error_answer_has_its_exception_class(status, code, expected):
    assert error_class(status, code) is expected


def test_an_error_body_that_is_not_the_error_model_is_kept_as_text():
    error = from_answer(502, None, text="<html>Bad Gateway</html>")
    assert isinstance(error, ServerError)
    assert error.status == 502 and error.code is None and error.body == {"message": "<html>Bad Gateway</html>"}


def test_a_429_reads_retry_after_from_the_body_or_the_header():
    body = {"error": "QUOTA_EXCEEDED", "message": "m", "quota": "maxExecutionsPerMinute", "retryAfterSeconds": 12.5}
    error = from_answer(429, body)
    assert isinstance(error, QuotaExceeded) and error.quota == "maxExecutionsPerMinute" and error.retry_after_s == 12.5
    assert from_answer(429, {"error": "THROTTLED", "message": "m"}, headers={"retry-after": "3"}).retry_after_s == 3


def test_answers_keep_fields_a_newer_server_adds_and_survive_missing_ones():
    body = {"id": "e1", "status": "COMPLETED", "createdAt": "2026-01-02T03:04:05.000006Z", "shinyNewField": [1]}
    execution = Execution.from_json(body)
    assert execution.id == "e1" and execution.ended and execution.raw["shinyNewField"] == [1]
    assert execution.created_at is not None and execution.created_at.tzinfo is not None
    assert execution.tasks == [] and execution.blocked_by is None and execution.to_json() is body
    task = Task.from_json({"taskId": "t1", "blockedBy": {"control": "rateLimit", "limit": 2, "current": 2}})
    assert task.blocked_by == BlockedBy(control="rateLimit", limit=2, current=2)


def test_a_file_holds_one_definition_or_a_list(tmp_path):
    (tmp_path / "one.yaml").write_text("name: a\nretryCount: 1\n")
    (tmp_path / "many.yaml").write_text("- name: a\n- name: b\n")
    (tmp_path / "docs.yml").write_text("name: a\n---\nname: b\n")
    (tmp_path / "many.json").write_text('[{"name": "a"}, {"name": "b"}]')
    (tmp_path / "noext").write_text("name: a\n")
    one = definition_files.documents(tmp_path / "one.yaml")
    assert [d.yaml for d in one] == ["name: a\nretryCount: 1\n"]  # sent as written
    assert [d.content_type for d in one] == ["application/yaml"]
    assert len(definition_files.documents(tmp_path / "many.yaml")) == 2
    assert len(definition_files.documents(tmp_path / "docs.yml")) == 2
    assert [d.value for d in definition_files.documents(tmp_path / "many.json")] == [{"name": "a"}, {"name": "b"}]
    assert definition_files.documents(tmp_path / "noext")[0].content_type == "application/yaml"


def test_the_url_and_key_default_to_the_environment(monkeypatch):
    monkeypatch.setenv("NF_URL", "http://example.invalid:1234/")
    monkeypatch.setenv("NF_API_KEY", "nf_x")
    with Client() as client:
        assert client.url == "http://example.invalid:1234" and client.http.headers["x-api-key"] == "nf_x"
    monkeypatch.delenv("NF_API_KEY")
    with pytest.raises(ValueError, match="NF_API_KEY"):
        Client()


def test_a_server_that_cannot_be_reached_is_connection_failed():
    with Client(f"http://127.0.0.1:{_closed_port()}", "nf_x") as client, pytest.raises(ConnectionFailed):
        client.get("x")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_wait_rides_out_a_server_that_is_briefly_unavailable():
    answers = iter(
        [
            httpx.Response(200, json={"id": "e1", "status": "RUNNING"}),
            httpx.Response(503, json={"error": "UNAVAILABLE", "message": "the database is unavailable"}),
            httpx.ConnectError("refused"),
            httpx.Response(200, json={"id": "e1", "status": "FAILED"}),
            httpx.Response(200, json={"id": "e1", "status": "FAILED", "reasonForIncompletion": "boom", "tasks": []}),
        ]
    )

    reads: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/ns/default/executions/e1"
        reads.append(request.url.query.decode())
        reply = next(answers)
        if isinstance(reply, Exception):
            raise reply
        return reply

    with Client("http://nodeflow.test", "nf_x", transport=httpx.MockTransport(answer)) as client:
        ended = client.wait("e1", timeout=10)
    assert (ended.status, ended.reason_for_incompletion) == ("FAILED", "boom")
    # The status alone while waiting; the tasks once, at the end.
    assert reads == ["includeTasks=false"] * 4 + [""]


# --- the README's walk-through ------------------------------------------------------


def test_the_readme_walk_through(client, worker, tmp_path):
    charge, notify, flow = unique("charge"), unique("notify"), unique("checkout")
    (tmp_path / "taskdefs.yaml").write_text(
        textwrap.dedent(f"""\
        - name: {charge}
          retryCount: 5
          retryLogic: EXPONENTIAL_BACKOFF
          retryDelaySeconds: 2
          nonRetryableErrors: [card_declined, INVALID_ARGUMENT]
        - name: {notify}
          retryCount: 1
        """)
    )
    registered = client.register_task_definitions_file(tmp_path / "taskdefs.yaml")
    assert [d.name for d in registered] == [charge, notify]
    definition = client.get_task_definition(charge)
    assert isinstance(definition, TaskDefinition)
    assert (definition.retry_count, definition.retry_delay_seconds, definition.non_retryable_errors) == (
        5,
        2.0,
        ["card_declined", "INVALID_ARGUMENT"],
    )
    assert definition.start_to_close_timeout == 3600.0  # the default, with its effective value
    assert charge in {d.name for d in client.list_task_definitions()}

    (tmp_path / "checkout.yaml").write_text(checkout_yaml(flow, charge, notify))
    (workflow,) = client.register_workflows_file(tmp_path / "checkout.yaml")
    assert (workflow.name, workflow.version, workflow.published) == (flow, 1, True)
    assert [t["taskReferenceName"] for t in workflow.tasks] == ["charge", "notify"]
    assert client.get_workflow(flow).version == 1
    assert [v.version for v in client.workflow_versions(flow)] == [1]

    @worker.task(charge)
    def do_charge(task: WorkerTask) -> dict:
        return {"id": f"ch_{task.input['amount']}"}

    @worker.task(notify)
    def do_notify(task: WorkerTask) -> dict:
        return {"sent": task.input["chargeId"]}

    started = client.start(flow, {"amount": 42}, idempotency_key=unique("order"), correlation_id="c-1", priority=5)
    assert started.created is True and started.status == "RUNNING"
    assert (started.correlation_id, started.priority) == ("c-1", 5)
    assert [t.reference_task_name for t in started.tasks] == ["charge"]
    again = client.start(flow, {"amount": 42}, idempotency_key=started.idempotency_key)
    assert again.created is False and again.id == started.id

    worker.start()
    ended = client.wait(started.id, timeout=WAIT_S)
    assert ended.status == "COMPLETED", ended.raw
    assert ended.output == {"chargeId": "ch_42"}
    done = ended.task("notify")
    assert done is not None and done.status == "COMPLETED" and done.output_data == {"sent": "ch_42"}
    assert done.worker_id and done.ended_at is not None and done.ended_at >= done.scheduled_at
    assert_typed(ended, *ended.tasks, definition, workflow, *client.workflow_versions(flow))
    assert_typed(*[t.blocked_by for t in started.tasks if t.blocked_by])


def test_a_second_version_is_a_draft_until_published(client):
    task, flow = unique("t"), unique("versions")
    one_task_workflow(client, flow, task)
    draft = client.register_workflow(
        f"name: {flow}\ndescription: two\ntasks:\n  - name: {task}\n    taskReferenceName: x\n"
    )
    assert (draft.version, draft.published) == (2, False)
    assert client.get_workflow(flow).version == 1
    assert client.get_workflow(flow, version=2).description == "two"
    assert client.publish_workflow(flow).version == 2
    assert client.rollback_workflow(flow, 1).published is True
    assert client.get_workflow(flow).version == 1
    client.delete_workflow(flow)
    with pytest.raises(NotFound):
        client.get_workflow(flow)


def test_a_task_definition_can_be_changed_in_part_and_deleted(client):
    name = unique("partial")
    client.register_task_definition({"name": name, "retryCount": 7, "concurrentExecLimit": 3})
    changed = client.update_task_definition(name, {"retryCount": 1})
    assert (changed.retry_count, changed.concurrent_exec_limit) == (1, 3)
    client.delete_task_definition(name)
    with pytest.raises(NotFound):
        client.get_task_definition(name)


def test_start_many_answers_each_start(client):
    task, flow = unique("t"), unique("batch")
    one_task_workflow(client, flow, task)
    answers = client.start_many([start_body(flow, {"n": 1}), start_body(unique("nope")), start_body(flow)])
    assert [a.status for a in answers] == [201, 404, 201]
    assert answers[0].ok and answers[0].execution_status == "RUNNING" and answers[0].id
    assert not answers[1].ok and answers[1].error == "NOT_FOUND"
    assert client.get(answers[0].id).input == {"n": 1}


# --- refusals -----------------------------------------------------------------------


def test_an_unknown_execution_is_not_found_with_the_servers_body(client):
    with pytest.raises(NotFound) as caught:
        client.get("no-such-execution")
    assert caught.value.status == 404 and caught.value.code == "NOT_FOUND"
    assert caught.value.body == {"error": "NOT_FOUND", "message": "execution 'no-such-execution' does not exist"}


def test_an_out_of_range_field_is_invalid_naming_the_field(client):
    with pytest.raises(Invalid) as caught:
        client.register_task_definition({"name": unique("x"), "retryCount": 101})
    error = caught.value
    assert (error.status, error.code, error.field) == (400, "VALIDATION_ERROR", "retryCount")
    assert error.errors == [{"field": "retryCount", "message": "Ensure this value is less than or equal to 100."}]
    with pytest.raises(Invalid) as caught:
        client.start(unique("x"), priority=100)
    assert caught.value.field == "priority"


def test_a_workflow_error_names_the_field_and_the_task(client):
    with pytest.raises(Invalid) as caught:
        client.register_workflow(
            {"name": unique("bad"), "tasks": [{"name": "a", "taskReferenceName": "a", "type": "NOPE"}]}
        )
    assert caught.value.field == "tasks[0].type" and caught.value.body["taskReferenceName"] == "a"


def test_an_action_on_an_ended_execution_is_a_conflict(client):
    task, flow = unique("t"), unique("ended")
    one_task_workflow(client, flow, task)
    execution = client.terminate(client.start(flow).id, "enough")
    with pytest.raises(Conflict) as caught:
        client.terminate(execution.id)
    assert caught.value.body["message"] == "execution is already TERMINATED"
    with pytest.raises(Conflict):
        client.send_message(execution.id, {"late": True})


def test_a_control_refusal_is_limit_exceeded_naming_the_control(client):
    task, flow = unique("t"), unique("capped")
    one_task_workflow(client, flow, task, maxConcurrentExecutions=1)
    client.start(flow)
    with pytest.raises(LimitExceeded) as caught:
        client.start(flow)
    assert caught.value.control == "maxConcurrentExecutions"
    assert (caught.value.body["limit"], caught.value.body["current"]) == (1, 1)


def test_keys_are_refused_as_unauthenticated_or_forbidden(server):
    with Client(server.url, "nf_not_a_key") as stranger, pytest.raises(Unauthenticated):
        stranger.list_task_definitions()
    with Client(server.url, server.key("worker")) as worker, pytest.raises(Forbidden):
        worker.register_workflow({"name": unique("w"), "tasks": [{"name": "a", "taskReferenceName": "a"}]})


# --- listing ------------------------------------------------------------------------


def test_listing_pages_through_every_match_newest_first(client):
    task, flow = unique("t"), unique("paged")
    one_task_workflow(client, flow, task)
    correlation = unique("corr")
    started = [client.start(flow, {"i": i}, correlation_id=correlation).id for i in range(7)]
    listed = list(client.list_executions(correlation_id=correlation, page_size=3))
    assert [e.id for e in listed] == started[::-1]
    assert all(e.tasks == [] and e.status == "RUNNING" for e in listed)
    first = client.executions_page(name=flow, limit=3)
    assert len(first.results) == 3 and first.next
    second = client.executions_page(name=flow, limit=3, cursor=first.next)
    assert {e.id for e in first.results}.isdisjoint(e.id for e in second.results)
    assert len(list(client.list_executions(name=flow, page_size=2, limit=5))) == 5
    client.terminate(started[0])
    assert [e.id for e in client.list_executions(name=flow, status="TERMINATED")] == [started[0]]
    with pytest.raises(Invalid) as caught:
        client.executions_page(status="SLEEPING")
    assert caught.value.field == "status"


def test_a_wide_runs_tasks_are_paged(client):
    flow, idle = unique("wide"), unique("idle")  # nobody polls the branches: they stay SCHEDULED
    branches = [[{"name": idle, "taskReferenceName": f"b{i}"}] for i in range(VIEW_TASKS + 2)]
    client.register_workflow(
        {
            "name": flow,
            "tasks": [
                {"name": "fan", "taskReferenceName": "fan", "type": "FORK_JOIN", "forkTasks": branches},
                {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
            ],
        }
    )
    started = client.start(flow)
    shown = client.get(started.id)
    assert len(shown.tasks) == VIEW_TASKS and shown.tasks_next
    everything = client.get(started.id, all_tasks=True)
    assert everything.tasks_next is None and len(everything.tasks) > VIEW_TASKS
    listed = list(client.list_tasks(started.id, page_size=2))
    assert [t.task_id for t in listed] == [t.task_id for t in everything.tasks]
    rest = list(client.list_tasks(started.id, cursor=shown.tasks_next))
    assert [t.task_id for t in shown.tasks + rest] == [t.task_id for t in listed]
    scheduled = list(client.list_tasks(started.id, status="SCHEDULED"))
    assert {t.reference_task_name for t in scheduled} == {f"b{i}" for i in range(VIEW_TASKS + 2)}
    (third,) = client.list_tasks(started.id, path="b3")
    assert third.reference_task_name == "b3"
    page = client.tasks_page(started.id, limit=3)
    assert len(page.results) == 3 and page.next
    bare = client.get(started.id, include_tasks=False)
    assert bare.tasks == [] and "tasks" not in bare.raw and bare.status == "RUNNING"
    with pytest.raises(Invalid) as caught:
        client.tasks_page(started.id, status="NAPPING")
    assert caught.value.field == "status"


# --- actions ------------------------------------------------------------------------


def test_terminate_retry_restart_pause_resume(client):
    task, flow = unique("idle"), unique("actions")  # nobody polls the task: it stays open
    one_task_workflow(client, flow, task)
    execution = client.start(flow)
    paused = client.pause(execution.id)
    assert paused.status == "PAUSED" and not paused.ended
    assert client.resume(execution.id).status == "RUNNING"
    terminated = client.terminate(execution.id, "operator said so")
    assert terminated.status == "TERMINATED" and terminated.reason_for_incompletion == "operator said so"
    assert [t.status for t in terminated.tasks] == ["CANCELED"]
    retried = client.retry(execution.id)
    assert retried.status == "RUNNING" and retried.task("only").open
    client.terminate(execution.id)
    restarted = client.restart(execution.id)
    assert (restarted.status, restarted.run) == ("RUNNING", execution.run + 1)
    assert client.decide(execution.id).id == execution.id


def test_wait_gives_up_with_the_last_execution_read(client):
    task, flow = unique("idle"), unique("slow")
    one_task_workflow(client, flow, task)
    execution = client.start(flow)
    with pytest.raises(WaitTimeout) as caught:
        client.wait(execution.id, timeout=0.3)
    assert caught.value.execution.id == execution.id and caught.value.execution.status == "RUNNING"


# --- signals ------------------------------------------------------------------------


def test_a_human_task_a_message_and_a_webhook(client):
    flow, hook = unique("signals"), unique("payment_received")
    client.register_workflow(
        {
            "name": flow,
            "tasks": [
                {"name": unique("approval"), "taskReferenceName": "approve", "type": "HUMAN"},
                {
                    "name": unique("inbox"),
                    "taskReferenceName": "inbox",
                    "type": "PULL_WORKFLOW_MESSAGES",
                    "inputParameters": {"batchSize": 1},
                },
                {
                    "name": hook,
                    "taskReferenceName": "paid",
                    "type": "WAIT_FOR_WEBHOOK",
                    "inputParameters": {"matches": {"$.order": "${workflow.input.order}"}},
                },
            ],
        }
    )
    execution = client.start(flow, {"order": "o-7"})
    (human,) = client.human_tasks(execution.id)
    assert human.reference_task_name == "approve" and human.status == "IN_PROGRESS"
    done = client.complete_human(human.task_id, {"approvedBy": "ana"})
    assert done.status == "COMPLETED" and done.output_data == {"approvedBy": "ana"}

    assert client.send_message(execution.id, {"note": "hello"}) > 0
    client.wait(execution.id, timeout=WAIT_S, until=lambda e: e.task("paid") is not None)
    # The webhook's name is the waiting task's *name*, not its reference name.
    assert client.call_webhook("paid", {"order": "o-7"}).matched == 0
    assert client.call_webhook(hook, {"order": "o-other"}).matched == 0
    delivery = client.call_webhook(hook, {"order": "o-7", "amount": 3})
    assert delivery.matched == 1 and len(delivery.task_ids) == 1

    ended = client.wait(execution.id, timeout=WAIT_S)
    assert ended.status == "COMPLETED", ended.raw
    assert ended.task("inbox").output_data == {"messages": [{"note": "hello"}]}
    assert ended.task("paid").output_data == {"order": "o-7", "amount": 3}
    assert ended.task("paid").task_id == delivery.task_ids[0]


def test_a_human_task_can_be_failed(client):
    flow = unique("reject")
    client.register_workflow(
        {"name": flow, "tasks": [{"name": unique("review"), "taskReferenceName": "review", "type": "HUMAN"}]}
    )
    execution = client.start(flow)
    (human,) = client.human_tasks(execution.id, "review")
    client.complete_human(human.task_id, status="FAILED_WITH_TERMINAL_ERROR", reason="rejected")
    ended = client.wait(execution.id, timeout=WAIT_S)
    assert ended.status == "FAILED" and "rejected" in (ended.reason_for_incompletion or "")


# --- diagnostics and controls -------------------------------------------------------


def test_queues_semaphores_quotas_schedules_and_breakers(client):
    task, flow = unique("queued"), unique("diag")
    one_task_workflow(client, flow, task)
    client.start(flow)
    depth = client.queue(task)
    assert (depth.task_type, depth.depth, depth.in_flight) == (task, 1, 0)
    assert task in {q.task_type for q in client.queues()}
    assert isinstance(client.queue_workers(), list)

    semaphore = unique("erp")
    assert client.set_semaphore(semaphore, 4).permits == 4
    one = client.semaphore(semaphore)
    assert one.holders == []
    assert_typed(one, *client.semaphores())
    assert semaphore in {s.name for s in client.semaphores()}
    client.delete_semaphore(semaphore)

    assert client.quotas().max_schedules is None
    schedule = unique("nightly")
    created = client.put_schedule(
        {"name": schedule, "cron": "0 2 * * *", "timezone": "Europe/Paris", "workflowName": flow, "input": {}}
    )
    assert created.next_fire_at is not None and not created.paused
    assert client.pause_schedule(schedule).paused is True
    assert client.resume_schedule(schedule).paused is False
    assert schedule in {s.name for s in client.schedules()}
    assert_typed(created, depth, client.quotas(), *client.queue_workers())
    client.delete_schedule(schedule)
    assert client.breakers() == []
    assert client.health()["status"] == "ok"


def test_a_route_without_a_method_can_still_be_called(client):
    response = client.request("GET", "metadata/task-definitions")
    assert response.status_code == 200 and isinstance(response.json(), list)
    with pytest.raises(NotFound):
        client.request("GET", "no/such/route")


def test_an_answer_that_is_not_json_is_an_error_with_its_text():
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="upstream down")

    transport = httpx.MockTransport(answer)
    with Client("http://nodeflow.test", "nf_x", transport=transport) as client, pytest.raises(ServerError) as caught:
        client.get("e1")
    assert caught.value.status == 502 and caught.value.body == {"message": "upstream down"}
    assert json.dumps(caught.value.body)


def test_the_workers_half_by_hand(client):
    task, flow = unique("by_hand"), unique("by_hand_flow")
    one_task_workflow(client, flow, task)
    execution = client.start(flow)
    (leased,) = client.poll(task, worker_id="script", count=5, wait_s=5)
    assert leased.execution_id == execution.id and leased.lease_expires_at is not None
    assert client.heartbeat(leased.task_id, leased.lease_token, {"half": True})["status"] == "IN_PROGRESS"
    done = client.report_result(leased.task_id, lease_token=leased.lease_token, output={"ok": 1})
    assert done.status == "COMPLETED" and done.worker_id == "script"
    with pytest.raises(Conflict) as caught:
        client.report_result(leased.task_id, lease_token=leased.lease_token)
    assert caught.value.body["taskStatus"] == "COMPLETED"
    assert client.wait(execution.id, timeout=WAIT_S).status == "COMPLETED"


def test_it_keeps_the_base_urls_path_and_the_namespace():
    """The client hands httpx absolute URLs (parsed once, kept): a server
    behind a path prefix, and a namespace that needs escaping, still get
    the URL a relative one joined to the base would have given (the worker
    SDK's client: tests/test_worker_client.py)."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"results": []})

    with Client("http://nodeflow.test/api/", "nf_x", namespace="a b", transport=httpx.MockTransport(answer)) as client:
        client.request("POST", "tasks/results", json={"results": []}, params={"x": "1"})
        client.request("GET", "healthz", namespaced=False)
    assert seen == ["http://nodeflow.test/api/v1/ns/a%20b/tasks/results?x=1", "http://nodeflow.test/api/healthz"]
