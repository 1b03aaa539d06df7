"""The Conductor-compatible routes under ``/v1/ns/{ns}/api/`` (conductor_api/),
driven with bodies written from Conductor's documented formats: the token
exchange, tasks, metadata and workflows, in Conductor's shapes and error
model, every control still applying. The fencing of task updates is in
tests/test_conductor_fencing.py; conductor-python itself runs against a
live server in tests/test_conductor_python_workers.py."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from conductor_api import tokens
from executions.models import Execution, Task
from metadata.models import WorkflowDefinition
from nodeflow import clock
from nodeflow.keys import create_api_key, revoke_api_key
from tests.conftest import Api
from tests.engine_helpers import sweep

BASE = "/v1/ns/default/api"


class Conductor:
    """A client speaking to the Conductor-compatible routes with a token, as Conductor's SDKs do."""

    def __init__(self, key_id: int | str, secret: str, namespace: str = "default") -> None:
        self.client = APIClient()
        self.base = f"/v1/ns/{namespace}/api"
        response = self.client.post(f"{self.base}/token", {"keyId": str(key_id), "keySecret": secret}, format="json")
        assert response.status_code == 200, response.content
        self.token = response.json()["token"]

    def call(self, method: str, path: str, body=None, **headers):
        kwargs = {"data": body, "format": "json"} if body is not None else {}
        headers = {"HTTP_X_AUTHORIZATION": self.token, **headers}
        return getattr(self.client, method.lower())(f"{self.base}/{path}", **kwargs, **headers)

    def get(self, path: str, **headers):
        return self.call("GET", path, **headers)

    def post(self, path: str, body=None, **headers):
        return self.call("POST", path, body if body is not None else {}, **headers)

    def put(self, path: str, body=None):
        return self.call("PUT", path, body)

    def delete(self, path: str):
        return self.call("DELETE", path)


def conductor_for(role: str, namespace: str | None = "default", url_namespace: str = "default") -> Conductor:
    key, secret = create_api_key(role=role, namespace=namespace)
    return Conductor(key.pk, secret, url_namespace)


@pytest.fixture
def admin(db) -> Conductor:
    return conductor_for("admin")


@pytest.fixture
def worker(db) -> Conductor:
    return conductor_for("worker")


def assert_conductor_error(response, status: int, field: str | None = None) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["status"] == status and body["message"] and isinstance(body["instance"], str)
    assert body["retryable"] is (status in (429, 503))
    assert isinstance(body["validationErrors"], list)
    assert body["error"]  # Node Flow's code beside Conductor's fields
    if field is not None:
        assert body["field"] == field, body
        assert body["validationErrors"][0]["path"] == field, body
    return body


def register(admin: Conductor, workflow: dict, *taskdefs: dict) -> None:
    if taskdefs:
        assert admin.post("metadata/taskdefs", list(taskdefs)).status_code == 200
    response = admin.post("metadata/workflow", workflow)
    assert response.status_code == 200, response.content


def start(admin: Conductor, name: str, input: dict | None = None, **fields) -> str:
    response = admin.post("workflow", {"name": name, "input": input or {}, **fields})
    assert response.status_code == 200, response.content
    assert response["content-type"].startswith("text/plain")
    return response.content.decode()


def workflow(admin: Conductor, workflow_id: str, query: str = "") -> dict:
    response = admin.get(f"workflow/{workflow_id}{query}")
    assert response.status_code == 200, response.content
    return response.json()


def poll(worker: Conductor, task_type: str, worker_id: str = "w1", count: int = 1) -> list[dict]:
    response = worker.get(f"tasks/poll/batch/{task_type}?workerid={worker_id}&count={count}&timeout=0")
    assert response.status_code == 200, response.content
    return response.json()


def update(worker: Conductor, task: dict, status: str, worker_id: str = "w1", **fields):
    body = {"taskId": task["taskId"], "workflowInstanceId": task["workflowInstanceId"], "workerId": worker_id}
    return worker.post("tasks", {**body, "status": status, **fields})


PAY = {
    "name": "pay",
    "description": "charge then notify",
    "version": 1,
    "tasks": [
        {"name": "charge", "taskReferenceName": "charge", "inputParameters": {"amount": "${workflow.input.amount}"}},
        {"name": "notify", "taskReferenceName": "notify", "type": "SIMPLE"},
    ],
    "outputParameters": {"charged": "${charge.output.id}"},
}
CHARGE = {"name": "charge", "retryCount": 1, "retryLogic": "FIXED", "retryDelaySeconds": 0}
NOTIFY = {"name": "notify", "retryCount": 0}


# --- the token exchange ---------------------------------------------------------


def test_a_key_is_a_key_pair_and_its_token_authenticates(db):
    key, secret = create_api_key(role="developer", namespace="default")
    client = Conductor(key.pk, secret)
    assert client.get("metadata/taskdefs").status_code == 200
    assert client.get("metadata/taskdefs", HTTP_X_AUTHORIZATION="nope").status_code == 401


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"keyId": "999999", "keySecret": "nf_" + "a" * 43}, 401),
        ({"keyId": "{id}", "keySecret": "nf_" + "a" * 43}, 401),
        ({"keyId": "{other}", "keySecret": "{secret}"}, 401),
        ({"keyId": "{id}"}, 400),
        ({"keyId": 7, "keySecret": "{secret}"}, 400),
        ({"keyId": "{id}", "keySecret": "{secret}", "extra": 1}, 400),
        ([], 400),
    ],
)
def test_the_exchange_refuses_what_is_not_a_key_pair(db, body, status):
    key, secret = create_api_key(role="admin", namespace="default")
    other, _ = create_api_key(role="admin", namespace="default")
    if isinstance(body, dict):
        names = {"id": str(key.pk), "other": str(other.pk), "secret": secret}
        body = {k: v.format(**names) if isinstance(v, str) else v for k, v in body.items()}
    response = APIClient().post(f"{BASE}/token", body, format="json")
    assert_conductor_error(response, status)


def test_a_token_names_its_namespace_and_role(db):
    key, secret = create_api_key(role="worker", namespace="beta")
    response = APIClient().post(f"{BASE}/token", {"keyId": str(key.pk), "keySecret": secret}, format="json")
    assert_conductor_error(response, 403)  # beta's key, default's URL
    client = Conductor(key.pk, secret, "beta")
    assert_conductor_error(client.post("metadata/workflow", PAY), 403)  # a worker registers nothing
    assert client.get("metadata/taskdefs").status_code == 200
    wide, wide_secret = create_api_key(role="admin", namespace=None)
    assert Conductor(wide.pk, wide_secret, "beta").get("metadata/workflow").status_code == 200


def test_a_revoked_keys_tokens_stop_at_once_and_an_old_token_expires(db):
    key, secret = create_api_key(role="admin", namespace="default")
    client = Conductor(key.pk, secret)
    clock.advance(tokens.TOKEN_TTL_S + 1)
    body = assert_conductor_error(client.get("metadata/taskdefs"), 401)
    assert body["error"] == "EXPIRED_TOKEN"  # conductor-python renews its token on this code
    client = Conductor(key.pk, secret)
    assert client.get("metadata/taskdefs").status_code == 200
    revoke_api_key(key_id=key.pk)
    assert assert_conductor_error(client.get("metadata/taskdefs"), 401)["error"] == "INVALID_TOKEN"
    response = APIClient().post(f"{BASE}/token", {"keyId": str(key.pk), "keySecret": secret}, format="json")
    assert_conductor_error(response, 401)


def test_a_forged_token_is_refused(admin):
    payload = admin.token.rsplit(":", 1)[0]
    for forged in (payload + ":AAAA", "1.abcdefabcdefabcd.0", admin.token + "x"):
        body = assert_conductor_error(admin.get("metadata/taskdefs", HTTP_X_AUTHORIZATION=forged), 401)
        assert body["error"] == "INVALID_TOKEN"


def test_nodeflow_apikey_create_prints_the_key_pair(db):
    out, err = io.StringIO(), io.StringIO()
    call_command("nodeflow_apikey", "create", "--namespace", "default", "--role", "worker", stdout=out, stderr=err)
    secret = out.getvalue().strip().splitlines()[-1]
    key_id = err.getvalue().split("keyId ")[1].split(",")[0]
    assert Conductor(key_id, secret).get("metadata/taskdefs").status_code == 200


def test_an_api_key_works_on_these_routes_too(api):
    assert api.get("api/metadata/taskdefs").status_code == 200


# --- metadata -------------------------------------------------------------------


def test_task_definitions_register_as_a_list_update_one_by_one_and_read_back(admin):
    assert admin.post("metadata/taskdefs", [CHARGE, NOTIFY]).status_code == 200
    assert admin.put("metadata/taskdefs", {**CHARGE, "retryCount": 4}).status_code == 200
    listed = {d["name"]: d for d in admin.get("metadata/taskdefs").json()}
    assert set(listed) == {"charge", "notify"}
    one = admin.get("metadata/taskdefs/charge").json()
    assert one["retryCount"] == 4 and one["retryLogic"] == "FIXED"
    assert one["createTime"] > 0 and one["updateTime"] >= one["createTime"]
    assert admin.delete("metadata/taskdefs/notify").status_code == 200
    assert_conductor_error(admin.get("metadata/taskdefs/notify"), 404)
    assert_conductor_error(admin.delete("metadata/taskdefs/notify"), 404)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([{"name": "ok"}, {"name": "bad", "retryCount": 101}], "[1].retryCount"),
        ({"name": "bad", "retryCount": "three"}, "retryCount"),
        ([], None),
        ("charge", None),
    ],
)
def test_a_bad_task_definition_is_refused_naming_the_field_and_nothing_is_stored(admin, body, field):
    response = admin.post("metadata/taskdefs", body)
    assert_conductor_error(response, 400, field)
    assert admin.get("metadata/taskdefs").json() == []


@pytest.mark.parametrize(
    "body",
    [
        {"name": "plain"},
        {"name": "too_many", "retryCount": 101},
        {"name": "wrong_type", "retryCount": "3"},
        {"name": "typo", "retryCont": 1},
        # As Conductor writes them: accepted or refused here exactly as on Node Flow's own route.
        {"name": "conductor_names", "responseTimeoutSeconds": 30, "pollTimeoutSeconds": 5, "timeoutSeconds": 60},
        {"name": "informational", "ownerEmail": "a@example.com", "createTime": 1, "inputKeys": [], "outputKeys": []},
        {"name": "rate", "rateLimitPerFrequency": 10, "rateLimitFrequencyInSeconds": 1},
    ],
)
def test_a_task_definition_is_taken_here_exactly_as_on_node_flows_own_route(api, admin, body):
    native = api.post("metadata/task-definitions", body)
    here = admin.post("metadata/taskdefs", [{**body, "name": body["name"] + "_c"}])
    assert (native.status_code < 300) == (here.status_code < 300), (native.content, here.content)
    if native.status_code >= 400:
        assert here.json()["field"] == "[0]." + native.json()["field"], (native.json(), here.json())
    else:
        mine = admin.get(f"metadata/taskdefs/{body['name']}_c").json()
        theirs = {k: v for k, v in native.json().items() if k not in ("name", "createdAt", "updatedAt")}
        assert {k: mine[k] for k in theirs} == theirs


def test_a_workflow_registered_here_is_published_at_once_and_the_same_body_adds_no_version(admin):
    register(admin, PAY, CHARGE, NOTIFY)
    register(admin, PAY)
    assert WorkflowDefinition.objects.get(name="pay").latest_version == 1
    changed = {**PAY, "description": "v2"}
    assert admin.put("metadata/workflow", [changed]).status_code == 200
    assert admin.get("metadata/workflow/pay").json()["version"] == 2  # published at once
    assert admin.get("metadata/workflow/pay?version=1").json()["description"] == "charge then notify"
    assert [w["name"] for w in admin.get("metadata/workflow").json()] == ["pay"]
    assert admin.get("workflow/" + start(admin, "pay", {"amount": 1})).json()["workflowVersion"] == 2


def test_a_bad_workflow_definition_is_refused_naming_the_field(admin):
    bad = {"name": "w", "tasks": [{"name": "a", "taskReferenceName": "a"}, {"name": "b", "taskReferenceName": "a"}]}
    body = assert_conductor_error(admin.post("metadata/workflow", bad), 400)
    assert body["field"] == "tasks[1].taskReferenceName"
    assert_conductor_error(admin.post("metadata/workflow", [PAY]), 400, "body")
    assert_conductor_error(admin.get("metadata/workflow/pay"), 404)
    assert_conductor_error(admin.get("metadata/workflow/pay?version=zero"), 400, "version")


# --- tasks ------------------------------------------------------------------------


def test_a_polled_task_is_in_conductors_shape(admin, worker):
    register(admin, PAY, {**CHARGE, "heartbeatTimeout": 30}, NOTIFY)
    workflow_id = start(admin, "pay", {"amount": 42}, correlationId="order-1")
    [task] = poll(worker, "charge")
    assert task["taskType"] == "charge" and task["taskDefName"] == "charge"
    assert task["referenceTaskName"] == "charge" and task["workflowType"] == "pay"
    assert task["workflowInstanceId"] == workflow_id and task["correlationId"] == "order-1"
    assert task["inputData"] == {"amount": 42} and task["status"] == "IN_PROGRESS"
    assert task["retryCount"] == 0 and task["pollCount"] == 1 and task["workerId"] == "w1"
    assert task["responseTimeoutSeconds"] == 30 and task["startTime"] >= task["scheduledTime"] > 0
    assert worker.get(f"tasks/{task['taskId']}").json()["status"] == "IN_PROGRESS"
    assert worker.get("tasks/poll/charge?workerid=w1").status_code == 204
    assert poll(worker, "charge") == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("", "workerid"),
        ("?workerid=w1&domain=eu", "domain"),
        ("?workerid=w1&count=0", "count"),
        ("?workerid=w1&count=101", "count"),
        ("?workerid=w1&timeout=30001", "timeout"),
        ("?workerid=w1&timeout=soon", "timeout"),
        ("?workerid=w1&shard=2", "shard"),
    ],
)
def test_a_bad_poll_is_refused_naming_the_parameter(worker, query, field):
    assert_conductor_error(worker.get(f"tasks/poll/batch/charge{query}"), 400, field)


def test_a_poll_for_a_name_no_task_type_can_have_is_refused(worker):
    assert_conductor_error(worker.get("tasks/poll/batch/%C2%84?workerid=w"), 400, "taskType")


def test_results_complete_retry_and_fail_terminally_as_on_conductor(admin, worker):
    register(admin, PAY, CHARGE, NOTIFY)
    done = start(admin, "pay", {"amount": 5})
    [charge] = poll(worker, "charge")
    response = update(worker, charge, "FAILED", reasonForIncompletion="gateway down")
    assert response.status_code == 200 and response.content.decode() == charge["taskId"]
    sweep()
    [again] = poll(worker, "charge")  # retried: a new attempt, a new task id
    assert again["taskId"] != charge["taskId"] and again["retryCount"] == 1
    logs = [{"log": "charged", "taskId": again["taskId"], "createdTime": 1}]
    assert update(worker, again, "COMPLETED", outputData={"id": "ch_1"}, logs=logs).status_code == 200
    [notify] = poll(worker, "notify")
    assert update(worker, notify, "COMPLETED").status_code == 200
    view = workflow(admin, done)
    assert view["status"] == "COMPLETED" and view["output"] == {"charged": "ch_1"}
    assert [(t["referenceTaskName"], t["status"]) for t in view["tasks"]] == [
        ("charge", "FAILED"),
        ("charge", "COMPLETED"),
        ("notify", "COMPLETED"),
    ]
    assert Task.objects.get(pk=again["taskId"]).logs[0]["log"] == "charged"

    failed = start(admin, "pay", {"amount": 6})
    [charge] = poll(worker, "charge")
    update(worker, charge, "FAILED_WITH_TERMINAL_ERROR", reasonForIncompletion="card declined")
    sweep()
    view = workflow(admin, failed)
    assert view["status"] == "FAILED" and "card declined" in view["reasonForIncompletion"]
    assert view["failedReferenceTaskNames"] == ["charge"] and len(view["tasks"]) == 1
    assert poll(worker, "charge") == []  # never retried


def test_in_progress_puts_the_task_back_until_its_callback(admin, worker):
    register(admin, PAY, CHARGE, NOTIFY)
    start(admin, "pay")
    [task] = poll(worker, "charge")
    response = update(worker, task, "IN_PROGRESS", callbackAfterSeconds=30, outputData={"step": 1})
    assert response.status_code == 200
    assert poll(worker, "charge") == []
    clock.advance(31)
    [again] = poll(worker, "charge", worker_id="w2")
    assert again["taskId"] == task["taskId"] and again["pollCount"] == 2 and again["outputData"] == {"step": 1}
    # IN_PROGRESS with no callback: back in the queue at once, as Conductor does.
    assert update(worker, again, "IN_PROGRESS", worker_id="w2").status_code == 200
    clock.advance(1)
    assert [t["taskId"] for t in poll(worker, "charge")] == [task["taskId"]]


def test_update_v2_answers_the_workers_next_task(admin, worker):
    register(admin, PAY, CHARGE, NOTIFY)
    start(admin, "pay")
    start(admin, "pay")
    [first] = poll(worker, "charge")
    response = worker.post("tasks/update-v2", {**_result(first), "status": "COMPLETED"})
    assert response.status_code == 200, response.content
    second = response.json()
    assert second["taskType"] == "charge" and second["workflowInstanceId"] != first["workflowInstanceId"]
    assert second["workerId"] == "w1" and second["status"] == "IN_PROGRESS"
    response = worker.post("tasks/update-v2", {**_result(second), "status": "COMPLETED"})
    assert response.status_code == 204
    assert_conductor_error(worker.post("tasks/update-v2", {**_result(second), "status": "COMPLETED"}), 409)


def _result(task: dict, worker_id: str = "w1") -> dict:
    return {"taskId": task["taskId"], "workflowInstanceId": task["workflowInstanceId"], "workerId": worker_id}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"status": "COMPLETED"}, "taskId"),
        ({"taskId": "x", "status": "DONE"}, "status"),
        ({"taskId": "x", "status": "COMPLETED", "outputData": [1]}, "outputData"),
        ({"taskId": "x", "status": "COMPLETED", "callbackAfterSeconds": -1}, "callbackAfterSeconds"),
        ({"taskId": "x", "status": "COMPLETED", "extendLease": "yes"}, "extendLease"),
        ({"taskId": "x", "status": "COMPLETED", "externalOutputPayloadStoragePath": "s3://b/k"}, None),
        ({"taskId": "x", "status": "COMPLETED", "color": "red"}, "color"),
    ],
)
def test_a_bad_task_result_is_refused_naming_the_field(worker, body, field):
    for route in ("tasks", "tasks/update-v2"):
        error = assert_conductor_error(worker.post(route, body), 400, field)
        if field is None:
            assert error["field"] == "externalOutputPayloadStoragePath" and "not supported" in error["message"]


def test_a_human_task_is_completed_by_a_developer_not_by_a_worker(admin, worker):
    developer = conductor_for("developer")
    register(admin, {"name": "review", "tasks": [{"name": "approve", "taskReferenceName": "approve", "type": "HUMAN"}]})
    workflow_id = start(admin, "review")
    [task] = workflow(admin, workflow_id)["tasks"]
    body = {"taskId": task["taskId"], "workflowInstanceId": workflow_id, "status": "COMPLETED", "outputData": {"ok": 1}}
    assert_conductor_error(worker.post("tasks", body), 403)
    assert developer.post("tasks", body).status_code == 200
    view = workflow(admin, workflow_id)
    assert view["status"] == "COMPLETED" and view["tasks"][0]["outputData"] == {"ok": 1}
    assert_conductor_error(developer.post("tasks", body), 409)  # once


def test_a_wait_with_no_duration_is_completed_by_a_task_update_as_on_conductor(admin):
    developer = conductor_for("developer")
    steps = [{"name": "approval", "taskReferenceName": "approval", "type": "WAIT"}]
    register(admin, {"name": "approve", "tasks": steps, "outputParameters": {"by": "${approval.output.by}"}})
    register(admin, {"name": "later", "tasks": [{**steps[0], "inputParameters": {"duration": "1 hour"}}]})
    workflow_id = start(admin, "approve")
    [task] = workflow(admin, workflow_id)["tasks"]
    body = {
        "taskId": task["taskId"],
        "workflowInstanceId": workflow_id,
        "status": "COMPLETED",
        "outputData": {"by": "ann"},
    }
    assert developer.post("tasks", body).status_code == 200
    assert workflow(admin, workflow_id)["output"] == {"by": "ann"}
    timed = start(admin, "later")
    [task] = workflow(admin, timed)["tasks"]
    body = {**body, "taskId": task["taskId"], "workflowInstanceId": timed}
    assert_conductor_error(developer.post("tasks", body), 409)  # a WAIT with a duration ends on its timer
    assert workflow(admin, timed)["status"] == "RUNNING"


def test_a_task_is_updated_by_its_reference_name(admin, worker):
    developer = conductor_for("developer")
    steps = [{"name": "approval", "taskReferenceName": "approval", "type": "WAIT"}]
    register(admin, {"name": "approve", "tasks": steps, "outputParameters": {"by": "${approval.output.by}"}})
    workflow_id = start(admin, "approve")
    response = developer.post(f"tasks/{workflow_id}/approval/COMPLETED", {"by": "bob"})
    assert response.status_code == 200 and response["content-type"].startswith("text/plain")
    assert response.content.decode() == workflow(admin, workflow_id)["tasks"][0]["taskId"]
    assert workflow(admin, workflow_id)["output"] == {"by": "bob"}
    assert_conductor_error(developer.post(f"tasks/{workflow_id}/approval/COMPLETED", {}), 404)  # no longer open

    register(admin, PAY, CHARGE, NOTIFY)
    paid = start(admin, "pay")
    [task] = poll(worker, "charge")
    assert_conductor_error(worker.post(f"tasks/{paid}/charge/COMPLETED?workerid=w2", {}), 409)
    assert_conductor_error(worker.post(f"tasks/{paid}/charge/COMPLETED", {}), 400, "workerId")
    assert_conductor_error(worker.post(f"tasks/{paid}/charge/DONE?workerid=w1", {}), 400, "status")
    assert_conductor_error(worker.post(f"tasks/{paid}/charge/COMPLETED?workerid=w1", [1]), 400, "outputData")
    assert_conductor_error(worker.post(f"tasks/{paid}/nope/COMPLETED?workerid=w1", {}), 404)
    view = worker.post(f"tasks/{paid}/charge/COMPLETED/sync?workerid=w1", {"id": "ch_9"}).json()
    assert view["workflowId"] == paid and view["tasks"][0]["outputData"] == {"id": "ch_9"}
    assert [t["referenceTaskName"] for t in view["tasks"]] == ["charge", "notify"]
    assert Task.objects.get(pk=task["taskId"]).status == "COMPLETED"


def test_a_developer_may_not_report_a_leased_task(admin, worker):
    register(admin, PAY, CHARGE, NOTIFY)
    start(admin, "pay")
    [task] = poll(worker, "charge")
    assert_conductor_error(update(conductor_for("developer"), task, "COMPLETED"), 403)
    assert Task.objects.get(pk=task["taskId"]).status == "IN_PROGRESS"


def test_an_unknown_task_is_not_found(worker, admin):
    body = {"taskId": "00000000-0000-0000-0000-000000000009", "workerId": "w1", "status": "COMPLETED"}
    assert_conductor_error(worker.post("tasks", body), 404)
    assert_conductor_error(worker.post("tasks", {**body, "taskId": "not-an-id"}), 404)
    assert_conductor_error(admin.get("tasks/not-an-id"), 404)


# --- workflows --------------------------------------------------------------------


def test_a_workflow_starts_by_name_with_its_input_as_the_body(admin):
    register(admin, PAY, CHARGE, NOTIFY)
    response = admin.post("workflow/pay?correlationId=order-7&priority=3&version=1", {"amount": 9})
    assert response.status_code == 200 and response["content-type"].startswith("text/plain")
    view = workflow(admin, response.content.decode())
    assert view["workflowName"] == "pay" and view["workflowVersion"] == 1 and view["status"] == "RUNNING"
    assert view["input"] == {"amount": 9} and view["correlationId"] == "order-7" and view["priority"] == 3
    assert view["startTime"] > 0 and view["endTime"] == 0
    assert [t["referenceTaskName"] for t in view["tasks"]] == ["charge"]
    assert "tasks" not in workflow(admin, view["workflowId"], "?includeTasks=false")
    status = admin.get(f"workflow/{view['workflowId']}/status?includeOutput=true").json()
    assert status == {"workflowId": view["workflowId"], "correlationId": "order-7", "status": "RUNNING", "output": {}}
    assert_conductor_error(admin.post("workflow/pay?priority=100", {}), 400, "priority")
    assert_conductor_error(admin.post("workflow/pay", [1]), 400, "input")
    assert_conductor_error(admin.post("workflow/nope", {}), 404)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"taskToDomain": {"charge": "eu"}}, "taskToDomain"),
        ({"workflowDef": {"name": "inline"}}, "workflowDef"),
        ({"idempotencyStrategy": "ONCE"}, "idempotencyStrategy"),
        ({"priority": 100}, "priority"),
        ({"input": "x"}, "input"),
        ({"version": 0}, "version"),
        ({"unknown": True}, "unknown"),
    ],
)
def test_a_start_request_is_refused_naming_what_node_flow_does_not_do(admin, extra, field):
    register(admin, PAY, CHARGE, NOTIFY)
    assert_conductor_error(admin.post("workflow", {"name": "pay", **extra}), 400, field)
    assert not Execution.objects.exists()


def test_an_idempotency_key_returns_the_same_workflow_or_fails_as_the_strategy_says(admin):
    register(admin, PAY, CHARGE, NOTIFY)
    first = start(admin, "pay", idempotencyKey="k1", idempotencyStrategy="FAIL", taskToDomain={})
    assert start(admin, "pay", idempotencyKey="k1", idempotencyStrategy="RETURN_EXISTING") == first
    body = assert_conductor_error(admin.post("workflow", {"name": "pay", "idempotencyKey": "k1"}), 409)
    assert first in body["message"]  # FAIL is Conductor's default
    assert admin.post("workflow/pay", {}).status_code == 200  # no key: a new workflow
    assert Execution.objects.count() == 2


def test_terminate_pause_resume_retry_and_restart_go_through_the_lifecycle(admin, worker):
    register(admin, PAY, {**CHARGE, "retryCount": 0}, NOTIFY)
    workflow_id = start(admin, "pay")
    assert admin.call("PUT", f"workflow/{workflow_id}/pause").status_code == 200
    assert workflow(admin, workflow_id)["status"] == "PAUSED"
    assert poll(worker, "charge") == []  # a paused run dispatches nothing
    assert admin.call("PUT", f"workflow/{workflow_id}/resume").status_code == 200
    [task] = poll(worker, "charge")
    assert admin.delete(f"workflow/{workflow_id}?reason=customer%20left").status_code == 200
    view = workflow(admin, workflow_id)
    assert view["status"] == "TERMINATED" and view["reasonForIncompletion"] == "customer left"
    assert_conductor_error(update(worker, task, "COMPLETED"), 409)  # the canceled task's worker
    assert admin.post(f"workflow/{workflow_id}/retry").status_code == 204
    assert workflow(admin, workflow_id)["status"] == "RUNNING"
    assert admin.delete(f"workflow/{workflow_id}").status_code == 200
    assert admin.post(f"workflow/{workflow_id}/restart").status_code == 204
    assert workflow(admin, workflow_id)["status"] == "RUNNING"
    assert_conductor_error(admin.post(f"workflow/{workflow_id}/restart"), 409)
    assert_conductor_error(admin.post(f"workflow/{workflow_id}/restart?useLatestDefinitions=true"), 400)
    assert_conductor_error(admin.post(f"workflow/{workflow_id}/retry?resumeSubworkflowTasks=true"), 400)
    assert_conductor_error(admin.delete(f"workflow/{workflow_id}?triggerFailureWorkflow=true"), 400)
    assert_conductor_error(admin.call("PUT", "workflow/nope/pause"), 404)


def test_workflows_are_found_by_correlation_id(admin):
    register(admin, PAY, CHARGE, NOTIFY)
    first = start(admin, "pay", correlationId="order-1")
    second = start(admin, "pay", correlationId="order-1")
    start(admin, "pay", correlationId="order-2")
    admin.delete(f"workflow/{first}")
    found = admin.get("workflow/pay/correlated/order-1").json()
    assert [w["workflowId"] for w in found] == [second] and "tasks" not in found[0]
    found = admin.get("workflow/pay/correlated/order-1?includeClosed=true&includeTasks=true").json()
    assert {w["workflowId"] for w in found} == {first, second} and all("tasks" in w for w in found)
    assert admin.get("workflow/other/correlated/order-1").json() == []
    found = admin.post("workflow/pay/correlated?includeClosed=True", ["order-1", "order-2", "order-3"]).json()
    assert {cid: len(runs) for cid, runs in found.items()} == {"order-1": 2, "order-2": 1, "order-3": 0}
    assert_conductor_error(admin.post("workflow/pay/correlated", {"ids": ["order-1"]}), 400, "correlationIds")


def test_every_control_applies_to_a_start_here(admin):
    register(admin, {**PAY, "maxConcurrentExecutions": 1}, CHARGE, NOTIFY)
    start(admin, "pay")
    body = assert_conductor_error(admin.post("workflow", {"name": "pay"}), 429)
    assert body["control"] == "maxConcurrentExecutions" and body["retryable"] is True
    assert Execution.objects.count() == 1


def test_a_task_definitions_controls_apply_to_a_conductor_poll(admin, worker):
    register(admin, PAY, {**CHARGE, "concurrentExecLimit": 1}, NOTIFY)
    for _ in range(3):
        start(admin, "pay")
    assert len(poll(worker, "charge", count=10)) == 1
    assert poll(worker, "charge", count=10) == []


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "metadata/workflow", "not a definition"),
        ("POST", "metadata/workflow", {"name": 3}),
        ("PUT", "metadata/workflow", {"tasks": 1}),
        ("PUT", "metadata/taskdefs", [[1]]),
        ("POST", "workflow", [1, 2]),
        ("POST", "workflow", {"name": ["pay"]}),
        ("POST", "tasks", "x"),
        ("GET", "workflow/not-a-uuid", None),
        ("DELETE", "workflow/00000000-0000-0000-0000-000000000000", None),
        ("GET", "workflow/pay/correlated/x?includeTasks=maybe", None),
    ],
)
def test_bad_input_is_a_4xx_in_conductors_shape_never_a_500(admin, method, path, body):
    response = admin.call(method, path, body)
    assert 400 <= response.status_code < 500, response.content
    assert_conductor_error(response, response.status_code)


def test_a_body_that_is_not_json_is_refused(admin):
    response = admin.client.post(
        f"{BASE}/workflow", data="{", content_type="application/json", HTTP_X_AUTHORIZATION=admin.token
    )
    assert_conductor_error(response, 400)
    assert Api(None).get(f"{BASE}/metadata/taskdefs").status_code == 401
