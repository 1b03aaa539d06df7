"""Definitions as Conductor writes them, on Node Flow's own routes
(docs/conductor.md, "Definitions"): informational fields accepted and kept,
defaults accepted, unimplemented meanings refused naming the field, task
definitions' Conductor names mapped onto the native fields, and the
registration's warnings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executions.models import Task
from metadata import conductor
from metadata.validation import DefinitionError, normalize_workflow
from nodeflow.errors import InvalidField
from tests.engine_helpers import TASK_DEFS, WORKFLOWS

# A workflow definition as Conductor's server or SDKs write it.
CONDUCTOR_WORKFLOW = {
    "name": "order_flow",
    "description": "orders, Conductor-style",
    "version": 3,
    "schemaVersion": 2,
    "ownerEmail": "team@example.com",
    "createTime": 1700000000000,
    "updateTime": 1700000001000,
    "createdBy": "alice",
    "updatedBy": "bob",
    "ownerApp": "shop",
    "accessPolicy": {},
    "tags": [{"key": "team", "value": "orders"}],
    "restartable": True,
    "workflowStatusListenerEnabled": False,
    "enforceSchema": False,
    "inputTemplate": {},
    "variables": {"region": "eu"},
    "timeoutPolicy": "ALERT_ONLY",
    "timeoutSeconds": 0,
    "inputParameters": ["orderId"],
    "outputParameters": {"charged": "${charge.output.ok}"},
    "tasks": [
        {
            "name": "charge",
            "taskReferenceName": "charge",
            "type": "SIMPLE",
            "inputParameters": {"orderId": "${workflow.input.orderId}"},
            "startDelay": 0,
            "optional": False,
            "asyncComplete": False,
            "decisionCases": {},
            "defaultCase": [],
            "forkTasks": [],
            "joinOn": [],
            "loopOver": [],
            "defaultExclusiveJoinTask": [],
        }
    ],
}


def test_it_registers_a_conductor_definition_and_answers_get_with_it_as_posted(api):
    response = api.post(WORKFLOWS, CONDUCTOR_WORKFLOW)
    assert response.status_code == 201, response.json()
    got = api.get(f"{WORKFLOWS}/order_flow").json()
    for key in ("schemaVersion", "ownerEmail", "createTime", "updateTime", "createdBy", "updatedBy", "ownerApp"):
        assert got[key] == CONDUCTOR_WORKFLOW[key]
    assert got["tags"] == CONDUCTOR_WORKFLOW["tags"]
    assert got["tasks"][0]["startDelay"] == 0  # the task as posted
    assert (got["version"], got["published"]) == (1, True)  # Node Flow's version, not the one posted


def test_a_native_body_is_answered_as_before(api):
    body = {"name": "plain", "tasks": [{"name": "a", "taskReferenceName": "a"}]}
    assert api.post(WORKFLOWS, body).status_code == 201
    got = api.get(f"{WORKFLOWS}/plain").json()
    assert got["tasks"] == [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE", "inputParameters": {}, "optional": False}
    ]


def test_a_fetched_conductor_definition_can_be_posted_again(api):
    api.post(WORKFLOWS, CONDUCTOR_WORKFLOW)
    again = api.post(WORKFLOWS, api.get(f"{WORKFLOWS}/order_flow").json())
    assert again.status_code == 201, again.json()
    assert again.json()["version"] == 2


def test_put_registers_a_list_as_conductor_updates_definitions(api):
    second = {**CONDUCTOR_WORKFLOW, "name": "other_flow"}
    response = api.put(WORKFLOWS, [CONDUCTOR_WORKFLOW, second])
    assert response.status_code == 200, response.json()
    assert [item["name"] for item in response.json()] == ["order_flow", "other_flow"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("workflowStatusListenerEnabled", True),
        ("workflowStatusListenerSink", "kafka:x"),
        ("inputTemplate", {"a": 1}),
        ("inputSchema", {"name": "s", "type": "JSON"}),
        ("failureWorkflowVersion", 2),
        ("maskedFields", ["password"]),
    ],
)
def test_a_workflow_field_it_does_not_implement_is_refused_naming_it(api, field, value):
    response = api.post(WORKFLOWS, {**CONDUCTOR_WORKFLOW, field: value})
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == field
    assert "not implemented" in body["message"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("startDelay", 5), ("asyncComplete", True), ("rateLimited", True), ("forkTasks", [[{"name": "x"}]])],
)
def test_a_task_field_it_does_not_implement_is_refused_naming_it(api, field, value):
    body = {**CONDUCTOR_WORKFLOW, "tasks": [{**CONDUCTOR_WORKFLOW["tasks"][0], field: value}]}
    response = api.post(WORKFLOWS, body)
    assert response.status_code == 400
    assert response.json()["field"] == f"tasks[0].{field}"
    assert "not implemented" in response.json()["message"]


def test_schema_version_other_than_conductors_is_refused(api):
    response = api.post(WORKFLOWS, {**CONDUCTOR_WORKFLOW, "schemaVersion": 7})
    assert (response.status_code, response.json()["field"]) == (400, "schemaVersion")


def test_event_tasks_are_refused_saying_there_is_no_event_bus(api):
    event = {"name": "publish", "taskReferenceName": "publish", "type": "EVENT", "sink": "conductor"}
    response = api.post(WORKFLOWS, {**CONDUCTOR_WORKFLOW, "tasks": [event]})
    assert response.status_code == 400
    assert response.json()["field"] == "tasks[0].type"
    assert "event bus" in response.json()["message"]


def test_a_do_while_without_max_iterations_gets_the_ceiling_and_the_answer_says_so(api):
    loop = {
        "name": "loop",
        "taskReferenceName": "loop",
        "type": "DO_WHILE",
        "loopCondition": "$.loop['iteration'] < 3",
        "loopOver": [{"name": "step", "taskReferenceName": "step"}],
    }
    response = api.post(WORKFLOWS, {"name": "looping", "tasks": [loop]})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["warnings"] and "1000" in body["warnings"][0] and "maxIterations" in body["warnings"][0]
    assert "warnings" not in api.get(f"{WORKFLOWS}/looping").json()  # the registration's answer only


def test_a_task_without_warnings_answers_no_warnings(api):
    assert "warnings" not in api.post(WORKFLOWS, CONDUCTOR_WORKFLOW).json()


def test_an_embedded_task_definition_becomes_the_tasks_policy(api):
    embedded = {
        "name": "charge",
        "retryCount": 1,
        "retryLogic": "FIXED",
        "retryDelaySeconds": 60,
        "timeoutSeconds": 120,
        "timeoutPolicy": "TIME_OUT_WF",
        "responseTimeoutSeconds": 30,
        "inputKeys": [],
        "ownerEmail": "x@example.com",
        "rateLimitPerFrequency": 0,
        "rateLimitFrequencyInSeconds": 1,
    }
    body = {**CONDUCTOR_WORKFLOW, "tasks": [{**CONDUCTOR_WORKFLOW["tasks"][0], "taskDefinition": embedded}]}
    assert api.post(WORKFLOWS, body).status_code == 201
    api.post("executions", {"name": "order_flow", "input": {"orderId": 1}})
    leased = api.post("tasks/poll/charge", {"workerId": "w"}).json()
    policy = Task.objects.get(pk=leased[0]["taskId"]).policy
    assert (policy["retryCount"], policy["retryLogic"], policy["heartbeatTimeout"]) == (1, "FIXED", 30)
    assert (policy["timeoutSeconds"], policy["timeoutPolicy"]) == (120, "TIME_OUT_WF")


def test_an_embedded_task_definition_with_a_live_control_is_refused(api):
    embedded = {"name": "charge", "concurrentExecLimit": 2}
    body = {**CONDUCTOR_WORKFLOW, "tasks": [{**CONDUCTOR_WORKFLOW["tasks"][0], "taskDefinition": embedded}]}
    response = api.post(WORKFLOWS, body)
    assert (response.status_code, response.json()["field"]) == (400, "tasks[0].taskDefinition.concurrentExecLimit")


def test_restartable_false_refuses_a_restart(api):
    body = {**CONDUCTOR_WORKFLOW, "restartable": False}
    assert api.post(WORKFLOWS, body).status_code == 201
    started = api.post("executions", {"name": "order_flow", "input": {}}).json()
    assert api.post(f"executions/{started['id']}/terminate", {"reason": "x"}).status_code == 200
    response = api.post(f"executions/{started['id']}/restart")
    assert response.status_code == 409
    assert "restartable" in response.json()["message"]


# --- task definitions ---------------------------------------------------------------

CONDUCTOR_TASK_DEF = {
    "name": "encode",
    "description": "encodes video",
    "ownerEmail": "media@example.com",
    "createTime": 1700000000000,
    "createdBy": "alice",
    "retryCount": 2,
    "retryLogic": "FIXED",
    "retryDelaySeconds": 10,
    "timeoutSeconds": 600,
    "timeoutPolicy": "TIME_OUT_WF",
    "responseTimeoutSeconds": 120,
    "pollTimeoutSeconds": 30,
    "concurrentExecLimit": 4,
    "rateLimitPerFrequency": 50,
    "rateLimitFrequencyInSeconds": 60,
    "inputKeys": ["file"],
    "outputKeys": ["url"],
    "inputTemplate": {},
    "backoffScaleFactor": 1,
}


def test_a_conductor_task_definition_maps_onto_the_native_fields(api):
    response = api.post(TASK_DEFS, CONDUCTOR_TASK_DEF)
    assert response.status_code == 201, response.json()
    body = api.get(f"{TASK_DEFS}/encode").json()
    assert body["heartbeatTimeout"] == 120 == body["responseTimeoutSeconds"]
    assert body["scheduleToStartTimeout"] == 30 == body["pollTimeoutSeconds"]
    assert body["rateLimitFrequencySeconds"] == 60 == body["rateLimitFrequencyInSeconds"]
    assert (body["rateLimitPerFrequency"], body["concurrentExecLimit"]) == (50, 4)
    assert (body["retryCount"], body["retryLogic"], body["retryDelaySeconds"]) == (2, "FIXED", 10)
    assert (body["timeoutSeconds"], body["timeoutPolicy"]) == (600, "TIME_OUT_WF")
    for key in ("ownerEmail", "createTime", "createdBy", "inputKeys", "outputKeys"):
        assert body[key] == CONDUCTOR_TASK_DEF[key]


def test_the_conductor_names_answer_the_live_values_after_a_patch(api):
    api.post(TASK_DEFS, CONDUCTOR_TASK_DEF)
    patched = api.patch(f"{TASK_DEFS}/encode", {"heartbeatTimeout": 5}).json()
    assert patched["responseTimeoutSeconds"] == 5 == patched["heartbeatTimeout"]
    patched = api.patch(f"{TASK_DEFS}/encode", {"pollTimeoutSeconds": 7, "ownerEmail": "new@example.com"}).json()
    assert (patched["scheduleToStartTimeout"], patched["ownerEmail"], patched["createdBy"]) == (
        7,
        "new@example.com",
        "alice",
    )


def test_put_replaces_a_task_definition(api):
    assert api.put(TASK_DEFS, CONDUCTOR_TASK_DEF).status_code == 201
    assert api.put(TASK_DEFS, {**CONDUCTOR_TASK_DEF, "retryCount": 9}).json()["retryCount"] == 9


def test_a_native_task_definition_answers_no_conductor_fields(api):
    body = api.post(TASK_DEFS, {"name": "plain"}).json()
    assert "responseTimeoutSeconds" not in body and "ownerEmail" not in body


@pytest.mark.parametrize(
    ("field", "value"),
    [("isolationGroupId", "g1"), ("executionNameSpace", "ns"), ("inputTemplate", {"a": 1}), ("totalTimeoutSeconds", 9)],
)
def test_a_task_definition_field_it_does_not_implement_is_refused(api, field, value):
    response = api.post(TASK_DEFS, {**CONDUCTOR_TASK_DEF, field: value})
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert "not implemented" in response.json()["message"]


def test_a_bad_value_under_a_conductor_name_is_refused_naming_it(api):
    response = api.post(TASK_DEFS, {**CONDUCTOR_TASK_DEF, "responseTimeoutSeconds": -1})
    assert (response.status_code, response.json()["field"]) == (400, "responseTimeoutSeconds")


def test_a_field_given_under_both_names_is_refused(api):
    response = api.post(TASK_DEFS, {"name": "x", "responseTimeoutSeconds": 5, "heartbeatTimeout": 5})
    assert (response.status_code, response.json()["field"]) == (400, "responseTimeoutSeconds")


def test_conductors_rate_window_without_a_rate_is_no_rate_limit(api):
    body = api.post(TASK_DEFS, {"name": "x", "rateLimitPerFrequency": 0, "rateLimitFrequencyInSeconds": 1}).json()
    assert (body["rateLimitPerFrequency"], body["rateLimitFrequencySeconds"]) == (0, 0)


def test_the_mapped_controls_hold_a_concurrency_cap(api):
    api.post(TASK_DEFS, {**CONDUCTOR_TASK_DEF, "concurrentExecLimit": 1, "rateLimitPerFrequency": 0})
    api.post(
        WORKFLOWS,
        {
            "name": "two",
            "tasks": [
                {
                    "name": "encode",
                    "taskReferenceName": "a",
                    "type": "FORK_JOIN",
                    "forkTasks": [
                        [{"name": "encode", "taskReferenceName": "e1"}],
                        [{"name": "encode", "taskReferenceName": "e2"}],
                    ],
                }
            ],
        },
    )
    api.post("executions", {"name": "two", "input": {}})
    assert len(api.post("tasks/poll/encode", {"workerId": "w", "count": 10}).json()) == 1


# --- the translation never fails but by naming a field ------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
_TASK_KEYS = sorted({*conductor.CONDUCTOR_TASK_FIELDS, "name", "taskReferenceName", "type", "inputParameters"})
_TYPES = st.sampled_from(
    ["DECISION", "LAMBDA", "SWITCH", "INLINE", "HTTP", "DO_WHILE", "SUB_WORKFLOW", "WAIT", "EVENT"]
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(sorted({*conductor.WORKFLOW_INFO, *conductor.WORKFLOW_DEFAULTS, "name", "schemaVersion"})),
        _JSON,
        max_size=4,
    ),
    st.lists(st.dictionaries(st.sampled_from(_TASK_KEYS), _JSON | _TYPES, max_size=6), max_size=3),
)
def test_translating_any_body_raises_only_a_definition_error(top, tasks):
    try:
        translated = conductor.translate_workflow({**top, "tasks": tasks})
        normalize_workflow(translated.body)
    except DefinitionError as exc:
        assert exc.fields["field"]


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            sorted({*conductor.TASKDEF_INFO, *conductor.TASKDEF_DEFAULTS, *conductor.TASKDEF_ALIASES, "name"})
        ),
        _JSON,
        max_size=5,
    )
)
def test_translating_any_task_definition_raises_only_a_field_error(body):
    try:
        conductor.translate_taskdef(body)
    except InvalidField as exc:
        assert exc.fields["field"]


def test_an_embedded_task_definition_with_an_unimplemented_field_is_refused_naming_it(api):
    embedded = {"name": "charge", "isolationGroupId": "g1"}
    body = {**CONDUCTOR_WORKFLOW, "tasks": [{**CONDUCTOR_WORKFLOW["tasks"][0], "taskDefinition": embedded}]}
    response = api.post(WORKFLOWS, body)
    assert (response.status_code, response.json()["field"]) == (400, "tasks[0].taskDefinition.isolationGroupId")
    assert response.json()["taskReferenceName"] == "charge"


def test_a_join_mode_is_accepted_both_ways_conductor_writes_it(api):
    fork = {
        "name": "fork",
        "taskReferenceName": "fork",
        "type": "FORK_JOIN",
        "forkTasks": [[{"name": "a", "taskReferenceName": "a"}], [{"name": "b", "taskReferenceName": "b"}]],
    }
    for mode in ("SYNC", "ASYNC"):
        join = {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["a", "b"], "joinMode": mode}
        assert api.post(WORKFLOWS, {"name": f"j_{mode}", "tasks": [fork, join]}).status_code == 201


def test_a_rate_limit_config_that_would_reject_is_refused(api):
    config = {"rateLimitKey": "${workflow.input.tenant}", "concurrentExecLimit": 1}
    assert (
        api.post(WORKFLOWS, {**CONDUCTOR_WORKFLOW, "rateLimitConfig": {**config, "policy": "QUEUE"}}).status_code == 201
    )
    response = api.post(WORKFLOWS, {**CONDUCTOR_WORKFLOW, "rateLimitConfig": {**config, "policy": "REJECT"}})
    assert (response.status_code, response.json()["field"]) == (400, "rateLimitConfig.policy")


def test_a_user_task_is_a_human_task(api, api_for):
    body = {"name": "people", "tasks": [{"name": "review", "taskReferenceName": "review", "type": "USER_TASK"}]}
    assert api.post(WORKFLOWS, body).status_code == 201
    run = api.post("executions", {"name": "people", "input": {}}).json()
    task = api.get(f"executions/{run['id']}").json()["tasks"][0]
    assert (task["type"], task["status"]) == ("HUMAN", "IN_PROGRESS")
    done = api_for("developer").post(f"tasks/{task['taskId']}/result", {"status": "COMPLETED"})
    assert done.status_code == 200
