"""Conductor's task types and idioms, run end to end through Node Flow's own
routes (docs/conductor.md, "Task types and idioms"): each definition is
written as Conductor writes it, and every control still holds on it."""

from __future__ import annotations

import uuid

import pytest

from executions import results
from executions.models import Execution, Task
from nodeflow.models import Namespace
from tests.engine_helpers import (
    TASK_DEFS,
    WORKFLOWS,
    advance,
    complete,
    execution,
    fail,
    poll,
    poll_one,
    start,
    statuses,
    sweep,
    task_at,
)
from tests.system_helpers import http_server, run_system_tasks  # noqa: F401  # http_server is a fixture

pytestmark = pytest.mark.django_db(transaction=False)


def register(api, body: dict) -> dict:
    response = api.post(WORKFLOWS, {"schemaVersion": 2, "ownerEmail": "t@example.com", **body})
    assert response.status_code == 201, response.json()
    return response.json()


def simple(ref: str, name: str | None = None, **inputs) -> dict:
    return {"name": name or ref, "taskReferenceName": ref, "type": "SIMPLE", "inputParameters": inputs}


# --- DECISION, LAMBDA, graaljs ---------------------------------------------------------


@pytest.mark.parametrize(
    ("decision", "case", "runs"),
    [
        ({"caseValueParam": "kind"}, "card", "charge"),
        ({"caseValueParam": "kind"}, "cash", "manual"),
        ({"caseExpression": "$.kind == 'card' ? 'card' : 'other'"}, "card", "charge"),
        ({"caseExpression": "$.kind == 'card' ? 'card' : 'other'"}, "bank", "manual"),
    ],
)
def test_decision_runs_the_case_as_switch_does(api, decision, case, runs):
    register(
        api,
        {
            "name": "decide",
            "tasks": [
                {
                    "name": "route",
                    "taskReferenceName": "route",
                    "type": "DECISION",
                    "inputParameters": {"kind": "${workflow.input.kind}"},
                    "decisionCases": {"card": [simple("charge")]},
                    "defaultCase": [simple("manual")],
                    **decision,
                }
            ],
        },
    )
    run = start(api, "decide", {"kind": case})
    complete(api, poll_one(api, runs))
    view = execution(api, run["id"])
    assert view["status"] == "COMPLETED"
    assert task_at(view, "route")["type"] == "SWITCH"


def test_lambda_runs_its_script_in_the_inline_sandbox(api):
    register(
        api,
        {
            "name": "lambda",
            "tasks": [
                {
                    "name": "lambda",
                    "taskReferenceName": "lambda_1",
                    "type": "LAMBDA",
                    "inputParameters": {
                        "input": "${workflow.input}",
                        "scriptExpression": "if ($.input.a == 1) { return {testvalue: true} } else { return {testvalue: false} }",
                    },
                }
            ],
            "outputParameters": {"value": "${lambda_1.output.result.testvalue}"},
        },
    )
    run = start(api, "lambda", {"a": 1})
    run_system_tasks()
    view = execution(api, run["id"])
    assert (view["status"], view["output"]) == ("COMPLETED", {"value": True})
    assert task_at(view, "lambda_1")["type"] == "INLINE"


def test_a_lambda_that_reaches_for_io_fails_as_inline_does(api):
    register(
        api,
        {
            "name": "lambda_io",
            "tasks": [
                {
                    "name": "lambda",
                    "taskReferenceName": "l",
                    "type": "LAMBDA",
                    "inputParameters": {"scriptExpression": "return require('fs')"},
                }
            ],
        },
    )
    run = start(api, "lambda_io")
    run_system_tasks()
    view = execution(api, run["id"])
    assert view["status"] == "FAILED"
    assert task_at(view, "l")["status"] == "FAILED_WITH_TERMINAL_ERROR"


def test_graaljs_is_javascript_for_inline_and_switch(api):
    register(
        api,
        {
            "name": "graal",
            "tasks": [
                {
                    "name": "calc",
                    "taskReferenceName": "calc",
                    "type": "INLINE",
                    "inputParameters": {
                        "n": "${workflow.input.n}",
                        "evaluatorType": "graaljs",
                        "expression": "$.n * 2",
                    },
                },
                {
                    "name": "pick",
                    "taskReferenceName": "pick",
                    "type": "SWITCH",
                    "evaluatorType": "graaljs",
                    "expression": "$.v > 5 ? 'big' : 'small'",
                    "inputParameters": {"v": "${calc.output.result}"},
                    "decisionCases": {"big": [simple("big")]},
                    "defaultCase": [simple("small")],
                },
            ],
        },
    )
    run = start(api, "graal", {"n": 4})
    run_system_tasks()
    complete(api, poll_one(api, "big"))
    assert execution(api, run["id"])["status"] == "COMPLETED"


# --- DYNAMIC ------------------------------------------------------------------------------

DYNAMIC_WF = {
    "name": "dyn",
    "tasks": [
        {
            "name": "dyntask",
            "taskReferenceName": "step",
            "type": "DYNAMIC",
            "dynamicTaskNameParam": "taskToExecute",
            "inputParameters": {"taskToExecute": "${workflow.input.task}", "x": 1},
        }
    ],
    "outputParameters": {"got": "${step.output.done}"},
}


def test_dynamic_runs_the_task_its_input_names(api):
    register(api, DYNAMIC_WF)
    run = start(api, "dyn", {"task": "encode"})
    leased = poll_one(api, "encode")
    assert leased["inputData"]["x"] == 1
    complete(api, leased, {"done": "yes"})
    view = execution(api, run["id"])
    assert (view["status"], view["output"]) == ("COMPLETED", {"got": "yes"})
    assert task_at(view, "step")["taskDefName"] == "encode"


def test_dynamic_tasks_take_the_named_definitions_controls_and_retries(api):
    api.post(TASK_DEFS, {"name": "encode", "concurrentExecLimit": 1, "retryCount": 1, "retryDelaySeconds": 0})
    register(api, DYNAMIC_WF)
    first, second = start(api, "dyn", {"task": "encode"}), start(api, "dyn", {"task": "encode"})
    leased = poll(api, "encode", count=5)
    assert len(leased) == 1
    waiting = next(r for r in (first, second) if r["id"] != leased[0]["executionId"])
    blocked = task_at(execution(api, waiting["id"]), "step")["blockedBy"]
    assert blocked["control"] == "concurrentExecLimit"
    fail(api, leased[0])
    sweep()
    retried = [t for t in execution(api, leased[0]["executionId"])["tasks"] if t["path"] == "step"]
    assert [t["attempt"] for t in retried] == [1, 2]


def test_dynamic_with_no_task_named_fails_naming_the_input(api):
    register(api, DYNAMIC_WF)
    view = execution(api, start(api, "dyn", {})["id"])
    assert view["status"] == "FAILED"
    assert "taskToExecute" in view["reasonForIncompletion"]


# --- FORK_JOIN_DYNAMIC with tasks chosen at run time, EXCLUSIVE_JOIN -----------------------


def test_a_dynamic_fork_of_tasks_chosen_at_run_time_joins_by_reference(api):
    register(
        api,
        {
            "name": "fanout",
            "tasks": [
                simple("plan"),
                {
                    "taskReferenceName": "fan",
                    "type": "FORK_JOIN_DYNAMIC",
                    "dynamicForkTasksParam": "dynamicTasks",
                    "dynamicForkTasksInputParamName": "dynamicTasksInput",
                    "inputParameters": {
                        "dynamicTasks": "${plan.output.tasks}",
                        "dynamicTasksInput": "${plan.output.inputs}",
                    },
                },
                {"taskReferenceName": "fan_join", "type": "JOIN"},
                simple("after", joined="${fan_join.output}"),
            ],
        },
    )
    run = start(api, "fanout")
    complete(
        api,
        poll_one(api, "plan"),
        {
            "tasks": [
                {"name": "resize", "taskReferenceName": "small", "type": "SIMPLE"},
                {"name": "resize", "taskReferenceName": "large"},
            ],
            "inputs": {"small": {"px": 10}, "large": {"px": 1000}},
        },
    )
    leased = poll(api, "resize", count=5)
    assert sorted(t["inputData"]["px"] for t in leased) == [10, 1000]
    for item in leased:
        complete(api, item, {"px": item["inputData"]["px"]})
    after = poll_one(api, "after")
    assert after["inputData"]["joined"] == {"small": {"px": 10}, "large": {"px": 1000}}
    complete(api, after)
    assert execution(api, run["id"])["status"] == "COMPLETED"


EXCLUSIVE_WF = {
    "name": "exclusive",
    "tasks": [
        simple("task1"),
        {
            "name": "decide",
            "taskReferenceName": "decision1",
            "type": "DECISION",
            "caseValueParam": "d",
            "inputParameters": {"d": "${workflow.input.d}"},
            "decisionCases": {"true": [simple("task2")], "false": [simple("task4")]},
        },
        {
            "name": "exclusive_join",
            "taskReferenceName": "ej",
            "type": "EXCLUSIVE_JOIN",
            "joinOn": ["task2", "task4"],
            "defaultExclusiveJoinTask": ["task1"],
        },
    ],
    "outputParameters": {"joined": "${ej.output.from}"},
}


@pytest.mark.parametrize(("d", "branch", "joined"), [(True, "task2", "task2"), (False, "task4", "task4")])
def test_exclusive_join_joins_whichever_branch_ran(api, d, branch, joined):
    register(api, EXCLUSIVE_WF)
    run = start(api, "exclusive", {"d": d})
    complete(api, poll_one(api, "task1"), {"from": "task1"})
    complete(api, poll_one(api, branch), {"from": branch})
    view = execution(api, run["id"])
    assert (view["status"], view["output"]) == ("COMPLETED", {"joined": joined})


def test_exclusive_join_falls_back_to_its_default_tasks(api):
    register(api, EXCLUSIVE_WF)
    run = start(api, "exclusive", {"d": "neither"})
    complete(api, poll_one(api, "task1"), {"from": "task1"})
    assert execution(api, run["id"])["output"] == {"joined": "task1"}


# --- START_WORKFLOW ----------------------------------------------------------------------------

STARTER = {
    "name": "starter",
    "tasks": [
        {
            "name": "start_child",
            "taskReferenceName": "kick",
            "type": "START_WORKFLOW",
            "inputParameters": {"startWorkflow": {"name": "child", "input": {"n": "${workflow.input.n}"}}},
        },
        simple("after", started="${kick.output.workflowId}"),
    ],
}


def test_start_workflow_starts_another_and_goes_on_without_waiting(api):
    register(api, {"name": "child", "tasks": [simple("work")]})
    register(api, STARTER)
    run = start(api, "starter", {"n": 7})
    run_system_tasks()
    after = poll_one(api, "after")
    child = Execution.objects.get(pk=after["inputData"]["started"])
    assert (child.name, child.status, child.input) == ("child", "RUNNING", {"n": 7})
    assert child.parent_execution_id is None  # fire and forget: its own root run
    complete(api, after)
    assert execution(api, run["id"])["status"] == "COMPLETED"


def test_start_workflow_goes_through_the_start_controls(api):
    register(api, {"name": "child", "tasks": [simple("work")], "maxConcurrentExecutions": 1})
    register(api, {**STARTER, "tasks": [{**STARTER["tasks"][0], "retryCount": 0}, STARTER["tasks"][1]]})
    start(api, "child")  # holds the child's only slot
    run = start(api, "starter", {"n": 1})
    run_system_tasks()
    view = execution(api, run["id"])
    kick = task_at(view, "kick")
    assert kick["status"] == "FAILED"
    assert "maxConcurrentExecutions" in kick["reasonForIncompletion"]
    assert Execution.objects.filter(name="child").count() == 1


def test_start_workflow_of_an_unknown_workflow_fails_terminally(api):
    register(api, STARTER)
    run = start(api, "starter", {"n": 1})
    run_system_tasks()
    assert task_at(execution(api, run["id"]), "kick")["status"] == "FAILED_WITH_TERMINAL_ERROR"


# --- WAIT ---------------------------------------------------------------------------------------

WAIT_WF = {
    "name": "approve",
    "tasks": [{"name": "wait_for_approval", "taskReferenceName": "approval", "type": "WAIT"}],
    "outputParameters": {"approval": "${approval.output}"},
}


def test_a_wait_with_no_duration_is_completed_through_nodeflows_result_route(api, api_for):
    register(api, WAIT_WF)
    run = start(api, "approve")
    waiting = task_at(execution(api, run["id"]), "approval")
    assert waiting["status"] == "IN_PROGRESS"
    advance(10 * 86400)  # no timer: still waiting
    assert task_at(execution(api, run["id"]), "approval")["status"] == "IN_PROGRESS"
    response = api_for("developer").post(
        f"tasks/{waiting['taskId']}/result", {"status": "COMPLETED", "outputData": {"ok": True}}
    )
    assert response.status_code == 200, response.json()
    view = execution(api, run["id"])
    assert (view["status"], view["output"]) == ("COMPLETED", {"approval": {"ok": True}})


def test_a_wait_with_no_duration_is_completed_through_the_engine_entry_point(api):
    register(api, WAIT_WF)
    run = start(api, "approve")
    waiting = task_at(execution(api, run["id"]), "approval")
    namespace = Namespace.objects.get(name="default")
    result = results.Result(task_id=uuid.UUID(waiting["taskId"]), status="COMPLETED", output={"by": "conductor"})
    results.complete_by_api(namespace=namespace, result=result)
    assert execution(api, run["id"])["output"] == {"approval": {"by": "conductor"}}
    with pytest.raises(Exception) as again:
        results.complete_by_api(namespace=namespace, result=result)
    assert getattr(again.value, "status_code", None) == 409


def test_a_wait_with_a_duration_takes_no_result_without_a_lease(api, api_for):
    register(api, {**WAIT_WF, "tasks": [{**WAIT_WF["tasks"][0], "inputParameters": {"duration": "1 hour"}}]})
    run = start(api, "approve")
    waiting = task_at(execution(api, run["id"]), "approval")
    response = api_for("developer").post(f"tasks/{waiting['taskId']}/result", {"status": "COMPLETED"})
    assert (response.status_code, response.json()["field"]) == (400, "leaseToken")


@pytest.mark.parametrize(
    ("duration", "seconds"), [("30 seconds", 30), ("5m", 300), ("1 hour", 3600), ("2 mins 5 secs", 125)]
)
def test_wait_takes_conductors_durations(api, frozen_clock, duration, seconds):
    register(api, {**WAIT_WF, "tasks": [{**WAIT_WF["tasks"][0], "inputParameters": {"duration": duration}}]})
    run = start(api, "approve")
    advance(seconds - 1)
    assert execution(api, run["id"])["status"] == "RUNNING"
    advance(1)
    assert execution(api, run["id"])["status"] == "COMPLETED"


# --- DO_WHILE ---------------------------------------------------------------------------------------


def test_a_loop_condition_reading_loop_iteration_runs_value_times(api):
    """The condition 19 of 31 loops in Conductor's own corpus write; it was a TypeError."""
    register(
        api,
        {
            "name": "loops",
            "tasks": [
                {
                    "name": "loopTask",
                    "taskReferenceName": "loopTask",
                    "type": "DO_WHILE",
                    "inputParameters": {"value": "${workflow.input.loop}"},
                    "loopCondition": "if ($.loopTask['iteration'] < $.value) { true; } else { false;} ",
                    "loopOver": [simple("step", at="${loopTask['iteration']}")],
                }
            ],
        },
    )
    run = start(api, "loops", {"loop": 3})
    seen = []
    for _ in range(3):
        leased = poll_one(api, "step")
        seen.append(leased["inputData"]["at"])
        complete(api, leased)
    assert seen == [1, 2, 3]
    view = execution(api, run["id"])
    assert view["status"] == "COMPLETED"
    assert task_at(view, "loopTask")["outputData"]["iteration"] == 3


def test_a_loop_without_max_iterations_still_fails_when_it_runs_out(api):
    response = api.post(
        WORKFLOWS,
        {
            "name": "forever",
            "tasks": [
                {
                    "name": "spin",
                    "taskReferenceName": "spin",
                    "type": "DO_WHILE",
                    "loopCondition": "$.spin.iteration > 0",
                    "loopOver": [{"name": "noop", "taskReferenceName": "noop", "type": "SET_VARIABLE"}],
                }
            ],
        },
    )
    assert response.status_code == 201 and response.json()["warnings"]
    run = start(api, "forever")
    for _ in range(20):
        sweep()
    view = execution(api, run["id"])
    assert view["status"] == "FAILED"
    assert "maxIterations (1000)" in view["reasonForIncompletion"]


def test_a_loop_over_items_runs_one_iteration_per_item(api):
    register(
        api,
        {
            "name": "each",
            "tasks": [
                {
                    "name": "list_loop",
                    "taskReferenceName": "list_loop",
                    "type": "DO_WHILE",
                    "items": "${workflow.input.items}",
                    "loopOver": [
                        {
                            "name": "LAMBDA_TASK",
                            "taskReferenceName": "process_item",
                            "type": "LAMBDA",
                            "inputParameters": {
                                "scriptExpression": "return { processedItem: $.list_loop.loopItem, index: $.list_loop.loopIndex }",
                                "list_loop": "${list_loop.output}",
                            },
                        }
                    ],
                }
            ],
        },
    )
    run = start(api, "each", {"items": ["a", "b", "c"]})
    for _ in range(4):
        run_system_tasks()
    view = execution(api, run["id"])
    assert view["status"] == "COMPLETED"
    outputs = [t["outputData"]["result"] for t in view["tasks"] if t["path"].endswith("process_item")]
    assert outputs == [
        {"processedItem": "a", "index": 0},
        {"processedItem": "b", "index": 1},
        {"processedItem": "c", "index": 2},
    ]


# --- HTTP flat, names as expressions, expressions ----------------------------------------------------


def test_http_fields_flat_in_input_parameters(api, http_server):  # noqa: F811  # the fixture
    register(
        api,
        {
            "name": "flat_http",
            "tasks": [
                {
                    "name": "call",
                    "taskReferenceName": "call",
                    "type": "HTTP",
                    "inputParameters": {
                        "uri": http_server.url("/ok"),
                        "method": "POST",
                        "body": {"a": 1},
                        "accept": "application/json",
                        "contentType": "application/json",
                        "readTimeOut": 5000,
                    },
                }
            ],
        },
    )
    run = start(api, "flat_http")
    run_system_tasks()
    view = execution(api, run["id"])
    assert view["status"] == "COMPLETED", view
    seen = http_server.requests[0]
    assert (seen.method, seen.headers["accept"], seen.headers["content-type"]) == (
        "POST",
        "application/json",
        "application/json",
    )


def test_a_sub_workflow_named_by_an_expression_runs_the_child_it_names(api):
    register(api, {"name": "billing", "tasks": [simple("bill")], "outputParameters": {"b": "${bill.output.b}"}})
    register(
        api,
        {
            "name": "parent",
            "tasks": [
                {
                    "name": "sub",
                    "taskReferenceName": "sub",
                    "type": "SUB_WORKFLOW",
                    "subWorkflowParam": {"name": "${workflow.input.child}"},
                    "inputParameters": {},
                }
            ],
            "outputParameters": {"b": "${sub.output.b}"},
        },
    )
    run = start(api, "parent", {"child": "billing"})
    complete(api, poll_one(api, "bill"), {"b": 5})
    sweep()  # the parent's decision, which the child's end asked for
    view = execution(api, run["id"])
    assert (view["status"], view["output"]) == ("COMPLETED", {"b": 5})


def test_a_sub_workflow_named_by_an_expression_that_names_nothing_fails(api):
    register(
        api,
        {
            "name": "parent",
            "tasks": [
                {
                    "name": "sub",
                    "taskReferenceName": "sub",
                    "type": "SUB_WORKFLOW",
                    "subWorkflowParam": {"name": "${workflow.input.child}"},
                }
            ],
        },
    )
    run = start(api, "parent", {"child": "nowhere"})
    sweep()
    view = execution(api, run["id"])
    assert view["status"] == "FAILED"
    assert "nowhere" in task_at(view, "sub")["reasonForIncompletion"]


def test_a_run_time_child_recursing_into_itself_stops_at_the_depth_limit(api):
    register(
        api,
        {
            "name": "recurse",
            "tasks": [
                {
                    "name": "again",
                    "taskReferenceName": "again",
                    "type": "SUB_WORKFLOW",
                    "retryCount": 0,
                    "subWorkflowParam": {"name": "${workflow.workflowType}"},
                }
            ],
        },
    )
    run = start(api, "recurse")
    for _ in range(6):
        sweep()
    assert Execution.objects.filter(name="recurse").count() == 5  # depths 0-4
    deepest = Execution.objects.get(name="recurse", depth=4)
    assert "call depth limit" in deepest.reason_for_incompletion
    assert execution(api, run["id"])["status"] == "FAILED"


def test_a_failure_workflow_named_by_an_expression(api):
    register(api, {"name": "on_failure", "tasks": [simple("cleanup")]})
    register(api, {"name": "fragile", "failureWorkflow": "${workflow.input.onFail}", "tasks": [simple("work")]})
    api.post(TASK_DEFS, {"name": "work", "retryCount": 0})
    run = start(api, "fragile", {"onFail": "on_failure"})
    fail(api, poll_one(api, "work"))
    handler = Execution.objects.get(name="on_failure")
    assert handler.input["workflowId"] == run["id"]


def test_conductors_expression_forms(api):
    register(
        api,
        {
            "name": "exprs",
            "tasks": [
                simple("first"),
                simple(
                    "second",
                    id="${workflow.workflowId}",
                    type="${workflow.workflowType}",
                    created="${workflow.createTime}",
                    firstId="${first.output.list[0].id}",
                    keyed="${first.output['the key']}",
                    deep="${first.output..id}",
                    me="${CPEWF_TASK_ID}",
                ),
            ],
        },
    )
    run = start(api, "exprs")
    complete(api, poll_one(api, "first"), {"list": [{"id": "x1"}], "the key": "v"})
    leased = poll_one(api, "second")
    inputs = leased["inputData"]
    assert (inputs["deep"], inputs["me"]) == (["x1"], leased["taskId"])
    created = Execution.objects.get(pk=run["id"]).created_at.timestamp() * 1000
    assert (inputs["id"], inputs["type"], inputs["firstId"], inputs["keyed"]) == (run["id"], "exprs", "x1", "v")
    assert abs(inputs["created"] - created) < 5


def test_every_waiting_conductor_task_reports_blocked_by(api):
    register(api, DYNAMIC_WF)
    api.post(f"{WORKFLOWS}/dyn/publish")
    run = start(api, "dyn", {"task": "encode"})
    api.post(f"executions/{run['id']}/pause")
    view = execution(api, run["id"])
    assert statuses(view) == {"step": "SCHEDULED"}
    assert task_at(view, "step")["blockedBy"]["control"] == "paused"
    assert Task.objects.get(pk=task_at(view, "step")["taskId"]).queue == "encode"


def test_the_console_draws_conductors_task_types(api, admin_client):
    register(api, EXCLUSIVE_WF)
    register(api, DYNAMIC_WF)
    register(
        api,
        {
            "name": "drawn_fanout",
            "tasks": [
                {
                    "taskReferenceName": "fan",
                    "type": "FORK_JOIN_DYNAMIC",
                    "dynamicForkTasksParam": "tasks",
                    "inputParameters": {"tasks": "${workflow.input.tasks}"},
                },
                {"taskReferenceName": "fan_join", "type": "JOIN"},
            ],
        },
    )
    runs = [
        start(api, "exclusive", {"d": True}),
        start(api, "dyn", {"task": "encode"}),
        start(api, "drawn_fanout", {"tasks": [{"name": "resize", "taskReferenceName": "r1"}]}),
    ]
    for run in runs:
        assert admin_client.get(f"/console/executions/{run['id']}").status_code == 200
