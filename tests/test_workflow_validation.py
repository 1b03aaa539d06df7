"""normalize_workflow: every static check of SPEC §4–§5, as tables. Pure: no database."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from metadata import durations, task_types
from metadata.tree import walk_tasks
from metadata.validation import DefinitionError, normalize_workflow


def simple(ref: str, **extra: Any) -> dict:
    return {"name": "work", "taskReferenceName": ref, **extra}


def wf(*tasks: dict, **fields: Any) -> dict:
    return {"name": "wf", "tasks": list(tasks), **fields}


def rejected(body: Any) -> DefinitionError:
    with pytest.raises(DefinitionError) as info:
        normalize_workflow(body)
    return info.value


def assert_rejected(body: Any, field: str, ref: str | None) -> DefinitionError:
    error = rejected(body)
    assert error.fields["field"] == field, error.message
    assert error.fields.get("taskReferenceName") == ref, error.message
    assert error.status_code == 400
    return error


# --- defaults --------------------------------------------------------------


def test_it_fills_in_defaults():
    out = normalize_workflow({"name": "wf", "tasks": [{"name": "work", "taskReferenceName": "a"}]})
    assert out == {
        "name": "wf",
        "description": "",
        "tasks": [
            {"name": "work", "taskReferenceName": "a", "type": "SIMPLE", "inputParameters": {}, "optional": False}
        ],
        "inputParameters": [],
        "outputParameters": {},
        "variables": {},
        "failureWorkflow": None,
        "timeoutSeconds": 0,
        "timeoutPolicy": "TIME_OUT_WF",
        "maxConcurrentTasks": 0,
        "maxConcurrentExecutions": 0,
        "rateLimitConfig": None,
    }


def test_it_fills_in_defaults_on_nested_tasks():
    out = normalize_workflow(
        wf({"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [[simple("a")]]})
    )
    assert out["tasks"][0]["forkTasks"][0][0] == {
        "name": "work",
        "taskReferenceName": "a",
        "type": "SIMPLE",
        "inputParameters": {},
        "optional": False,
    }


def test_it_keeps_given_values_over_defaults():
    out = normalize_workflow(wf(simple("a", optional=True, inputParameters={"x": 1}, description="d")))
    assert out["tasks"][0] == {
        "name": "work",
        "taskReferenceName": "a",
        "type": "SIMPLE",
        "inputParameters": {"x": 1},
        "optional": True,
        "description": "d",
    }


def test_it_drops_read_only_fields_so_a_fetched_body_can_be_posted_back():
    body = wf(simple("a"), version=3, published=True, createdAt="2026-01-01T00:00:00Z", publishedAt=None)
    out = normalize_workflow(body)
    assert not {"version", "published", "createdAt", "publishedAt"} & set(out)


def test_it_is_idempotent_on_its_own_output():
    once = normalize_workflow(
        wf(
            simple("a", inputParameters={"x": "${workflow.input.x}"}),
            {
                "name": "dyn",
                "taskReferenceName": "dyn",
                "type": "FORK_JOIN_DYNAMIC",
                "inputParameters": {"items": [1, 2]},
                "forkTask": simple("each", inputParameters={"i": "${item}"}),
            },
            {
                "name": "sw",
                "taskReferenceName": "sw",
                "type": "SWITCH",
                "expression": "k",
                "inputParameters": {"k": "${a.output.k}"},
                "decisionCases": {"x": [simple("b")]},
            },
        )
    )
    assert normalize_workflow(once) == once


# --- structural nesting depth ----------------------------------------------


def _wrap(kind: str, inner: dict, ref: str) -> tuple[dict, str]:
    """A container task of ``kind`` holding ``inner``; returns (task, path from the container to inner)."""
    if kind == "FORK_JOIN":
        return {"name": "c", "taskReferenceName": ref, "type": kind, "forkTasks": [[inner]]}, ".forkTasks[0][0]"
    if kind == "DO_WHILE":
        return {
            "name": "c",
            "taskReferenceName": ref,
            "type": kind,
            "loopCondition": "false",
            "maxIterations": 1,
            "loopOver": [inner],
        }, ".loopOver[0]"
    if kind == "SWITCH":
        return {
            "name": "c",
            "taskReferenceName": ref,
            "type": kind,
            "expression": "k",
            "inputParameters": {"k": 1},
            "decisionCases": {"one": [inner]},
        }, ".decisionCases.one[0]"
    if kind == "SWITCH_DEFAULT":
        return {
            "name": "c",
            "taskReferenceName": ref,
            "type": "SWITCH",
            "expression": "k",
            "inputParameters": {"k": 1},
            "defaultCase": [inner],
        }, ".defaultCase[0]"
    assert kind == "FORK_JOIN_DYNAMIC"
    return {
        "name": "c",
        "taskReferenceName": ref,
        "type": kind,
        "inputParameters": {"items": [1]},
        "forkTask": inner,
    }, ".forkTask"


def nested(depth: int, kinds: list[str]) -> tuple[dict, list[tuple[str, str]]]:
    """A workflow whose deepest task sits at ``depth`` (a top-level task is at depth 1),
    cycling through container ``kinds``; returns (body, [(field path, ref)] from the top down)."""
    task: dict = simple("leaf")
    suffixes: list[str] = []
    for level in range(depth - 1):
        task, suffix = _wrap(kinds[level % len(kinds)], task, f"c{level}")
        suffixes.append(suffix)
    suffixes.reverse()
    refs = [f"c{level}" for level in reversed(range(depth - 1))] + ["leaf"]
    paths = ["tasks[0]" + "".join(suffixes[:level]) for level in range(depth)]
    return wf(task), list(zip(paths, refs, strict=False))


CONTAINER_MIXES = [
    ["FORK_JOIN"],
    ["DO_WHILE"],
    ["SWITCH"],
    ["SWITCH_DEFAULT"],
    ["FORK_JOIN_DYNAMIC"],
    ["FORK_JOIN", "DO_WHILE", "SWITCH", "FORK_JOIN_DYNAMIC"],
]


@pytest.mark.parametrize("kinds", CONTAINER_MIXES, ids="+".join)
@pytest.mark.parametrize("depth", [1, 2, 15, 16])
def test_it_accepts_nesting_up_to_depth_16(kinds, depth):
    body, _ = nested(depth, kinds)
    normalize_workflow(body)


@pytest.mark.parametrize("kinds", CONTAINER_MIXES, ids="+".join)
@pytest.mark.parametrize("depth", [17, 18, 40])
def test_it_rejects_nesting_deeper_than_16(kinds, depth):
    body, levels = nested(depth, kinds)
    # The error names the first task found too deep: the one at depth 17.
    field, ref = levels[16]
    error = assert_rejected(body, field, ref)
    assert "nesting depth exceeds 16" in error.message


def test_it_counts_depth_per_branch_not_per_task_count():
    # Many tasks side by side at depth 16 are fine: depth is nesting, not size.
    body, _ = nested(16, ["FORK_JOIN"])
    body["tasks"] += [simple(f"side{i}") for i in range(50)]
    normalize_workflow(body)


# --- reference names -------------------------------------------------------


def _fork(ref: str, *branches: list[dict]) -> dict:
    return {"name": "f", "taskReferenceName": ref, "type": "FORK_JOIN", "forkTasks": list(branches)}


def _loop(ref: str, *tasks: dict) -> dict:
    return {
        "name": "l",
        "taskReferenceName": ref,
        "type": "DO_WHILE",
        "loopCondition": "false",
        "maxIterations": 3,
        "loopOver": list(tasks),
    }


def _switch(ref: str, cases: dict, default: list | None = None) -> dict:
    task = {
        "name": "s",
        "taskReferenceName": ref,
        "type": "SWITCH",
        "expression": "k",
        "inputParameters": {"k": "x"},
        "decisionCases": cases,
    }
    if default is not None:
        task["defaultCase"] = default
    return task


def _dynamic(ref: str, template: dict) -> dict:
    return {
        "name": "d",
        "taskReferenceName": ref,
        "type": "FORK_JOIN_DYNAMIC",
        "inputParameters": {"items": "${workflow.input.list}"},
        "forkTask": template,
    }


DUPLICATES = [
    ("top level", wf(simple("a"), simple("a")), "tasks[1].taskReferenceName"),
    ("same as a fork", wf(_fork("a", [simple("a")])), "tasks[0].forkTasks[0][0].taskReferenceName"),
    (
        "across fork branches",
        wf(_fork("f", [simple("a")], [simple("a")])),
        "tasks[0].forkTasks[1][0].taskReferenceName",
    ),
    ("fork branch vs top", wf(_fork("f", [simple("b"), simple("a")]), simple("a")), "tasks[1].taskReferenceName"),
    ("inside a loop", wf(simple("a"), _loop("l", simple("b"), simple("a"))), "tasks[1].loopOver[1].taskReferenceName"),
    (
        "switch case",
        wf(simple("a"), _switch("s", {"x": [simple("a")]})),
        "tasks[1].decisionCases.x[0].taskReferenceName",
    ),
    (
        "switch cases",
        wf(_switch("s", {"x": [simple("a")], "y": [simple("a")]})),
        "tasks[0].decisionCases.y[0].taskReferenceName",
    ),
    ("switch default", wf(simple("a"), _switch("s", {}, [simple("a")])), "tasks[1].defaultCase[0].taskReferenceName"),
    ("dynamic template", wf(simple("a"), _dynamic("d", simple("a"))), "tasks[1].forkTask.taskReferenceName"),
    (
        "deep",
        wf(simple("a"), _fork("f", [_loop("l", _dynamic("d", simple("a")))])),
        "tasks[1].forkTasks[0][0].loopOver[0].forkTask.taskReferenceName",
    ),
]


@pytest.mark.parametrize("body,field", [case[1:] for case in DUPLICATES], ids=[case[0] for case in DUPLICATES])
def test_it_rejects_duplicate_reference_names(body, field):
    error = assert_rejected(body, field, "a")
    assert "already used" in error.message


BAD_REFS = [None, "", 5, "1abc", "a b", "a.b", "a$", "a\n", " a", "x" * 129, "workflow", "item", "index"]


@pytest.mark.parametrize("ref", BAD_REFS)
def test_it_rejects_bad_reference_names(ref):
    task = {"name": "work"} if ref is None else {"name": "work", "taskReferenceName": ref}
    assert_rejected(wf(simple("ok"), task), "tasks[1].taskReferenceName", None)


@pytest.mark.parametrize("ref", ["a", "_a", "A-b_c9", "x" * 128])
def test_it_accepts_good_reference_names(ref):
    normalize_workflow(wf(simple(ref)))


# --- common task fields ----------------------------------------------------

COMMON_REJECTIONS = [
    ("unknown type", simple("t", type="NOPE"), "tasks[0].type"),
    ("lowercase type", simple("t", type="simple"), "tasks[0].type"),
    ("type not a string", simple("t", type=5), "tasks[0].type"),
    ("no name", {"taskReferenceName": "t"}, "tasks[0].name"),
    ("bad name", simple("t", name="bad name"), "tasks[0].name"),
    ("long name", simple("t", name="n" * 129), "tasks[0].name"),
    ("inputs not object", simple("t", inputParameters=[1]), "tasks[0].inputParameters"),
    ("optional not bool", simple("t", optional="yes"), "tasks[0].optional"),
    ("unknown field", simple("t", retries=3), "tasks[0].retries"),
    ("other type's field", simple("t", forkTasks=[[simple("u")]]), "tasks[0].forkTasks"),
    ("loop field on fork", _fork("t", [simple("u")]) | {"maxIterations": 3}, "tasks[0].maxIterations"),
]


@pytest.mark.parametrize("task,field", [c[1:] for c in COMMON_REJECTIONS], ids=[c[0] for c in COMMON_REJECTIONS])
def test_it_rejects_bad_common_fields(task, field):
    assert_rejected(wf(task), field, "t")


def test_it_names_the_unknown_type_and_lists_known_ones():
    error = assert_rejected(wf(simple("ok"), simple("t", type="TELEPORT")), "tasks[1].type", "t")
    assert "TELEPORT" in error.message and "SIMPLE" in error.message


def test_it_rejects_a_task_that_is_not_an_object():
    assert_rejected(wf(simple("a"), "b"), "tasks[1]", None)


@pytest.mark.parametrize("tasks", [None, [], "x", {"a": 1}])
def test_it_requires_a_non_empty_task_list(tasks):
    body = {"name": "wf"} if tasks is None else {"name": "wf", "tasks": tasks}
    assert_rejected(body, "tasks", None)


@pytest.mark.parametrize("body", [[], "wf", 5, None])
def test_it_rejects_a_body_that_is_not_an_object(body):
    assert_rejected(body, "body", None)


# --- each type's own fields ------------------------------------------------


def typed(task_type: str, ref: str = "t", **fields: Any) -> dict:
    return {"name": "work", "taskReferenceName": ref, "type": task_type, **fields}


def _sw(**fields: Any) -> dict:
    return typed("SWITCH", **{"expression": "k", "inputParameters": {"k": "${workflow.input.k}"}, **fields})


def _dw(**fields: Any) -> dict:
    return typed("DO_WHILE", **{"loopCondition": "$.i < 3", "maxIterations": 3, "loopOver": [simple("body")], **fields})


def _dyn(**fields: Any) -> dict:
    return typed("FORK_JOIN_DYNAMIC", **{"inputParameters": {"items": [1, 2]}, "forkTask": simple("each"), **fields})


def _without(task: dict, key: str) -> dict:
    return {k: v for k, v in task.items() if k != key}


def _inputs(task_type: str, **inputs: Any) -> dict:
    return typed(task_type, inputParameters=inputs)


HTTP_OK = {"uri": "https://example.com/x", "method": "POST"}
GRPC_OK = {"host": "localhost:50051", "service": "pkg.Svc", "method": "Call"}

TYPE_ACCEPTED = [
    ("switch value-param", _sw(decisionCases={"a": [simple("x")]}, defaultCase=[simple("y")])),
    ("switch javascript", _sw(evaluatorType="javascript", expression="$.k > 1 ? 'big' : 'small'", inputParameters={})),
    ("switch empty branches", _sw(decisionCases={"a": []}, defaultCase=[])),
    ("switch no cases", _sw()),
    ("fork", typed("FORK_JOIN", forkTasks=[[simple("x")], [simple("y"), simple("z")]])),
    ("fork concurrency 1", typed("FORK_JOIN", forkTasks=[[simple("x")]], maxConcurrency=1)),
    ("fork concurrency 16", typed("FORK_JOIN", forkTasks=[[simple("x")]], maxConcurrency=16)),
    ("join", typed("JOIN", joinOn=[])),
    ("dynamic", _dyn()),
    ("dynamic items expression", _dyn(inputParameters={"items": "${workflow.input.list}"})),
    ("dynamic concurrency 1", _dyn(maxConcurrency=1)),
    ("dynamic concurrency 16", _dyn(maxConcurrency=16)),
    ("loop 1", _dw(maxIterations=1)),
    ("loop 1000", _dw(maxIterations=1000)),
    ("sub no version", typed("SUB_WORKFLOW", subWorkflowParam={"name": "child"})),
    ("sub version", typed("SUB_WORKFLOW", subWorkflowParam={"name": "child", "version": 2})),
    ("sub null version", typed("SUB_WORKFLOW", subWorkflowParam={"name": "child", "version": None})),
    ("terminate default", typed("TERMINATE")),
    ("terminate completed", _inputs("TERMINATE", terminationStatus="COMPLETED")),
    ("terminate failed", _inputs("TERMINATE", terminationStatus="FAILED", terminationReason="r")),
    ("terminate terminated", _inputs("TERMINATE", terminationStatus="TERMINATED")),
    ("terminate expression", _inputs("TERMINATE", terminationStatus="${workflow.input.s}")),
    ("set variable", _inputs("SET_VARIABLE", x=1)),
    ("wait 30s", _inputs("WAIT", duration="30s")),
    ("wait 5m", _inputs("WAIT", duration="5m")),
    ("wait 2h", _inputs("WAIT", duration="2h")),
    ("wait 1d", _inputs("WAIT", duration="1d")),
    ("wait seconds int", _inputs("WAIT", duration=30)),
    ("wait seconds float", _inputs("WAIT", duration=1.5)),
    ("wait seconds string", _inputs("WAIT", duration="10")),
    ("wait zero", _inputs("WAIT", duration=0)),
    ("wait a year", _inputs("WAIT", duration="365d")),
    ("wait duration expression", _inputs("WAIT", duration="${workflow.input.d}")),
    ("wait until Z", _inputs("WAIT", until="2026-12-01T09:00:00Z")),
    ("wait until offset", _inputs("WAIT", until="2026-12-01T09:00:00+02:00")),
    ("wait until naive", _inputs("WAIT", until="2026-12-01T09:00:00")),
    ("wait until expression", _inputs("WAIT", until="${workflow.input.at}")),
    ("http", _inputs("HTTP", http_request=HTTP_OK)),
    ("http default method", _inputs("HTTP", http_request={"uri": "https://example.com"})),
    ("http each method", _inputs("HTTP", http_request={"uri": "u", "method": "DELETE"})),
    ("http method expression", _inputs("HTTP", http_request={"uri": "u", "method": "${workflow.input.m}"})),
    ("http request expression", _inputs("HTTP", http_request="${workflow.input.req}")),
    ("http uri expression", _inputs("HTTP", http_request={"uri": "${workflow.input.url}"})),
    ("http poll", _inputs("HTTP_POLL", http_request=HTTP_OK, terminationCondition="$.response.statusCode == 200")),
    ("webhook", _inputs("WEBHOOK", url="https://example.com/hook", payload={})),
    ("grpc", _inputs("GRPC", grpc_request={**GRPC_OK, "request": {"a": 1}, "deadlineSeconds": 5})),
    ("grpc expression", _inputs("GRPC", grpc_request="${workflow.input.req}")),
    ("inline", _inputs("INLINE", evaluatorType="javascript", expression="$.a + 1", a=1)),
    ("inline default evaluator", _inputs("INLINE", expression="1")),
    ("jq", _inputs("JSON_JQ_TRANSFORM", queryExpression=".a", a=1)),
    ("webhook wait", _inputs("WAIT_FOR_WEBHOOK", matches={"$.id": "${workflow.input.id}"})),
    ("webhook wait empty", _inputs("WAIT_FOR_WEBHOOK", matches={})),
    ("human", _inputs("HUMAN", form={"fields": []})),
    ("pull default", typed("PULL_WORKFLOW_MESSAGES")),
    ("pull 1", _inputs("PULL_WORKFLOW_MESSAGES", batchSize=1)),
    ("pull 100", _inputs("PULL_WORKFLOW_MESSAGES", batchSize=100)),
    ("pull expression", _inputs("PULL_WORKFLOW_MESSAGES", batchSize="${workflow.input.n}")),
]


@pytest.mark.parametrize("task", [c[1] for c in TYPE_ACCEPTED], ids=[c[0] for c in TYPE_ACCEPTED])
def test_it_accepts_each_types_valid_fields(task):
    out = normalize_workflow(wf(task))
    assert out["tasks"][0]["type"] == task["type"]


TYPE_REJECTED = [
    # SWITCH
    ("switch no expression", _without(_sw(), "expression"), "expression"),
    ("switch blank expression", _sw(expression="  "), "expression"),
    ("switch expression not str", _sw(expression=5), "expression"),
    ("switch value-param names missing input", _sw(expression="other"), "expression"),
    ("switch value-param no inputs", _without(_sw(), "inputParameters"), "expression"),
    ("switch bad evaluator", _sw(evaluatorType="python"), "evaluatorType"),
    ("switch cases not object", _sw(decisionCases=[[simple("x")]]), "decisionCases"),
    ("switch case not list", _sw(decisionCases={"a": simple("x")}), "decisionCases.a"),
    ("switch default not list", _sw(defaultCase="x"), "defaultCase"),
    # FORK_JOIN
    ("fork no branches", typed("FORK_JOIN"), "forkTasks"),
    ("fork empty", typed("FORK_JOIN", forkTasks=[]), "forkTasks"),
    ("fork not list", typed("FORK_JOIN", forkTasks={"a": []}), "forkTasks"),
    ("fork empty branch", typed("FORK_JOIN", forkTasks=[[simple("x")], []]), "forkTasks[1]"),
    ("fork branch not list", typed("FORK_JOIN", forkTasks=[simple("x")]), "forkTasks[0]"),
    ("fork concurrency 0", typed("FORK_JOIN", forkTasks=[[simple("x")]], maxConcurrency=0), "maxConcurrency"),
    ("fork concurrency 17", typed("FORK_JOIN", forkTasks=[[simple("x")]], maxConcurrency=17), "maxConcurrency"),
    ("fork concurrency -1", typed("FORK_JOIN", forkTasks=[[simple("x")]], maxConcurrency=-1), "maxConcurrency"),
    ("fork concurrency str", typed("FORK_JOIN", forkTasks=[[simple("x")]], maxConcurrency="4"), "maxConcurrency"),
    ("fork concurrency float", typed("FORK_JOIN", forkTasks=[[simple("x")]], maxConcurrency=2.5), "maxConcurrency"),
    ("fork concurrency bool", typed("FORK_JOIN", forkTasks=[[simple("x")]], maxConcurrency=True), "maxConcurrency"),
    ("fork concurrency null", typed("FORK_JOIN", forkTasks=[[simple("x")]], maxConcurrency=None), "maxConcurrency"),
    # JOIN
    ("join not list", typed("JOIN", joinOn="a"), "joinOn"),
    ("join not strings", typed("JOIN", joinOn=[1]), "joinOn"),
    ("join unknown ref", typed("JOIN", joinOn=["ghost"]), "joinOn"),
    # FORK_JOIN_DYNAMIC
    ("dynamic no template", _without(_dyn(), "forkTask"), "forkTask"),
    ("dynamic template not object", _dyn(forkTask=[simple("each")]), "forkTask"),
    ("dynamic no items", _dyn(inputParameters={}), "inputParameters.items"),
    ("dynamic concurrency 0", _dyn(maxConcurrency=0), "maxConcurrency"),
    ("dynamic concurrency 17", _dyn(maxConcurrency=17), "maxConcurrency"),
    ("dynamic concurrency str", _dyn(maxConcurrency="4"), "maxConcurrency"),
    # DO_WHILE
    ("loop iterations 0", _dw(maxIterations=0), "maxIterations"),
    ("loop iterations 1001", _dw(maxIterations=1001), "maxIterations"),
    ("loop iterations missing", _without(_dw(), "maxIterations"), "maxIterations"),
    ("loop iterations str", _dw(maxIterations="10"), "maxIterations"),
    ("loop iterations float", _dw(maxIterations=2.5), "maxIterations"),
    ("loop iterations whole float", _dw(maxIterations=10.0), "maxIterations"),
    ("loop iterations bool", _dw(maxIterations=True), "maxIterations"),
    ("loop iterations null", _dw(maxIterations=None), "maxIterations"),
    ("loop iterations negative", _dw(maxIterations=-5), "maxIterations"),
    ("loop no condition", _without(_dw(), "loopCondition"), "loopCondition"),
    ("loop blank condition", _dw(loopCondition=" "), "loopCondition"),
    ("loop condition not str", _dw(loopCondition=True), "loopCondition"),
    ("loop no body", _without(_dw(), "loopOver"), "loopOver"),
    ("loop empty body", _dw(loopOver=[]), "loopOver"),
    ("loop body not list", _dw(loopOver=simple("x")), "loopOver"),
    # SUB_WORKFLOW
    ("sub no param", typed("SUB_WORKFLOW"), "subWorkflowParam.name"),
    ("sub param not object", typed("SUB_WORKFLOW", subWorkflowParam="child"), "subWorkflowParam.name"),
    ("sub no name", typed("SUB_WORKFLOW", subWorkflowParam={"version": 1}), "subWorkflowParam.name"),
    ("sub bad name", typed("SUB_WORKFLOW", subWorkflowParam={"name": "bad name"}), "subWorkflowParam.name"),
    ("sub unknown field", typed("SUB_WORKFLOW", subWorkflowParam={"name": "c", "input": {}}), "subWorkflowParam.input"),
    ("sub version 0", typed("SUB_WORKFLOW", subWorkflowParam={"name": "c", "version": 0}), "subWorkflowParam.version"),
    (
        "sub version str",
        typed("SUB_WORKFLOW", subWorkflowParam={"name": "c", "version": "1"}),
        "subWorkflowParam.version",
    ),
    (
        "sub version huge",
        typed("SUB_WORKFLOW", subWorkflowParam={"name": "c", "version": 2**31}),
        "subWorkflowParam.version",
    ),
    # WAIT
    ("wait both", _inputs("WAIT", duration="5s", until="2026-12-01T09:00:00Z"), "inputParameters.duration"),
    ("wait bad unit", _inputs("WAIT", duration="5x"), "inputParameters.duration"),
    ("wait two units", _inputs("WAIT", duration="1h30m"), "inputParameters.duration"),
    ("wait negative", _inputs("WAIT", duration=-1), "inputParameters.duration"),
    ("wait negative string", _inputs("WAIT", duration="-1s"), "inputParameters.duration"),
    ("wait over a year", _inputs("WAIT", duration="366d"), "inputParameters.duration"),
    ("wait not a number", _inputs("WAIT", duration=float("nan")), "inputParameters.duration"),
    ("wait infinite", _inputs("WAIT", duration=float("inf")), "inputParameters.duration"),
    ("wait bool", _inputs("WAIT", duration=True), "inputParameters.duration"),
    ("wait list", _inputs("WAIT", duration=[5]), "inputParameters.duration"),
    ("wait until words", _inputs("WAIT", until="tomorrow"), "inputParameters.until"),
    ("wait until number", _inputs("WAIT", until=1767225600), "inputParameters.until"),
    # HTTP / HTTP_POLL / WEBHOOK
    ("http no request", typed("HTTP"), "inputParameters.http_request"),
    ("http request not object", _inputs("HTTP", http_request="https://x"), "inputParameters.http_request.uri"),
    ("http no uri", _inputs("HTTP", http_request={"method": "GET"}), "inputParameters.http_request.uri"),
    ("http empty uri", _inputs("HTTP", http_request={"uri": ""}), "inputParameters.http_request.uri"),
    ("http uri not str", _inputs("HTTP", http_request={"uri": 5}), "inputParameters.http_request.uri"),
    (
        "http bad method",
        _inputs("HTTP", http_request={"uri": "u", "method": "FETCH"}),
        "inputParameters.http_request.method",
    ),
    (
        "http lowercase method",
        _inputs("HTTP", http_request={"uri": "u", "method": "get"}),
        "inputParameters.http_request.method",
    ),
    ("http poll no condition", _inputs("HTTP_POLL", http_request=HTTP_OK), "inputParameters.terminationCondition"),
    (
        "http poll no uri",
        _inputs("HTTP_POLL", http_request={}, terminationCondition="true"),
        "inputParameters.http_request.uri",
    ),
    ("webhook no url", _inputs("WEBHOOK", payload={}), "inputParameters.url"),
    # GRPC
    ("grpc no request", typed("GRPC"), "inputParameters.grpc_request"),
    ("grpc request not object", _inputs("GRPC", grpc_request=["h"]), "inputParameters.grpc_request"),
    ("grpc no host", _inputs("GRPC", grpc_request=_without(GRPC_OK, "host")), "inputParameters.grpc_request.host"),
    (
        "grpc no service",
        _inputs("GRPC", grpc_request=_without(GRPC_OK, "service")),
        "inputParameters.grpc_request.service",
    ),
    (
        "grpc no method",
        _inputs("GRPC", grpc_request=_without(GRPC_OK, "method")),
        "inputParameters.grpc_request.method",
    ),
    ("grpc empty host", _inputs("GRPC", grpc_request={**GRPC_OK, "host": ""}), "inputParameters.grpc_request.host"),
    # INLINE
    ("inline no expression", _inputs("INLINE", evaluatorType="javascript"), "inputParameters.expression"),
    ("inline blank expression", _inputs("INLINE", expression=" "), "inputParameters.expression"),
    ("inline expression not str", _inputs("INLINE", expression=5), "inputParameters.expression"),
    (
        "inline bad evaluator",
        _inputs("INLINE", evaluatorType="python", expression="1"),
        "inputParameters.evaluatorType",
    ),
    # JSON_JQ_TRANSFORM
    ("jq no query", _inputs("JSON_JQ_TRANSFORM", a=1), "inputParameters.queryExpression"),
    ("jq query not str", _inputs("JSON_JQ_TRANSFORM", queryExpression=5), "inputParameters.queryExpression"),
    ("jq blank query", _inputs("JSON_JQ_TRANSFORM", queryExpression=""), "inputParameters.queryExpression"),
    # WAIT_FOR_WEBHOOK
    ("webhook wait no matches", typed("WAIT_FOR_WEBHOOK"), "inputParameters.matches"),
    ("webhook wait matches list", _inputs("WAIT_FOR_WEBHOOK", matches=[["$.id", 1]]), "inputParameters.matches"),
    ("webhook wait matches str", _inputs("WAIT_FOR_WEBHOOK", matches="$.id"), "inputParameters.matches"),
    # TERMINATE
    ("terminate bad status", _inputs("TERMINATE", terminationStatus="DONE"), "inputParameters.terminationStatus"),
    ("terminate lowercase", _inputs("TERMINATE", terminationStatus="failed"), "inputParameters.terminationStatus"),
    ("terminate not str", _inputs("TERMINATE", terminationStatus=1), "inputParameters.terminationStatus"),
    # PULL_WORKFLOW_MESSAGES
    ("pull 0", _inputs("PULL_WORKFLOW_MESSAGES", batchSize=0), "inputParameters.batchSize"),
    ("pull 101", _inputs("PULL_WORKFLOW_MESSAGES", batchSize=101), "inputParameters.batchSize"),
    ("pull str", _inputs("PULL_WORKFLOW_MESSAGES", batchSize="5"), "inputParameters.batchSize"),
    ("pull bool", _inputs("PULL_WORKFLOW_MESSAGES", batchSize=True), "inputParameters.batchSize"),
    ("pull float", _inputs("PULL_WORKFLOW_MESSAGES", batchSize=2.5), "inputParameters.batchSize"),
]


@pytest.mark.parametrize("task,field", [c[1:] for c in TYPE_REJECTED], ids=[c[0] for c in TYPE_REJECTED])
def test_it_rejects_each_types_bad_fields(task, field):
    assert_rejected(wf(simple("first"), task), f"tasks[1].{field}", "t")


@pytest.mark.parametrize("task,field", [c[1:] for c in TYPE_REJECTED], ids=[c[0] for c in TYPE_REJECTED])
def test_it_names_the_full_path_of_a_nested_bad_field(task, field):
    body = wf(simple("first"), _fork("outer", [simple("side")], [_loop("loop", task)]))
    assert_rejected(body, f"tasks[1].forkTasks[1][0].loopOver[0].{field}", "t")


def test_it_names_a_loop_limit_inside_a_fork_by_its_full_path():
    body = wf(simple("first"), _fork("f", [_dw(maxIterations=1001)]))
    error = assert_rejected(body, "tasks[1].forkTasks[0][0].maxIterations", "t")
    assert "1–1000" in error.message


@pytest.mark.parametrize("given,expected", [(None, 4), (1, 1), (16, 16), (7, 7)])
def test_it_defaults_dynamic_fork_concurrency_to_4(given, expected):
    task = _dyn() if given is None else _dyn(maxConcurrency=given)
    assert normalize_workflow(wf(task))["tasks"][0]["maxConcurrency"] == expected


def test_it_leaves_fork_concurrency_unset_when_absent():
    out = normalize_workflow(wf(typed("FORK_JOIN", forkTasks=[[simple("x")]])))
    assert "maxConcurrency" not in out["tasks"][0]


def test_it_defaults_switch_evaluator_and_default_case():
    out = normalize_workflow(wf(_sw(decisionCases={"a": [simple("x")]})))["tasks"][0]
    assert (out["evaluatorType"], out["defaultCase"]) == ("value-param", [])


def test_it_stringifies_switch_case_keys():
    # YAML turns `1:` into an integer key; case values are matched as strings.
    out = normalize_workflow(wf(_sw(decisionCases={1: [simple("x")], "two": [simple("y")]})))["tasks"][0]
    assert sorted(out["decisionCases"]) == ["1", "two"]


def test_it_normalises_sub_workflow_version_to_null_when_absent():
    out = normalize_workflow(wf(typed("SUB_WORKFLOW", subWorkflowParam={"name": "child"})))
    assert out["tasks"][0]["subWorkflowParam"] == {"name": "child", "version": None}


# --- workflow-level fields -------------------------------------------------

WORKFLOW_ACCEPTED = [
    ("description", {"description": "hello"}, "description", "hello"),
    ("inputs", {"inputParameters": ["a", "b"]}, "inputParameters", ["a", "b"]),
    ("outputs", {"outputParameters": {"r": "${a.output.x}"}}, "outputParameters", {"r": "${a.output.x}"}),
    ("variables", {"variables": {"n": 1}}, "variables", {"n": 1}),
    ("failure workflow", {"failureWorkflow": "cleanup"}, "failureWorkflow", "cleanup"),
    ("failure workflow null", {"failureWorkflow": None}, "failureWorkflow", None),
    ("timeout 0", {"timeoutSeconds": 0}, "timeoutSeconds", 0),
    ("timeout fraction", {"timeoutSeconds": 1.5}, "timeoutSeconds", 1.5),
    ("timeout a year", {"timeoutSeconds": 31_536_000}, "timeoutSeconds", 31_536_000),
    ("policy alert", {"timeoutPolicy": "ALERT_ONLY"}, "timeoutPolicy", "ALERT_ONLY"),
    ("policy wf", {"timeoutPolicy": "TIME_OUT_WF"}, "timeoutPolicy", "TIME_OUT_WF"),
    ("max tasks", {"maxConcurrentTasks": 5}, "maxConcurrentTasks", 5),
    ("max executions", {"maxConcurrentExecutions": 2}, "maxConcurrentExecutions", 2),
    (
        "rate limit",
        {"rateLimitConfig": {"rateLimitKey": "${workflow.input.tenantId}", "concurrentExecLimit": 1}},
        "rateLimitConfig",
        {"rateLimitKey": "${workflow.input.tenantId}", "concurrentExecLimit": 1},
    ),
    (
        "rate limit literal key",
        {"rateLimitConfig": {"rateLimitKey": "all", "concurrentExecLimit": 3}},
        "rateLimitConfig",
        {"rateLimitKey": "all", "concurrentExecLimit": 3},
    ),
    ("rate limit null", {"rateLimitConfig": None}, "rateLimitConfig", None),
]


@pytest.mark.parametrize("fields,key,value", [c[1:] for c in WORKFLOW_ACCEPTED], ids=[c[0] for c in WORKFLOW_ACCEPTED])
def test_it_accepts_workflow_level_fields(fields, key, value):
    assert normalize_workflow(wf(simple("a"), **fields))[key] == value


WORKFLOW_REJECTED = [
    ("no name", {"name": None}, "name"),
    ("bad name", {"name": "bad name"}, "name"),
    ("name not str", {"name": 5}, "name"),
    ("long name", {"name": "w" * 129}, "name"),
    ("unknown field", {"retries": 3}, "retries"),
    ("schemaVersion", {"schemaVersion": 2}, "schemaVersion"),
    ("description not str", {"description": 5}, "description"),
    ("inputs not list", {"inputParameters": {"a": 1}}, "inputParameters"),
    ("inputs not strings", {"inputParameters": [1]}, "inputParameters"),
    ("outputs not object", {"outputParameters": ["x"]}, "outputParameters"),
    ("variables not object", {"variables": [1]}, "variables"),
    ("failure workflow bad name", {"failureWorkflow": "bad name"}, "failureWorkflow"),
    ("failure workflow not str", {"failureWorkflow": 5}, "failureWorkflow"),
    ("timeout negative", {"timeoutSeconds": -1}, "timeoutSeconds"),
    ("timeout string", {"timeoutSeconds": "10"}, "timeoutSeconds"),
    ("timeout bool", {"timeoutSeconds": True}, "timeoutSeconds"),
    ("timeout over a year", {"timeoutSeconds": 31_536_001}, "timeoutSeconds"),
    ("timeout nan", {"timeoutSeconds": float("nan")}, "timeoutSeconds"),
    ("policy retry", {"timeoutPolicy": "RETRY"}, "timeoutPolicy"),
    ("policy unknown", {"timeoutPolicy": "NEVER"}, "timeoutPolicy"),
    ("max tasks negative", {"maxConcurrentTasks": -1}, "maxConcurrentTasks"),
    ("max tasks float", {"maxConcurrentTasks": 1.5}, "maxConcurrentTasks"),
    ("max tasks str", {"maxConcurrentTasks": "2"}, "maxConcurrentTasks"),
    ("max tasks bool", {"maxConcurrentTasks": True}, "maxConcurrentTasks"),
    ("max executions negative", {"maxConcurrentExecutions": -1}, "maxConcurrentExecutions"),
    ("max executions huge", {"maxConcurrentExecutions": 10**12}, "maxConcurrentExecutions"),
    ("rate limit not object", {"rateLimitConfig": "tenant"}, "rateLimitConfig"),
    ("rate limit empty", {"rateLimitConfig": {}}, "rateLimitConfig.rateLimitKey"),
    (
        "rate limit blank key",
        {"rateLimitConfig": {"rateLimitKey": "", "concurrentExecLimit": 1}},
        "rateLimitConfig.rateLimitKey",
    ),
    ("rate limit no limit", {"rateLimitConfig": {"rateLimitKey": "k"}}, "rateLimitConfig.concurrentExecLimit"),
    (
        "rate limit 0",
        {"rateLimitConfig": {"rateLimitKey": "k", "concurrentExecLimit": 0}},
        "rateLimitConfig.concurrentExecLimit",
    ),
    (
        "rate limit str",
        {"rateLimitConfig": {"rateLimitKey": "k", "concurrentExecLimit": "1"}},
        "rateLimitConfig.concurrentExecLimit",
    ),
    (
        "rate limit extra",
        {"rateLimitConfig": {"rateLimitKey": "k", "concurrentExecLimit": 1, "per": 1}},
        "rateLimitConfig.per",
    ),
    (
        "rate limit bad expression",
        {"rateLimitConfig": {"rateLimitKey": "${ghost.output.x}", "concurrentExecLimit": 1}},
        "rateLimitConfig.rateLimitKey",
    ),
    ("output bad expression", {"outputParameters": {"r": "${workflow.nope}"}}, "outputParameters.r"),
    ("output unknown ref", {"outputParameters": {"r": {"deep": ["${ghost.output}"]}}}, "outputParameters.r.deep[0]"),
    ("output item", {"outputParameters": {"r": "${item}"}}, "outputParameters.r"),
]


@pytest.mark.parametrize("fields,field", [c[1:] for c in WORKFLOW_REJECTED], ids=[c[0] for c in WORKFLOW_REJECTED])
def test_it_rejects_bad_workflow_level_fields(fields, field):
    assert_rejected(wf(simple("a"), **fields), field, None)


# --- per-task policy overrides ---------------------------------------------

POLICY_ACCEPTED = [
    {"retryCount": 0},
    {"retryCount": 1},
    {"retryCount": 100},
    {"retryLogic": "FIXED", "retryDelaySeconds": 2.5},
    {"backoffScaleFactor": 3, "maxRetryDelaySeconds": 60},
    {"jitter": 0, "retryBudget": 0.5},
    {"nonRetryableErrors": ["BadInput"]},
    {"scheduleToStartTimeout": 10, "startToCloseTimeout": 30, "heartbeatTimeout": 5},
    {"timeoutSeconds": 30, "timeoutPolicy": "TIME_OUT_WF"},
]


@pytest.mark.parametrize("overrides", POLICY_ACCEPTED, ids=lambda o: ",".join(o))
def test_it_keeps_per_task_policy_overrides(overrides):
    out = normalize_workflow(wf(simple("a", **overrides)))["tasks"][0]
    assert {key: out[key] for key in overrides} == overrides


def test_it_adds_no_policy_fields_when_a_task_overrides_none():
    out = normalize_workflow(wf(simple("a")))["tasks"][0]
    assert "retryCount" not in out and "timeoutSeconds" not in out


POLICY_REJECTED = [
    ({"retryCount": 101}, "retryCount"),
    ({"retryCount": -1}, "retryCount"),
    ({"retryCount": "1"}, "retryCount"),
    ({"retryCount": True}, "retryCount"),
    ({"retryLogic": "SOMETIMES"}, "retryLogic"),
    ({"retryDelaySeconds": -1}, "retryDelaySeconds"),
    ({"backoffScaleFactor": 0.5}, "backoffScaleFactor"),
    ({"jitter": 2}, "jitter"),
    ({"retryBudget": -0.1}, "retryBudget"),
    ({"nonRetryableErrors": "x"}, "nonRetryableErrors"),
    ({"startToCloseTimeout": 31_536_001}, "startToCloseTimeout"),
    ({"timeoutPolicy": "NEVER"}, "timeoutPolicy"),
]


@pytest.mark.parametrize("overrides,key", POLICY_REJECTED, ids=lambda v: str(v))
def test_it_rejects_bad_per_task_policy_overrides(overrides, key):
    assert_rejected(wf(simple("a", **overrides)), f"tasks[0].{key}", "a")


def test_it_rejects_a_bad_override_on_a_nested_task():
    body = wf(simple("a"), _fork("f", [simple("b", retryCount=101)]))
    assert_rejected(body, "tasks[1].forkTasks[0][0].retryCount", "b")


# --- expressions -----------------------------------------------------------

EXPRESSIONS_ACCEPTED = [
    ("workflow input", "${workflow.input.x}"),
    ("task output with indexes", "${a.output.a[0].b}"),
    ("variables", "${workflow.variables.z}"),
    ("interpolated", "order ${workflow.input.id} for ${a.output.name}"),
    ("escaped", "$${not.an.expression}"),
    ("workflow fields", "${workflow.executionId}/${workflow.correlationId}"),
    ("task status", "${a.status}"),
    ("task input", "${a.input.k}"),
    ("later task", "${c.output.x}"),
    ("nested task", "${inner.output.x}"),
    ("spaces inside", "${ workflow.input.x }"),
    ("hyphen key", "${workflow.input.my-key}"),
    ("no expression", "plain $ and { text }"),
]


@pytest.mark.parametrize("value", [c[1] for c in EXPRESSIONS_ACCEPTED], ids=[c[0] for c in EXPRESSIONS_ACCEPTED])
def test_it_accepts_valid_expressions(value):
    body = wf(
        simple("a"),
        simple("b", inputParameters={"v": value, "nested": {"list": [value]}}),
        simple("c"),
        _fork("f", [simple("inner")]),
    )
    normalize_workflow(body)


EXPRESSIONS_REJECTED = [
    ("empty", "${}"),
    ("blank", "${  }"),
    ("trailing dot", "${workflow.input.}"),
    ("double dot", "${a..output}"),
    ("leading dot", "${.a.output}"),
    ("leading index", "${[0].a}"),
    ("unterminated", "${workflow.input.x"),
    ("unterminated after valid", "${workflow.input.x} and ${a.output"),
    ("nested", "${workflow.input.${a.output.k}}"),
    ("negative index", "${a.output.list[-1]}"),
    ("bad index", "${a.output.list[x]}"),
    ("space inside path", "${a.output.x y}"),
    ("bare workflow", "${workflow}"),
    ("unknown workflow field", "${workflow.inputs.x}"),
    ("unknown ref", "${ghost.output.x}"),
    ("bare ref", "${a}"),
    ("unknown task field", "${a.outputs.x}"),
    ("item outside template", "${item}"),
    ("index outside template", "${index}"),
    ("item path outside template", "${item.name}"),
]


@pytest.mark.parametrize("value", [c[1] for c in EXPRESSIONS_REJECTED], ids=[c[0] for c in EXPRESSIONS_REJECTED])
def test_it_rejects_invalid_expressions(value):
    body = wf(simple("a"), simple("b", inputParameters={"outer": {"list": [1, value]}}))
    assert_rejected(body, "tasks[1].inputParameters.outer.list[1]", "b")


@pytest.mark.parametrize("value", ["${item}", "${index}", "${item.name}", "${item.list[2]}", "id-${index}"])
def test_it_accepts_item_and_index_inside_a_dynamic_fork_template(value):
    normalize_workflow(wf(_dynamic("d", simple("each", inputParameters={"v": value}))))


def test_it_accepts_item_in_tasks_nested_inside_a_dynamic_fork_template():
    template = _fork("inner_fork", [simple("leaf", inputParameters={"v": "${item}"})])
    normalize_workflow(wf(_dynamic("d", template)))


OUTSIDE_TEMPLATE = [
    (
        "on the dynamic fork itself",
        wf(_dynamic("d", simple("each")) | {"inputParameters": {"items": "${item}"}}),
        "tasks[0].inputParameters.items",
        "d",
    ),
    (
        "after the dynamic fork",
        wf(_dynamic("d", simple("each")), simple("after", inputParameters={"v": "${index}"})),
        "tasks[1].inputParameters.v",
        "after",
    ),
    (
        "in a plain fork",
        wf(_fork("f", [simple("x", inputParameters={"v": "${item}"})])),
        "tasks[0].forkTasks[0][0].inputParameters.v",
        "x",
    ),
    (
        "in a loop",
        wf(_loop("l", simple("x", inputParameters={"v": "${index}"}))),
        "tasks[0].loopOver[0].inputParameters.v",
        "x",
    ),
]


@pytest.mark.parametrize("body,field,ref", [c[1:] for c in OUTSIDE_TEMPLATE], ids=[c[0] for c in OUTSIDE_TEMPLATE])
def test_it_rejects_item_and_index_outside_a_dynamic_fork_template(body, field, ref):
    error = assert_rejected(body, field, ref)
    assert "FORK_JOIN_DYNAMIC" in error.message


@pytest.mark.parametrize("value", ["${a.output.x}", "${a.input.y}", "${a.status}", "prefix ${a.output}"])
def test_it_rejects_a_task_reading_its_own_state(value):
    error = assert_rejected(
        wf(simple("z"), simple("a", inputParameters={"v": value})), "tasks[1].inputParameters.v", "a"
    )
    assert "its own" in error.message


def test_it_rejects_own_output_in_a_nested_task():
    body = wf(_fork("f", [simple("x"), simple("me", inputParameters={"v": "${me.output.r}"})]))
    assert_rejected(body, "tasks[0].forkTasks[0][1].inputParameters.v", "me")


def test_it_lets_a_loop_child_read_its_loops_output():
    body = wf(_loop("l", simple("x", inputParameters={"i": "${l.output.iteration}"})))
    normalize_workflow(body)


@pytest.mark.parametrize(
    "join_on,ok",
    [
        ([], True),
        (["a"], True),
        (["a", "b"], True),
        (["x_in_branch"], True),
        (["ghost"], False),
        (["a", "ghost"], False),
    ],
)
def test_it_checks_join_on_names_known_references(join_on, ok):
    body = wf(_fork("f", [simple("a")], [simple("b"), simple("x_in_branch")]), typed("JOIN", ref="j", joinOn=join_on))
    if ok:
        assert normalize_workflow(body)["tasks"][1]["joinOn"] == join_on
    else:
        error = assert_rejected(body, "tasks[1].joinOn", "j")
        assert "ghost" in error.message


def test_it_names_the_field_and_task_in_the_error_body():
    body = wf(simple("first"), _fork("f", [_dw(ref="loop", maxIterations=0)]))
    error = rejected(body)
    assert error.body() == {
        "error": "VALIDATION_ERROR",
        "message": error.message,
        "field": "tasks[1].forkTasks[0][0].maxIterations",
        "taskReferenceName": "loop",
    }
    assert error.message.startswith("task 'loop': tasks[1].forkTasks[0][0].maxIterations: ")


# --- values that are not JSON ----------------------------------------------


@pytest.mark.parametrize(
    "value,where",
    [
        (dt.date(2026, 1, 1), "tasks[0].inputParameters.when"),
        (dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "tasks[0].inputParameters.when"),
        ({"deep": [float("nan")]}, "tasks[0].inputParameters.when.deep[0]"),
        (float("inf"), "tasks[0].inputParameters.when"),
        ({dt.date(2026, 1, 1): 1}, "tasks[0].inputParameters.when"),
        (b"bytes", "tasks[0].inputParameters.when"),
        ({1, 2}, "tasks[0].inputParameters.when"),
    ],
    ids=["date", "datetime", "nan", "inf", "date key", "bytes", "set"],
)
def test_it_rejects_values_json_cannot_hold(value, where):
    # YAML bodies can carry dates, timestamps and .nan; a JSON column cannot store them.
    assert_rejected(wf(simple("a", inputParameters={"when": value})), where, "a")


@pytest.mark.parametrize(
    "fields,where",
    [
        ({"variables": {"at": dt.date(2026, 1, 1)}}, "variables.at"),
        ({"outputParameters": {"n": [float("nan")]}}, "outputParameters.n[0]"),
        ({"description": dt.date(2026, 1, 1)}, "description"),
    ],
    ids=["variables date", "output nan", "description date"],
)
def test_it_rejects_workflow_level_values_json_cannot_hold(fields, where):
    assert_rejected(wf(simple("a"), **fields), where, None)


# --- helpers the checks rely on ---------------------------------------------


@pytest.mark.parametrize(
    "value,seconds",
    [
        (0, 0.0),
        (30, 30.0),
        (1.5, 1.5),
        ("10", 10.0),
        ("30s", 30.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1.5h", 5400.0),
        (" 5 m ", 300.0),
    ],
)
def test_it_parses_wait_durations(value, seconds):
    assert durations.parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value", [-1, "-1s", "5x", "1h30m", "", "s", None, True, [5], float("nan"), float("inf"), float("-inf")]
)
def test_it_refuses_bad_wait_durations(value):
    with pytest.raises(ValueError):
        durations.parse_duration(value)


@pytest.mark.parametrize(
    "value,expected",
    [
        ("2026-12-01T09:00:00Z", dt.datetime(2026, 12, 1, 9, tzinfo=dt.UTC)),
        ("2026-12-01T11:00:00+02:00", dt.datetime(2026, 12, 1, 9, tzinfo=dt.UTC)),
        ("2026-12-01T09:00:00", dt.datetime(2026, 12, 1, 9, tzinfo=dt.UTC)),
        ("2026-12-01", dt.datetime(2026, 12, 1, tzinfo=dt.UTC)),
    ],
)
def test_it_parses_wait_instants_as_utc_when_naive(value, expected):
    parsed = durations.parse_instant(value)
    assert parsed == expected and parsed.tzinfo is not None


@pytest.mark.parametrize("value", ["tomorrow", "", "2026-13-01T00:00:00Z", 1767225600, None])
def test_it_refuses_bad_wait_instants(value):
    with pytest.raises(ValueError):
        durations.parse_instant(value)


def test_it_walks_every_nested_task_with_its_path():
    out = normalize_workflow(
        wf(
            simple("a"),
            _fork("f", [simple("b")], [_loop("l", simple("c"))]),
            _switch("s", {"x": [simple("d")]}, [simple("e")]),
            _dynamic("dyn", _fork("tf", [simple("g")])),
        )
    )
    assert [(task["taskReferenceName"], where) for task, where in walk_tasks(out["tasks"])] == [
        ("a", "tasks[0]"),
        ("f", "tasks[1]"),
        ("b", "tasks[1].forkTasks[0][0]"),
        ("l", "tasks[1].forkTasks[1][0]"),
        ("c", "tasks[1].forkTasks[1][0].loopOver[0]"),
        ("s", "tasks[2]"),
        ("d", "tasks[2].decisionCases.x[0]"),
        ("e", "tasks[2].defaultCase[0]"),
        ("dyn", "tasks[3]"),
        ("tf", "tasks[3].forkTask"),
        ("g", "tasks[3].forkTask.forkTasks[0][0]"),
    ]


@pytest.mark.parametrize(
    "task_type,kind",
    [
        ("SIMPLE", "worker"),
        ("SWITCH", "operator"),
        ("SUB_WORKFLOW", "operator"),
        ("SET_VARIABLE", "operator"),
        ("HTTP", "system"),
        ("INLINE", "system"),
        ("WAIT", "waiting"),
        ("HUMAN", "waiting"),
    ],
)
def test_it_sorts_each_type_into_its_kind(task_type, kind):
    assert task_types.kind_of(task_type) == kind


def test_it_puts_every_type_in_exactly_one_kind():
    kinds = [task_types.WORKER, task_types.OPERATORS, task_types.SYSTEM, task_types.WAITING]
    assert sum(len(kind) for kind in kinds) == len(task_types.ALL_TYPES)
    with pytest.raises(KeyError):
        task_types.kind_of("NOPE")
