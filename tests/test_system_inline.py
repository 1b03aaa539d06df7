"""INLINE (JavaScript in the V8 sandbox, with time and memory limits) and
JSON_JQ_TRANSFORM."""

from __future__ import annotations

import time

import pytest
from django.test import override_settings

from tests.engine_helpers import execution, register, start, task_at, tasks_at
from tests.system_helpers import run_system_tasks, system_task

pytestmark = pytest.mark.django_db


def run_one(api, task: dict, input: dict | None = None) -> dict:
    register(api, "flow", task, outputParameters={"value": "${t.output.result}"})
    started = start(api, "flow", input)
    run_system_tasks()
    return execution(api, started["id"])


def inline(expression: str, **values) -> dict:
    return system_task("t", "INLINE", evaluatorType="javascript", expression=expression, **values)


def test_it_returns_the_result_of_a_script(api):
    view = run_one(api, inline("$.a * $.b + $.names.length", a="${workflow.input.a}", b=7, names=["x", "y"]), {"a": 6})
    assert view["status"] == "COMPLETED"
    assert task_at(view, "t")["outputData"] == {"result": 44}
    assert view["output"] == {"value": 44}


def test_it_runs_statements_and_functions(api):
    script = "function grade(n) { return n > 50 ? 'pass' : 'fail' }; ({grade: grade($.score), at: $.score})"
    view = run_one(api, inline(script, score=72))
    assert task_at(view, "t")["outputData"] == {"result": {"grade": "pass", "at": 72}}


def test_it_fails_a_throwing_script_terminally(api):
    view = run_one(api, inline("throw new Error('bad input ' + $.n)", n=3))
    task = task_at(view, "t")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "bad input 3" in task["reasonForIncompletion"]
    assert len(tasks_at(view, "t")) == 1


@override_settings(NODE_FLOW_INLINE_TIMEOUT_SECONDS=0.3)
def test_it_stops_a_script_that_loops_forever(api):
    began = time.monotonic()
    task = task_at(run_one(api, inline("while (true) {}")), "t")
    assert time.monotonic() - began < 5
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "ran longer than 0.3 s" in task["reasonForIncompletion"]


@override_settings(NODE_FLOW_INLINE_MAX_MEMORY_MB=16, NODE_FLOW_INLINE_TIMEOUT_SECONDS=10)
def test_it_stops_a_script_that_allocates_without_bound(api):
    began = time.monotonic()
    task = task_at(run_one(api, inline("const a = []; while (true) { a.push(new Array(100000).fill(1.5)) }")), "t")
    assert time.monotonic() - began < 10
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "memory limit (16 MiB)" in task["reasonForIncompletion"]


@override_settings(NODE_FLOW_INLINE_MAX_MEMORY_MB=16)
def test_it_stops_a_script_that_allocates_outside_the_heap(api):
    # Array buffers live outside V8's heap: the sandbox bounds them too
    # (tests/test_script_sandbox.py tries every way to make one).
    task = task_at(run_one(api, inline("new ArrayBuffer(512 * 1024 * 1024).byteLength")), "t")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "memory limit (16 MiB)" in task["reasonForIncompletion"]


@override_settings(NODE_FLOW_MAX_BODY_BYTES=64 * 1024)
def test_a_script_result_is_bounded_like_any_task_output(api):
    # A worker's outputData is one body, at most NODE_FLOW_MAX_BODY_BYTES; a
    # script's result is held to the same, not stored (and served) whole.
    task = task_at(run_one(api, inline("'x'.repeat(70 * 1024)")), "t")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "NODE_FLOW_MAX_BODY_BYTES" in task["reasonForIncompletion"]
    assert task["outputData"] == {}


@override_settings(NODE_FLOW_MAX_BODY_BYTES=64 * 1024)
def test_a_script_result_under_the_bound_is_kept(api):
    task = task_at(run_one(api, inline("'x'.repeat(60 * 1024)")), "t")
    assert task["status"] == "COMPLETED" and len(task["outputData"]["result"]) == 60 * 1024


def test_it_still_runs_scripts_after_one_ran_out_of_memory(api):
    with override_settings(NODE_FLOW_INLINE_MAX_MEMORY_MB=16):
        run_one(api, inline("const a = []; while (true) { a.push(new Array(100000).fill(1)) }"))
    view = execution(api, start(api, "flow")["id"])
    run_system_tasks()
    view = execution(api, view["id"])
    assert task_at(view, "t")["status"] == "FAILED_WITH_TERMINAL_ERROR"  # same script, same answer
    register(api, "other", inline("1 + 1"))
    other = start(api, "other")
    run_system_tasks()
    assert task_at(execution(api, other["id"]), "t")["outputData"] == {"result": 2}


# --- JSON_JQ_TRANSFORM -----------------------------------------------------------


def jq_task(query: str, **values) -> dict:
    return system_task("t", "JSON_JQ_TRANSFORM", queryExpression=query, **values)


def test_it_transforms_with_jq(api):
    view = run_one(
        api,
        jq_task(
            "{total: (.items | map(.price) | add), first: .items[0].sku}",
            items=[{"sku": "a", "price": 2}, {"sku": "b", "price": 3}],
        ),
    )
    assert view["status"] == "COMPLETED"
    assert task_at(view, "t")["outputData"] == {
        "result": {"total": 5, "first": "a"},
        "resultList": [{"total": 5, "first": "a"}],
    }


def test_it_lists_every_value_jq_produces(api):
    view = run_one(api, jq_task(".xs[] | . * 10", xs=[1, 2, 3]))
    assert task_at(view, "t")["outputData"] == {"result": 10, "resultList": [10, 20, 30]}


@pytest.mark.parametrize("query", ["{broken", '.a | error("no good")'])
def test_it_fails_a_bad_jq_program_terminally(api, query):
    task = task_at(run_one(api, jq_task(query, a=1)), "t")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert task["reasonForIncompletion"].startswith("queryExpression")


def test_it_stops_a_jq_program_that_never_ends(api):
    task = task_at(run_one(api, jq_task("repeat(1)")), "t")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "more than 10000 values" in task["reasonForIncompletion"]
