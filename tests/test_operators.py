"""Operators run inside the decider (SPEC §5): SWITCH, FORK_JOIN and JOIN,
FORK_JOIN_DYNAMIC, DO_WHILE, SUB_WORKFLOW, TERMINATE, SET_VARIABLE; with
expressions, fail-fast forks, optional tasks and the failureWorkflow —
all driven through the HTTP API."""

from __future__ import annotations

import pytest

from executions.models import DecideRequest
from executions.roles.decider import DeciderRole
from nodeflow import clock
from tests.engine_helpers import (
    WORKFLOWS,
    complete,
    execution,
    fail,
    no_retries,
    poll,
    poll_and_complete,
    poll_one,
    register,
    report,
    simple,
    start,
    statuses,
    sweep,
    task_at,
    tasks_at,
)


def switch(ref: str, cases: dict, default: list | None = None, **fields) -> dict:
    return {
        "name": ref,
        "taskReferenceName": ref,
        "type": "SWITCH",
        "decisionCases": cases,
        "defaultCase": default or [],
        **fields,
    }


def fork(ref: str, *branches: list, **fields) -> dict:
    return {"name": ref, "taskReferenceName": ref, "type": "FORK_JOIN", "forkTasks": list(branches), **fields}


def join(ref: str, *on: str) -> dict:
    return {"name": ref, "taskReferenceName": ref, "type": "JOIN", "joinOn": list(on)}


def dynamic(ref: str, template: dict, items="${workflow.input.items}", **fields) -> dict:
    return {
        "name": ref,
        "taskReferenceName": ref,
        "type": "FORK_JOIN_DYNAMIC",
        "forkTask": template,
        "inputParameters": {"items": items},
        **fields,
    }


def loop(ref: str, condition: str, *body: dict, max_iterations: int = 10, **fields) -> dict:
    return {
        "name": ref,
        "taskReferenceName": ref,
        "type": "DO_WHILE",
        "loopCondition": condition,
        "loopOver": list(body),
        "maxIterations": max_iterations,
        **fields,
    }


def sub_workflow(ref: str, child: str, inputs: dict | None = None, **fields) -> dict:
    return {
        "name": "call_" + child,
        "taskReferenceName": ref,
        "type": "SUB_WORKFLOW",
        "subWorkflowParam": {"name": child},
        "inputParameters": inputs or {},
        **fields,
    }


def scheduled_paths(view: dict) -> set[str]:
    return {t["path"] for t in view["tasks"] if t["status"] == "SCHEDULED"}


# --- SWITCH -----------------------------------------------------------------

VALUE_PARAM_SWITCH = switch(
    "route",
    {"card": [simple("charge_card")], "bank": [simple("charge_bank")]},
    [simple("manual")],
    evaluatorType="value-param",
    expression="kind",
    inputParameters={"kind": "${workflow.input.kind}"},
)


@pytest.mark.parametrize(("kind", "queue"), [("card", "charge_card"), ("bank", "charge_bank")])
def test_it_runs_the_value_param_case_that_matches(api, kind, queue):
    register(api, "pay", VALUE_PARAM_SWITCH, simple("ship"))
    started = start(api, "pay", {"kind": kind})
    assert task_at(started, "route")["outputData"]["selectedCase"] == kind
    assert scheduled_paths(started) == {queue}
    poll_and_complete(api, queue)
    poll_and_complete(api, "ship")
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert set(statuses(view)) == {"route", queue, "ship"}


def test_it_runs_the_default_case_when_no_case_matches(api):
    register(api, "pay", VALUE_PARAM_SWITCH, simple("ship"))
    started = start(api, "pay", {"kind": "crypto"})
    assert task_at(started, "route")["status"] == "COMPLETED"
    assert task_at(started, "route")["outputData"]["selectedCase"] == "crypto"
    assert scheduled_paths(started) == {"manual"}
    poll_and_complete(api, "manual")
    poll_and_complete(api, "ship")
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_goes_straight_on_when_the_default_case_is_empty(api):
    register(
        api,
        "pay",
        switch(
            "route",
            {"card": [simple("charge_card")]},
            expression="kind",
            inputParameters={"kind": "${workflow.input.kind}"},
        ),
        simple("ship"),
    )
    started = start(api, "pay", {"kind": "nothing"})
    assert scheduled_paths(started) == {"ship"}


def test_it_picks_a_case_with_a_javascript_expression(api):
    register(
        api,
        "pay",
        switch(
            "size",
            {"big": [simple("review")], "small": [simple("auto")]},
            evaluatorType="javascript",
            expression="$.amount > 100 ? 'big' : 'small'",
            inputParameters={"amount": "${workflow.input.amount}"},
        ),
    )
    big = start(api, "pay", {"amount": 500})
    small = start(api, "pay", {"amount": 5})
    assert scheduled_paths(big) == {"review"}
    assert scheduled_paths(small) == {"auto"}
    assert task_at(big, "size")["outputData"]["selectedCase"] == "big"


def test_it_fails_the_execution_when_the_javascript_expression_throws(api):
    register(
        api,
        "pay",
        switch(
            "size",
            {"x": [simple("a")]},
            evaluatorType="javascript",
            expression="(function(){ throw new Error('nope') })()",
        ),
    )
    started = start(api, "pay")
    assert started["status"] == "FAILED"
    assert task_at(started, "size")["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "SWITCH expression" in started["reasonForIncompletion"]


def test_it_fails_the_execution_when_the_javascript_expression_allocates_past_the_limit(api):
    # Inside the start request: the API process must not grow by 512 MiB.
    register(
        api,
        "pay",
        switch(
            "size",
            {"x": [simple("a")]},
            evaluatorType="javascript",
            expression="new Uint8Array(512 * 1024 * 1024).length",
        ),
    )
    started = start(api, "pay")
    assert started["status"] == "FAILED"
    assert "memory limit (32 MiB)" in started["reasonForIncompletion"]


YAML_BOOLEAN_SWITCH = """\
name: approve
tasks:
  - name: check
    taskReferenceName: check
    type: SWITCH
    evaluatorType: javascript
    expression: $.amount < 1000
    inputParameters:
      amount: ${workflow.input.amount}
    decisionCases:
      true:
        - name: auto_approve
          taskReferenceName: auto_approve
      false:
        - name: human_review
          taskReferenceName: human_review
"""


@pytest.mark.parametrize(("amount", "queue"), [(10, "auto_approve"), (5000, "human_review")])
def test_it_matches_a_yaml_boolean_case_key(api, amount, queue):
    response = api.post(WORKFLOWS, raw=YAML_BOOLEAN_SWITCH, content_type="application/yaml")
    assert response.status_code == 201, response.json()
    started = start(api, "approve", {"amount": amount})
    assert scheduled_paths(started) == {queue}
    poll_and_complete(api, queue)
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_matches_a_boolean_input_with_value_param(api):
    response = api.post(
        WORKFLOWS,
        raw=YAML_BOOLEAN_SWITCH.replace("evaluatorType: javascript", "evaluatorType: value-param")
        .replace("expression: $.amount < 1000", "expression: vip")
        .replace("amount: ${workflow.input.amount}", "vip: ${workflow.input.vip}"),
        content_type="application/yaml",
    )
    assert response.status_code == 201, response.json()
    assert scheduled_paths(start(api, "approve", {"vip": True})) == {"auto_approve"}
    assert scheduled_paths(start(api, "approve", {"vip": False})) == {"human_review"}


# --- FORK_JOIN and JOIN -----------------------------------------------------


def test_it_runs_fork_branches_side_by_side_and_joins_their_outputs(api):
    register(
        api,
        "fan",
        fork("split", [simple("a1"), simple("a2")], [simple("b1")]),
        join("merge", "a2", "b1"),
        simple("after", inputParameters={"joined": "${merge.output}"}),
    )
    started = start(api, "fan")
    assert scheduled_paths(started) == {"a1", "b1"}
    poll_and_complete(api, "a1", {"n": 1})
    poll_and_complete(api, "b1", {"n": 3})
    view = execution(api, started["id"])
    assert scheduled_paths(view) == {"a2"}
    assert "merge" not in statuses(view)
    poll_and_complete(api, "a2", {"n": 2})
    view = execution(api, started["id"])
    assert task_at(view, "merge")["outputData"] == {"a2": {"n": 2}, "b1": {"n": 3}}
    assert task_at(view, "after")["inputData"] == {"joined": {"a2": {"n": 2}, "b1": {"n": 3}}}
    assert task_at(view, "split")["status"] == "COMPLETED"


def test_it_runs_one_branch_at_a_time_with_max_concurrency_1(api):
    register(
        api,
        "fan",
        fork("split", [simple("a1"), simple("a2")], [simple("b1")], [simple("c1")], maxConcurrency=1),
        join("merge"),
    )
    started = start(api, "fan")
    assert scheduled_paths(started) == {"a1"}
    assert poll(api, "b1") == [] and poll(api, "c1") == []
    poll_and_complete(api, "a1")
    assert scheduled_paths(execution(api, started["id"])) == {"a2"}
    poll_and_complete(api, "a2")
    assert scheduled_paths(execution(api, started["id"])) == {"b1"}
    poll_and_complete(api, "b1")
    assert scheduled_paths(execution(api, started["id"])) == {"c1"}
    poll_and_complete(api, "c1", {"last": True})
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    # An empty joinOn waits for (and joins) every branch.
    assert set(task_at(view, "merge")["outputData"]) == {"a1", "a2", "b1", "c1"}


# --- FORK_JOIN_DYNAMIC ------------------------------------------------------

CHARGE_ITEM = simple("charge", inputParameters={"item": "${item}", "index": "${index}", "label": "item ${index}"})


def test_it_runs_the_template_once_per_item_with_item_and_index(api):
    register(api, "batch", dynamic("fan", CHARGE_ITEM), join("merge", "charge"))
    started = start(api, "batch", {"items": [{"sku": "a"}, {"sku": "b"}]})
    assert task_at(started, "fan[0].charge")["inputData"] == {"item": {"sku": "a"}, "index": 0, "label": "item 0"}
    assert task_at(started, "fan[1].charge")["inputData"] == {"item": {"sku": "b"}, "index": 1, "label": "item 1"}
    leased = poll(api, "charge", count=10)
    assert sorted(task["path"] for task in leased) == ["fan[0].charge", "fan[1].charge"]
    for task in leased:
        complete(api, task, {"charged": task["inputData"]["item"]["sku"]})
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert task_at(view, "merge")["outputData"] == {
        "fan[0].charge": {"charged": "a"},
        "fan[1].charge": {"charged": "b"},
    }
    assert task_at(view, "fan")["status"] == "COMPLETED"


def test_it_keeps_idempotency_keys_apart_per_item(api):
    register(api, "batch", dynamic("fan", CHARGE_ITEM))
    started = start(api, "batch", {"items": [1, 2, 3]})
    keys = {t["idempotencyKey"] for t in started["tasks"] if t["type"] == "SIMPLE"}
    assert keys == {f"{started['id']}:fan[{i}].charge" for i in range(3)}


def test_it_bounds_concurrent_items_by_the_default_max_concurrency_of_4(api):
    register(api, "batch", dynamic("fan", CHARGE_ITEM), join("merge"))
    started = start(api, "batch", {"items": list(range(7))})
    assert scheduled_paths(started) == {f"fan[{i}].charge" for i in range(4)}
    leased = poll(api, "charge", count=10)
    assert len(leased) == 4
    complete(api, next(t for t in leased if t["path"] == "fan[2].charge"))
    view = execution(api, started["id"])
    assert scheduled_paths(view) == {"fan[4].charge"}
    assert [p for p in statuses(view) if p.startswith("fan[")] == [f"fan[{i}].charge" for i in range(5)]
    for task in leased:
        if task["path"] != "fan[2].charge":
            complete(api, task)
    while True:
        more = poll(api, "charge", count=10)
        if not more:
            break
        assert len(more) <= 4
        for task in more:
            complete(api, task)
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert len(task_at(view, "merge")["outputData"]) == 7


def test_it_honours_an_explicit_max_concurrency(api):
    register(api, "batch", dynamic("fan", CHARGE_ITEM, maxConcurrency=2))
    started = start(api, "batch", {"items": list(range(5))})
    assert scheduled_paths(started) == {"fan[0].charge", "fan[1].charge"}


def test_it_fails_the_task_over_the_item_ceiling(api, settings):
    settings.NODE_FLOW_MAX_FORK_ITEMS = 3
    register(api, "batch", dynamic("fan", CHARGE_ITEM))
    allowed = start(api, "batch", {"items": [1, 2, 3]})
    assert allowed["status"] == "RUNNING"
    refused = start(api, "batch", {"items": [1, 2, 3, 4]})
    assert refused["status"] == "FAILED"
    fan = task_at(refused, "fan")
    assert fan["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "exceed the limit of 3" in fan["reasonForIncompletion"]
    assert [t["path"] for t in refused["tasks"]] == ["fan"]


def test_it_fails_the_task_when_items_is_not_a_list(api):
    register(api, "batch", dynamic("fan", CHARGE_ITEM))
    refused = start(api, "batch", {"items": {"not": "a list"}})
    assert refused["status"] == "FAILED"
    assert "items must be a list" in task_at(refused, "fan")["reasonForIncompletion"]


def test_it_completes_a_dynamic_fork_over_no_items(api):
    register(api, "batch", dynamic("fan", CHARGE_ITEM), join("merge"), simple("after"))
    started = start(api, "batch", {"items": []})
    assert scheduled_paths(started) == {"after"}
    assert task_at(started, "merge")["outputData"] == {}


# --- DO_WHILE ---------------------------------------------------------------


def test_it_iterates_a_do_while_until_its_condition_is_false(api):
    register(
        api,
        "again",
        loop("loop", "$.iteration < 3", simple("step", inputParameters={"n": "${workflow.input.n}"})),
        simple("after", inputParameters={"loops": "${loop.output.iteration}"}),
    )
    started = start(api, "again", {"n": 7})
    assert scheduled_paths(started) == {"loop[1].step"}
    for iteration in (1, 2, 3):
        leased = poll_one(api, "step")
        assert leased["path"] == f"loop[{iteration}].step"
        assert leased["inputData"] == {"n": 7}
        complete(api, leased, {"done": iteration})
    view = execution(api, started["id"])
    assert task_at(view, "loop")["status"] == "COMPLETED"
    assert task_at(view, "loop")["outputData"] == {"iteration": 3}
    assert [t["path"] for t in view["tasks"] if t["referenceTaskName"] == "step"] == [
        "loop[1].step",
        "loop[2].step",
        "loop[3].step",
    ]
    assert task_at(view, "after")["inputData"] == {"loops": 3}
    assert {t["idempotencyKey"] for t in view["tasks"] if t["referenceTaskName"] == "step"} == {
        f"{started['id']}:loop[{i}].step" for i in (1, 2, 3)
    }


def test_it_lets_the_loop_condition_read_the_last_iteration(api):
    register(api, "again", loop("loop", "$.step.output.more === true", simple("step")))
    started = start(api, "again")
    complete(api, poll_one(api, "step"), {"more": True})
    complete(api, poll_one(api, "step"), {"more": False})
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert task_at(view, "loop")["outputData"] == {"iteration": 2}


def test_it_fails_the_execution_when_a_loop_runs_out_of_iterations(api):
    register(api, "forever", loop("loop", "true", simple("step"), max_iterations=2), simple("after"))
    started = start(api, "forever")
    poll_and_complete(api, "step")
    poll_and_complete(api, "step")
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert task_at(view, "loop")["status"] == "FAILED"
    assert "maxIterations (2)" in view["reasonForIncompletion"]
    assert "after" not in statuses(view)
    assert poll(api, "step") == []


def test_it_fails_the_loop_when_an_iteration_fails(api):
    no_retries(api, "step")
    register(api, "again", loop("loop", "$.iteration < 5", simple("step")))
    started = start(api, "again")
    poll_and_complete(api, "step")
    fail(api, poll_one(api, "step"), "bad input")
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert task_at(view, "loop")["status"] == "FAILED"
    assert task_at(view, "loop[2].step")["status"] == "FAILED"
    assert "bad input" in view["reasonForIncompletion"]


def counter_loop(iterations: int) -> dict:
    """A loop of operators only: every iteration ends within the walk."""
    body = {
        "name": "note",
        "taskReferenceName": "note",
        "type": "SET_VARIABLE",
        "inputParameters": {"last": "${loop.output.iteration}"},
    }
    return loop("loop", f"$.iteration < {iterations}", body, max_iterations=iterations)


def decide_requests(execution_id: str) -> int:
    return DecideRequest.objects.filter(execution_id=execution_id).count()


@pytest.mark.parametrize("iterations", [250])
def test_it_decides_an_operator_only_loop_in_bounded_steps(api, settings, iterations):
    settings.NODE_FLOW_LOOP_ITERATIONS_PER_DECISION = 100
    settings.NODE_FLOW_DECISION_SECONDS = 60  # the count binds here, not the time
    register(api, "count", counter_loop(iterations), simple("after"))
    started = start(api, "count")
    # The start ran 100 iterations, not 250, and left the rest to the decider role.
    assert started["status"] == "RUNNING"
    assert len(tasks_at(started, "loop[100].note")) == 1 and tasks_at(started, "loop[101].note") == []
    assert decide_requests(started["id"]) == 1
    assert DeciderRole().tick()  # one step of at most 100 more
    assert len([t for t in execution(api, started["id"])["tasks"] if t["referenceTaskName"] == "note"]) == 200
    sweep()
    view = execution(api, started["id"])
    assert task_at(view, "loop")["status"] == "COMPLETED"
    assert task_at(view, "loop")["outputData"] == {"iteration": iterations}
    assert scheduled_paths(view) == {"after"}
    assert decide_requests(started["id"]) == 0


def test_a_decision_starts_no_iteration_past_its_time_budget(api, settings):
    settings.NODE_FLOW_DECISION_SECONDS = 0
    register(api, "count", counter_loop(3))
    started = start(api, "count")
    assert [t["path"] for t in started["tasks"] if t["referenceTaskName"] == "note"] == ["loop[1].note"]
    for done in (2, 3):
        assert DeciderRole().tick()
        assert tasks_at(execution(api, started["id"]), f"loop[{done}].note")
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_a_slow_loop_condition_holds_one_request_for_the_time_budget_only(api, settings):
    # Each condition spins 100 ms of real time: 20 iterations held the start
    # request for 2 s. Past 0.25 s no further iteration starts, so the start
    # runs at most 3 (1 ≤ n ≤ 3 whatever the machine's speed).
    settings.NODE_FLOW_DECISION_SECONDS = 0.25
    spin = "(() => { const t = Date.now(); while (Date.now() - t < 100) {} return $.iteration < 20 })()"
    register(
        api,
        "slow",
        loop(
            "loop",
            spin,
            {"name": "note", "taskReferenceName": "note", "type": "SET_VARIABLE", "inputParameters": {"x": 1}},
            max_iterations=20,
        ),
    )
    started = start(api, "slow")
    assert 1 <= len([t for t in started["tasks"] if t["referenceTaskName"] == "note"]) <= 3
    assert decide_requests(started["id"]) == 1


# --- SUB_WORKFLOW -----------------------------------------------------------


def child_of(api, parent: dict, path: str = "sub") -> dict:
    child_id = task_at(execution(api, parent["id"]), path)["subWorkflowId"]
    assert child_id, "the SUB_WORKFLOW task names no child"
    return execution(api, child_id)


def test_it_starts_a_child_and_passes_its_output_back(api):
    register(
        api,
        "child",
        simple("inner", inputParameters={"x": "${workflow.input.x}"}),
        outputParameters={"result": "${inner.output.value}"},
    )
    register(
        api,
        "parent",
        sub_workflow("sub", "child", {"x": "${workflow.input.x}"}),
        simple("after", inputParameters={"got": "${sub.output.result}"}),
    )
    started = start(api, "parent", {"x": 5})
    sub = task_at(started, "sub")
    assert sub["status"] == "IN_PROGRESS" and sub["type"] == "SUB_WORKFLOW"
    child = child_of(api, started)
    assert child["parentExecutionId"] == started["id"]
    assert child["depth"] == 1 and child["name"] == "child"
    assert child["input"] == {"x": 5}
    assert [t["path"] for t in child["tasks"]] == ["sub.inner"]

    leased = poll_one(api, "inner")
    assert leased["path"] == "sub.inner" and leased["executionId"] == child["id"]
    assert leased["inputData"] == {"x": 5}
    complete(api, leased, {"value": 42})
    assert execution(api, child["id"])["status"] == "COMPLETED"
    sweep()  # the parent re-decides once its child has ended
    view = execution(api, started["id"])
    assert task_at(view, "sub")["outputData"] == {"result": 42, "subWorkflowId": child["id"]}
    assert task_at(view, "after")["inputData"] == {"got": 42}
    poll_and_complete(api, "after")
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_fails_the_parent_when_the_child_fails(api):
    no_retries(api, "inner", "call_child")
    register(api, "child", simple("inner"))
    register(api, "parent", sub_workflow("sub", "child"), simple("after"))
    started = start(api, "parent")
    child = child_of(api, started)
    fail(api, poll_one(api, "inner"), "card declined")
    assert execution(api, child["id"])["status"] == "FAILED"
    sweep()
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert task_at(view, "sub")["status"] == "FAILED"
    assert "card declined" in task_at(view, "sub")["reasonForIncompletion"]
    assert "after" not in statuses(view)


def test_it_retries_a_failed_child_as_a_new_child(api):
    no_retries(api, "inner")
    register(api, "child", simple("inner"))
    register(api, "parent", sub_workflow("sub", "child", retryCount=1, retryDelaySeconds=0))
    started = start(api, "parent")
    first = child_of(api, started)
    fail(api, poll_one(api, "inner"))
    sweep()
    view = execution(api, started["id"])
    assert view["status"] == "RUNNING"
    attempts = tasks_at(view, "sub")
    assert [t["attempt"] for t in attempts] == [1, 2]
    assert attempts[1]["subWorkflowId"] not in (None, first["id"])
    poll_and_complete(api, "inner", {"ok": True})
    sweep()
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_runs_a_child_per_dynamic_fork_item(api):
    register(
        api,
        "child",
        simple("inner", inputParameters={"v": "${workflow.input.v}"}),
        outputParameters={"double": "${inner.output.double}"},
    )
    register(api, "parent", dynamic("fan", sub_workflow("sub", "child", {"v": "${item}"})), join("merge"))
    started = start(api, "parent", {"items": [10, 20]})
    leased = poll(api, "inner", count=5)
    assert sorted((t["path"], t["inputData"]["v"]) for t in leased) == [
        ("fan[0].sub.inner", 10),
        ("fan[1].sub.inner", 20),
    ]
    for task in leased:
        complete(api, task, {"double": task["inputData"]["v"] * 2})
    sweep()
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    merged = task_at(view, "merge")["outputData"]
    assert {key: value["double"] for key, value in merged.items()} == {"fan[0].sub": 20, "fan[1].sub": 40}


def test_it_does_not_retry_a_child_that_was_terminated(api):
    register(api, "child", simple("inner"))
    register(api, "parent", sub_workflow("sub", "child", optional=True), simple("after"))
    started = start(api, "parent")
    child_id = task_at(started, "sub")["subWorkflowId"]
    assert api.post(f"executions/{child_id}/terminate", {"reason": "by hand"}).status_code == 200
    sweep()
    view = execution(api, started["id"])
    # Neither the retry policy (3 retries by default) nor optional swallows it.
    assert view["status"] == "FAILED"
    assert [(t["attempt"], t["status"]) for t in tasks_at(view, "sub")] == [(1, "CANCELED")]
    assert "TERMINATED: by hand" in task_at(view, "sub")["reasonForIncompletion"]
    assert "after" not in statuses(view)
    assert len(api.get("executions?name=child").json()["results"]) == 1


def test_it_shortens_a_childs_deadline_to_the_parents(api, frozen_clock):
    register(api, "child", simple("inner"), timeoutSeconds=60)
    register(api, "long_child", simple("inner"), timeoutSeconds=10_000)
    register(api, "parent", sub_workflow("short", "child"), sub_workflow("long", "long_child"), timeoutSeconds=600)
    started = start(api, "parent")
    assert started["deadline"] == "2026-06-01T12:10:00Z"
    assert child_of(api, started, "short")["deadline"] == "2026-06-01T12:01:00Z"
    poll_and_complete(api, "inner")
    sweep()
    assert child_of(api, started, "long")["deadline"] == "2026-06-01T12:10:00Z"


# --- TERMINATE and SET_VARIABLE --------------------------------------------


def terminate_task(status: str, **inputs) -> dict:
    return {
        "name": "stop",
        "taskReferenceName": "stop",
        "type": "TERMINATE",
        "inputParameters": {"terminationStatus": status, **inputs},
    }


def test_it_terminates_as_completed_with_the_workflow_output(api):
    register(
        api,
        "short",
        simple("a"),
        terminate_task("COMPLETED", workflowOutput={"total": "${a.output.total}"}),
        simple("never"),
    )
    started = start(api, "short")
    poll_and_complete(api, "a", {"total": 9})
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert view["output"] == {"total": 9}
    assert "never" not in statuses(view)


def test_it_terminates_as_failed_with_a_reason(api):
    register(
        api,
        "short",
        terminate_task("FAILED", terminationReason="no stock", workflowOutput={"code": 7}),
        simple("never"),
    )
    started = start(api, "short")
    assert started["status"] == "FAILED"
    assert started["reasonForIncompletion"] == "no stock"
    assert started["output"] == {"code": 7}
    assert task_at(started, "stop")["status"] == "COMPLETED"


def test_it_cancels_open_branches_when_terminate_ends_the_run(api):
    register(api, "short", fork("split", [simple("slow")], [simple("a"), terminate_task("COMPLETED")]))
    started = start(api, "short")
    slow = poll_one(api, "slow")
    poll_and_complete(api, "a")
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert task_at(view, "slow")["status"] == "CANCELED"
    assert report(api, slow).status_code == 409


def test_it_sets_variables_for_later_tasks_and_the_execution(api):
    register(
        api,
        "vars",
        simple("a"),
        {
            "name": "set",
            "taskReferenceName": "set",
            "type": "SET_VARIABLE",
            "inputParameters": {"count": "${a.output.n}", "stage": "counted"},
        },
        simple("b", inputParameters={"count": "${workflow.variables.count}", "stage": "${workflow.variables.stage}"}),
        variables={"stage": "new", "keep": 1},
    )
    started = start(api, "vars")
    assert started["variables"] == {"stage": "new", "keep": 1}
    poll_and_complete(api, "a", {"n": 3})
    view = execution(api, started["id"])
    assert view["variables"] == {"stage": "counted", "keep": 1, "count": 3}
    assert task_at(view, "b")["inputData"] == {"count": 3, "stage": "counted"}


# --- expressions ------------------------------------------------------------


def test_it_resolves_expressions_in_inputs_and_the_workflow_output(api):
    register(
        api,
        "expr",
        simple(
            "a",
            inputParameters={
                "id": "${workflow.input.order.id}",
                "first": "${workflow.input.lines[0]}",
                "text": "order ${workflow.input.order.id} for ${workflow.input.order.who}",
                "execution": "${workflow.executionId}",
                "missing": "${workflow.input.nope}",
                "literal": "$${not}",
            },
        ),
        simple("b", inputParameters={"fromA": "${a.output.items[1].sku}", "status": "${a.status}"}),
        outputParameters={"sku": "${a.output.items[1].sku}", "b": "${b.output}", "note": "done ${a.output.total}"},
    )
    started = start(api, "expr", {"order": {"id": 42, "who": "ann"}, "lines": ["x", "y"]})
    assert task_at(started, "a")["inputData"] == {
        "id": 42,
        "first": "x",
        "text": "order 42 for ann",
        "execution": started["id"],
        "missing": None,
        "literal": "${not}",
    }
    poll_and_complete(api, "a", {"items": [{"sku": "p"}, {"sku": "q"}], "total": 5})
    assert task_at(execution(api, started["id"]), "b")["inputData"] == {"fromA": "q", "status": "COMPLETED"}
    poll_and_complete(api, "b", {"ok": True})
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED"
    assert view["output"] == {"sku": "q", "b": {"ok": True}, "note": "done 5"}


def test_it_uses_the_last_task_output_without_output_parameters(api):
    register(api, "plain", simple("a"), simple("b"))
    started = start(api, "plain")
    poll_and_complete(api, "a", {"first": 1})
    poll_and_complete(api, "b", {"second": 2})
    assert execution(api, started["id"])["output"] == {"second": 2}


# --- failure: fail-fast forks, optional tasks, failureWorkflow --------------


def test_it_cancels_fork_siblings_when_a_branch_fails(api):
    no_retries(api, "bad")
    register(
        api, "fan", fork("split", [simple("bad")], [simple("slow"), simple("later")], [simple("queued")]), join("merge")
    )
    started = start(api, "fan")
    slow = poll_one(api, "slow")
    fail(api, poll_one(api, "bad"), "exploded")
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert "exploded" in view["reasonForIncompletion"]
    assert view["failedTaskNames"] == ["bad"]
    assert task_at(view, "slow")["status"] == "CANCELED"
    assert task_at(view, "queued")["status"] == "CANCELED"
    assert task_at(view, "split")["status"] == "FAILED"
    assert "later" not in statuses(view) and "merge" not in statuses(view)
    stale = report(api, slow)
    assert stale.status_code == 409
    assert stale.json()["error"] == "CONFLICT"
    assert api.post(f"tasks/{slow['taskId']}/heartbeat", {"leaseToken": slow["leaseToken"]}).status_code == 409
    assert poll(api, "queued") == []


def test_it_cancels_dynamic_fork_siblings_when_an_item_fails(api):
    no_retries(api, "charge")
    register(api, "batch", dynamic("fan", CHARGE_ITEM))
    started = start(api, "batch", {"items": [1, 2, 3]})
    leased = {t["path"]: t for t in poll(api, "charge", count=3)}
    fail(api, leased["fan[1].charge"])
    view = execution(api, started["id"])
    assert view["status"] == "FAILED"
    assert statuses(view) == {
        "fan": "FAILED",
        "fan[0].charge": "CANCELED",
        "fan[1].charge": "FAILED",
        "fan[2].charge": "CANCELED",
    }
    assert report(api, leased["fan[0].charge"]).status_code == 409


def test_it_absorbs_the_failure_of_an_optional_task(api):
    no_retries(api, "extra")
    register(api, "soft", simple("extra", optional=True), simple("b", inputParameters={"s": "${extra.status}"}))
    started = start(api, "soft")
    fail(api, poll_one(api, "extra"), "analytics down")
    view = execution(api, started["id"])
    assert view["status"] == "RUNNING"
    extra = task_at(view, "extra")
    assert extra["status"] == "COMPLETED_WITH_ERRORS"
    assert extra["reasonForIncompletion"] == "analytics down"
    assert task_at(view, "b")["inputData"] == {"s": "COMPLETED_WITH_ERRORS"}
    poll_and_complete(api, "b")
    assert execution(api, started["id"])["status"] == "COMPLETED"


def test_it_retries_an_optional_task_before_absorbing_it(api):
    register(api, "soft", simple("extra", optional=True, retryCount=1, retryDelaySeconds=0), simple("b"))
    started = start(api, "soft")
    fail(api, poll_one(api, "extra"))
    view = execution(api, started["id"])
    assert [t["status"] for t in tasks_at(view, "extra")] == ["FAILED", "SCHEDULED"]
    fail(api, poll_one(api, "extra"))
    view = execution(api, started["id"])
    assert [t["status"] for t in tasks_at(view, "extra")] == ["FAILED", "COMPLETED_WITH_ERRORS"]
    assert scheduled_paths(view) == {"b"}


def test_it_starts_the_failure_workflow_with_the_failed_run(api):
    no_retries(api, "charge")
    register(api, "on_failure", simple("notify", inputParameters={"failed": "${workflow.input.workflowId}"}))
    register(api, "orders", simple("charge"), failureWorkflow="on_failure")
    started = start(api, "orders", {"order": 1}, correlationId="c-9")
    fail(api, poll_one(api, "charge"), "card declined")
    assert execution(api, started["id"])["status"] == "FAILED"
    found = api.get("executions?name=on_failure").json()["results"]
    assert len(found) == 1
    handler = found[0]
    assert handler["input"]["workflowId"] == started["id"]
    assert handler["input"]["executionId"] == started["id"]
    assert "card declined" in handler["input"]["reason"]
    assert handler["input"]["failedTaskNames"] == ["charge"]
    assert handler["input"]["status"] == "FAILED"
    assert handler["correlationId"] == "c-9"
    assert poll_one(api, "notify")["inputData"] == {"failed": started["id"]}


def test_it_does_not_start_the_failure_workflow_on_success(api):
    register(api, "on_failure", simple("notify"))
    register(api, "orders", simple("charge"), failureWorkflow="on_failure")
    started = start(api, "orders")
    poll_and_complete(api, "charge")
    assert execution(api, started["id"])["status"] == "COMPLETED"
    assert api.get("executions?name=on_failure").json()["results"] == []


def test_it_starts_the_failure_workflow_when_the_run_times_out(api, frozen_clock):
    register(api, "on_failure", simple("notify"))
    register(api, "orders", simple("charge"), failureWorkflow="on_failure", timeoutSeconds=60)
    started = start(api, "orders")
    clock.advance(60)
    sweep()
    assert execution(api, started["id"])["status"] == "TIMED_OUT"
    handler = api.get("executions?name=on_failure").json()["results"][0]
    assert handler["input"]["status"] == "TIMED_OUT"
    assert handler["input"]["workflowId"] == started["id"]


def test_it_does_not_start_the_failure_workflow_on_terminate(api):
    register(api, "on_failure", simple("notify"))
    register(api, "orders", simple("charge"), failureWorkflow="on_failure")
    started = start(api, "orders")
    assert api.post(f"executions/{started['id']}/terminate").status_code == 200
    assert api.get("executions?name=on_failure").json()["results"] == []


def test_it_starts_the_failure_workflow_for_a_terminate_task_that_fails(api):
    register(api, "on_failure", simple("notify"))
    register(api, "orders", terminate_task("FAILED", terminationReason="out of stock"), failureWorkflow="on_failure")
    started = start(api, "orders")
    handler = api.get("executions?name=on_failure").json()["results"][0]
    assert handler["input"]["workflowId"] == started["id"]
    assert handler["input"]["reason"] == "out of stock"
    assert handler["input"]["failedTaskNames"] == ["stop"]
