"""The pure decider, table by table: one table per operator and waiting
type, plus SIMPLE retries. Each row is a hand-built snapshot (its rows and
``now``) and what the decision should hold: rows created (path, type,
status), rows updated (path → status), timers (kind, seconds after NOW),
children started, the ending (status, a fragment of its reason), and where
it matters retry delays, consumed messages, variables and ``again``.

No database: the decider reads none (tests/decider_builders.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from executions.decider.snapshot import Row, Snapshot
from tests.decider_builders import (
    NO_RETRIES,
    NOW,
    applied,
    child,
    dynamic,
    fork,
    join,
    loop,
    policy,
    row,
    run,
    simple,
    snapshot,
    sub_workflow,
    summary,
    switch,
    task,
    workflow,
)


def expect(
    *,
    created=(),
    updated=None,
    timers=(),
    children=(),
    ending=None,
    delayed=None,
    consumed=(),
    variables=None,
    again=False,
) -> dict:
    """A decision's summary; whatever is not given is empty."""
    return {
        "created": list(created),
        "updated": updated or {},
        "timers": list(timers),
        "children": list(children),
        "ending": ending,
        "delayed": delayed or {},
        "consumed": list(consumed),
        "variables": variables,
        "again": again,
    }


def assert_decides(snap: Snapshot, expected: dict, **run_args) -> None:
    got = summary(run(snap, **run_args))
    want = expected["ending"]
    if want and got["ending"] and got["ending"][0] == want[0] and want[1] in got["ending"][1]:
        got["ending"] = want  # the expected reason is a fragment of the actual one
    assert got == expected


def seconds(n: float) -> dt.datetime:
    return NOW + dt.timedelta(seconds=n)


# --- SWITCH -------------------------------------------------------------------

VALUE_SWITCH = workflow(switch("route", {"card": [simple("charge")], "bank": []}, [simple("manual")]), simple("ship"))
SCRIPT_SWITCH = workflow(
    switch(
        "route",
        {"big": [simple("charge")]},
        [simple("manual")],
        evaluator="javascript",
        expression="$.n > 3 ? 'big' : 'small'",
        inputs={"n": "${workflow.input.n}"},
    ),
    simple("ship"),
)
THROWING_SWITCH = workflow(
    switch(
        "route",
        {"big": [simple("charge")]},
        evaluator="javascript",
        expression="throw new Error('no route')",
        inputs={},
    ),
    simple("ship"),
)
OPTIONAL_THROWING_SWITCH = workflow({**THROWING_SWITCH["tasks"][0], "optional": True}, simple("ship"))
ROUTED_TO_CARD = row("route", "COMPLETED", type="SWITCH", output={"selectedCase": "card", "branch": "card"})


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(VALUE_SWITCH, input={"kind": "card"}),
            expect(created=[("route", "SWITCH", "COMPLETED"), ("charge", "SIMPLE", "SCHEDULED")]),
            id="value-param runs the matching case",
        ),
        pytest.param(
            snapshot(VALUE_SWITCH, input={"kind": "cash"}),
            expect(created=[("route", "SWITCH", "COMPLETED"), ("manual", "SIMPLE", "SCHEDULED")]),
            id="no matching case runs the default",
        ),
        pytest.param(
            snapshot(VALUE_SWITCH, input={}),
            expect(created=[("route", "SWITCH", "COMPLETED"), ("manual", "SIMPLE", "SCHEDULED")]),
            id="a missing input selects the default",
        ),
        pytest.param(
            snapshot(VALUE_SWITCH, input={"kind": "bank"}),
            expect(created=[("route", "SWITCH", "COMPLETED"), ("ship", "SIMPLE", "SCHEDULED")]),
            id="an empty case goes straight on",
        ),
        pytest.param(
            snapshot(SCRIPT_SWITCH, input={"n": 5}),
            expect(created=[("route", "SWITCH", "COMPLETED"), ("charge", "SIMPLE", "SCHEDULED")]),
            id="javascript runs the case it returns",
        ),
        pytest.param(
            snapshot(SCRIPT_SWITCH, input={"n": 1}),
            expect(created=[("route", "SWITCH", "COMPLETED"), ("manual", "SIMPLE", "SCHEDULED")]),
            id="javascript returning no case runs the default",
        ),
        pytest.param(
            snapshot(THROWING_SWITCH),
            expect(
                created=[("route", "SWITCH", "FAILED_WITH_TERMINAL_ERROR")],
                ending=("FAILED", "SWITCH expression: undefined:1: Error: no route"),
            ),
            id="a throwing script fails the workflow",
        ),
        pytest.param(
            snapshot(OPTIONAL_THROWING_SWITCH),
            expect(created=[("route", "SWITCH", "COMPLETED_WITH_ERRORS"), ("ship", "SIMPLE", "SCHEDULED")]),
            id="an optional switch absorbs its throwing script",
        ),
        pytest.param(
            snapshot(VALUE_SWITCH, ROUTED_TO_CARD, row("charge", "IN_PROGRESS"), input={"kind": "card"}),
            expect(),
            id="the case's task still running",
        ),
        pytest.param(
            snapshot(VALUE_SWITCH, ROUTED_TO_CARD, row("charge", "COMPLETED"), input={"kind": "card"}),
            expect(created=[("ship", "SIMPLE", "SCHEDULED")]),
            id="the case done goes on",
        ),
        pytest.param(
            snapshot(VALUE_SWITCH, ROUTED_TO_CARD, input={"kind": "bank"}),
            expect(created=[("charge", "SIMPLE", "SCHEDULED")]),
            id="the recorded branch holds when the input changes",
        ),
    ],
)
def test_switch(snap, expected):
    assert_decides(snap, expected)


# --- FORK_JOIN ----------------------------------------------------------------

FORK = workflow(fork("fan", [simple("a"), simple("a2")], [simple("b")]), join("j"), simple("after"))
NARROW_FORK = workflow(fork("fan", [simple("a")], [simple("b")], [simple("c")], maxConcurrency=2))
FAN = row("fan", "IN_PROGRESS", type="FORK_JOIN")


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(FORK),
            expect(
                created=[
                    ("fan", "FORK_JOIN", "IN_PROGRESS"),
                    ("a", "SIMPLE", "SCHEDULED"),
                    ("b", "SIMPLE", "SCHEDULED"),
                ]
            ),
            id="start: each branch's first task",
        ),
        pytest.param(
            snapshot(FORK, FAN, row("a", "COMPLETED"), row("b", "IN_PROGRESS")),
            expect(created=[("a2", "SIMPLE", "SCHEDULED")]),
            id="partial: a branch goes on while another runs",
        ),
        pytest.param(
            snapshot(FORK, FAN, row("a", "COMPLETED"), row("a2", "COMPLETED"), row("b", "IN_PROGRESS")),
            expect(),
            id="one branch done, one running: wait",
        ),
        pytest.param(
            snapshot(FORK, FAN, row("a", "COMPLETED"), row("a2", "COMPLETED"), row("b", "COMPLETED")),
            expect(
                updated={"fan": "COMPLETED"}, created=[("j", "JOIN", "COMPLETED"), ("after", "SIMPLE", "SCHEDULED")]
            ),
            id="all done: the fork completes and the join runs",
        ),
        pytest.param(
            snapshot(
                FORK,
                FAN,
                row("a", "COMPLETED"),
                row("a2", "IN_PROGRESS"),
                row("b", "FAILED", reason="boom", policy=NO_RETRIES),
            ),
            expect(updated={"a2": "CANCELED", "fan": "FAILED"}, ending=("FAILED", "task b FAILED: boom")),
            id="a failed branch cancels its siblings",
        ),
        pytest.param(
            snapshot(FORK, FAN, row("a", "FAILED", policy=NO_RETRIES), row("b", "SCHEDULED")),
            expect(updated={"b": "CANCELED", "fan": "FAILED"}, ending=("FAILED", "task a FAILED")),
            id="the first branch failing cancels a later one",
        ),
        pytest.param(
            snapshot(FORK, FAN, row("a", "COMPLETED"), row("a2", "IN_PROGRESS"), row("b", "FAILED")),
            expect(created=[("b", "SIMPLE", "SCHEDULED")], delayed={"b": 1.0}),
            id="a branch task with retries left is retried, siblings untouched",
        ),
        pytest.param(
            snapshot(
                FORK,
                FAN,
                row("a", "COMPLETED"),
                row("a2", "IN_PROGRESS"),
                row("b", "FAILED", policy=NO_RETRIES, optional=True),
            ),
            expect(updated={"b": "COMPLETED_WITH_ERRORS"}),
            id="an optional branch task is absorbed",
        ),
        pytest.param(
            snapshot(NARROW_FORK),
            expect(
                created=[
                    ("fan", "FORK_JOIN", "IN_PROGRESS"),
                    ("a", "SIMPLE", "SCHEDULED"),
                    ("b", "SIMPLE", "SCHEDULED"),
                ]
            ),
            id="maxConcurrency 2: two branches start",
        ),
        pytest.param(
            snapshot(NARROW_FORK, FAN, row("a", "COMPLETED"), row("b", "IN_PROGRESS")),
            expect(created=[("c", "SIMPLE", "SCHEDULED")]),
            id="maxConcurrency 2: a finished branch frees a slot",
        ),
    ],
)
def test_fork_join(snap, expected):
    assert_decides(snap, expected)


# --- FORK_JOIN_DYNAMIC ----------------------------------------------------------

DYNAMIC = workflow(
    dynamic("fan", simple("charge", inputs={"item": "${item}", "index": "${index}"}), max_concurrency=2),
    simple("after"),
)
ITEMS = ["x", "y", "z"]
DYNAMIC_FAN = row("fan", "IN_PROGRESS", type="FORK_JOIN_DYNAMIC", input={"items": ITEMS}, output={"items": 3})


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(DYNAMIC, input={"items": ITEMS}),
            expect(
                created=[
                    ("fan", "FORK_JOIN_DYNAMIC", "IN_PROGRESS"),
                    ("fan[0].charge", "SIMPLE", "SCHEDULED"),
                    ("fan[1].charge", "SIMPLE", "SCHEDULED"),
                ]
            ),
            id="items: one branch per item, maxConcurrency at once",
        ),
        pytest.param(
            snapshot(
                DYNAMIC,
                DYNAMIC_FAN,
                row("fan[0].charge", "COMPLETED"),
                row("fan[1].charge", "IN_PROGRESS"),
                input={"items": ITEMS},
            ),
            expect(created=[("fan[2].charge", "SIMPLE", "SCHEDULED")]),
            id="a finished item frees a slot",
        ),
        pytest.param(
            snapshot(
                DYNAMIC,
                DYNAMIC_FAN,
                row("fan[0].charge", "COMPLETED"),
                row("fan[1].charge", "COMPLETED"),
                row("fan[2].charge", "COMPLETED"),
                input={"items": ITEMS},
            ),
            expect(updated={"fan": "COMPLETED"}, created=[("after", "SIMPLE", "SCHEDULED")]),
            id="every item done",
        ),
        pytest.param(
            snapshot(
                DYNAMIC,
                DYNAMIC_FAN,
                row("fan[0].charge", "FAILED", policy=NO_RETRIES),
                row("fan[1].charge", "IN_PROGRESS"),
                input={"items": ITEMS},
            ),
            expect(
                updated={"fan[1].charge": "CANCELED", "fan": "FAILED"}, ending=("FAILED", "task fan[0].charge FAILED")
            ),
            id="a failed item cancels the others",
        ),
        pytest.param(
            snapshot(DYNAMIC, input={"items": "x,y"}),
            expect(
                created=[("fan", "FORK_JOIN_DYNAMIC", "FAILED_WITH_TERMINAL_ERROR")],
                ending=("FAILED", "items must be a list, not str"),
            ),
            id="not a list",
        ),
        pytest.param(
            snapshot(DYNAMIC, input={"items": ITEMS}, max_fork_items=2),
            expect(
                created=[("fan", "FORK_JOIN_DYNAMIC", "FAILED_WITH_TERMINAL_ERROR")],
                ending=("FAILED", "3 items exceed the limit of 2"),
            ),
            id="more items than max_fork_items",
        ),
        pytest.param(
            snapshot(DYNAMIC, input={"items": []}),
            expect(created=[("fan", "FORK_JOIN_DYNAMIC", "COMPLETED"), ("after", "SIMPLE", "SCHEDULED")]),
            id="no items completes at once",
        ),
    ],
)
def test_fork_join_dynamic(snap, expected):
    assert_decides(snap, expected)


def test_dynamic_fork_items_reach_their_branches():
    decision = run(snapshot(DYNAMIC, input={"items": ITEMS}))
    assert [r.input for r in decision.created[1:]] == [{"item": "x", "index": 0}, {"item": "y", "index": 1}]


# --- JOIN -----------------------------------------------------------------------


def joined_fork(*on: str) -> Snapshot:
    wf = workflow(simple("prep"), fork("fan", [simple("a")], [simple("b")]), join("j", *on))
    return snapshot(
        wf,
        row("prep", "COMPLETED", output={"p": 0}),
        FAN,
        row("a", "COMPLETED", output={"x": 1}),
        row("b", "COMPLETED", output={"y": 2}),
    )


def joined_dynamic(*on: str) -> Snapshot:
    wf = workflow(dynamic("fan", simple("charge")), join("j", *on))
    rows = [row(f"fan[{i}].charge", "COMPLETED", output={"n": i}) for i in range(2)]
    fan = row("fan", "IN_PROGRESS", type="FORK_JOIN_DYNAMIC", input={"items": [0, 1]})
    return snapshot(wf, fan, *rows, input={"items": [0, 1]})


@pytest.mark.parametrize(
    ("snap", "output"),
    [
        pytest.param(joined_fork(), {"a": {"x": 1}, "b": {"y": 2}}, id="no joinOn: every task of the fork"),
        pytest.param(joined_fork("b"), {"b": {"y": 2}}, id="joinOn picks references"),
        pytest.param(
            joined_fork("b", "prep"),
            {"b": {"y": 2}, "prep": {"p": 0}},
            id="a reference outside the fork is looked up by name",
        ),
        pytest.param(
            joined_dynamic("charge"),
            {"fan[0].charge": {"n": 0}, "fan[1].charge": {"n": 1}},
            id="after a dynamic fork: keyed by item path",
        ),
    ],
)
def test_join(snap, output):
    decision = run(snap)
    assert summary(decision)["created"] == [("j", "JOIN", "COMPLETED")]
    assert decision.created[0].output == output
    assert decision.ending.status == "COMPLETED"


# --- DO_WHILE -------------------------------------------------------------------

LOOP = workflow(loop("lp", "$.iteration < 3", simple("step"), max_iterations=5), simple("after"))
ENDLESS = workflow(loop("lp", "true", simple("step"), max_iterations=2))
BY_OUTPUT = workflow(loop("lp", "$.step.output.more", simple("step")))
BAD_CONDITION = workflow(loop("lp", "nope(", simple("step")))


def loop_at(iteration: int) -> Row:
    return row("lp", "IN_PROGRESS", type="DO_WHILE", output={"iteration": iteration})


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(LOOP),
            expect(created=[("lp", "DO_WHILE", "IN_PROGRESS"), ("lp[1].step", "SIMPLE", "SCHEDULED")]),
            id="start: iteration 1",
        ),
        pytest.param(
            snapshot(LOOP, loop_at(1), row("lp[1].step", "IN_PROGRESS")), expect(), id="an iteration still running"
        ),
        pytest.param(
            snapshot(LOOP, loop_at(1), row("lp[1].step", "COMPLETED")),
            expect(updated={"lp": "IN_PROGRESS"}, created=[("lp[2].step", "SIMPLE", "SCHEDULED")]),
            id="condition true: the next iteration",
        ),
        pytest.param(
            snapshot(LOOP, loop_at(3), row("lp[3].step", "COMPLETED")),
            expect(updated={"lp": "COMPLETED"}, created=[("after", "SIMPLE", "SCHEDULED")]),
            id="condition false: the loop completes",
        ),
        pytest.param(
            snapshot(BY_OUTPUT, loop_at(1), row("lp[1].step", "COMPLETED", output={"more": True})),
            expect(updated={"lp": "IN_PROGRESS"}, created=[("lp[2].step", "SIMPLE", "SCHEDULED")]),
            id="the condition reads the body's output: more",
        ),
        pytest.param(
            snapshot(BY_OUTPUT, loop_at(1), row("lp[1].step", "COMPLETED", output={"more": False})),
            expect(updated={"lp": "COMPLETED"}, ending=("COMPLETED", "")),
            id="the condition reads the body's output: done",
        ),
        pytest.param(
            snapshot(ENDLESS, loop_at(2), row("lp[2].step", "COMPLETED")),
            expect(updated={"lp": "FAILED"}, ending=("FAILED", "loopCondition still true after maxIterations (2)")),
            id="still true after maxIterations fails the loop",
        ),
        pytest.param(
            snapshot(LOOP, loop_at(1), row("lp[1].step", "FAILED", reason="boom", policy=NO_RETRIES)),
            expect(updated={"lp": "FAILED"}, ending=("FAILED", "task lp[1].step FAILED: boom")),
            id="a failed body task fails the loop",
        ),
        pytest.param(
            snapshot(BAD_CONDITION, loop_at(1), row("lp[1].step", "COMPLETED")),
            expect(updated={"lp": "FAILED_WITH_TERMINAL_ERROR"}, ending=("FAILED", "DO_WHILE loopCondition")),
            id="a condition that does not parse",
        ),
    ],
)
def test_do_while(snap, expected):
    assert_decides(snap, expected)


OPERATOR_LOOP = workflow(
    loop("lp", "$.iteration < 50", task("SET_VARIABLE", "count", {"seen": True}), max_iterations=100)
)


def iterations(count: int, first: int = 1) -> list:
    return [(f"lp[{i}].count", "SET_VARIABLE", "COMPLETED") for i in range(first, first + count)]


def in_time_for(calls: int):
    """``in_time`` that turns False on its ``calls``-th call."""
    answers = iter([True] * (calls - 1) + [False])
    return lambda: next(answers)


@pytest.mark.parametrize(
    ("snap", "in_time", "expected"),
    [
        pytest.param(
            snapshot(OPERATOR_LOOP, max_loop_iterations=5),
            None,
            expect(created=[("lp", "DO_WHILE", "IN_PROGRESS"), *iterations(5)], variables={"seen": True}, again=True),
            id="max_loop_iterations bounds one decision",
        ),
        pytest.param(
            snapshot(OPERATOR_LOOP),
            in_time_for(3),
            expect(created=[("lp", "DO_WHILE", "IN_PROGRESS"), *iterations(3)], variables={"seen": True}, again=True),
            id="no iteration starts once in_time is False",
        ),
        pytest.param(
            snapshot(OPERATOR_LOOP, loop_at(48), max_loop_iterations=5, variables={"seen": True}),
            None,
            expect(updated={"lp": "COMPLETED"}, created=iterations(3, first=48), ending=("COMPLETED", "")),
            id="a follow-up decision finishes the loop",
        ),
    ],
)
def test_do_while_in_bounded_steps(snap, in_time, expected):
    assert_decides(snap, expected, **({"in_time": in_time} if in_time else {}))


# --- SUB_WORKFLOW ---------------------------------------------------------------

CALL = workflow(sub_workflow("pay"), simple("after"))


def calling(status: str, **fields) -> Snapshot:
    """``pay`` waiting on a child that is ``status``."""
    found = child(status, {"paid": True}, "why")
    task_row = row("pay", "IN_PROGRESS", type="SUB_WORKFLOW", child_execution_id=found.id, **fields)
    return snapshot(CALL, task_row, children={found.id: found})


STARTS_CHILD = expect(created=[("pay", "SUB_WORKFLOW", "IN_PROGRESS")], children=[("child@1", "pay.")])


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(snapshot(CALL, input={"orderId": 7}), STARTS_CHILD, id="starts the child"),
        pytest.param(calling("RUNNING"), expect(), id="child running"),
        pytest.param(
            calling("COMPLETED"),
            expect(updated={"pay": "COMPLETED"}, created=[("after", "SIMPLE", "SCHEDULED")]),
            id="child completed",
        ),
        pytest.param(
            calling("FAILED", policy=NO_RETRIES),
            expect(updated={"pay": "FAILED"}, ending=("FAILED", f"sub-workflow {child('FAILED').id} FAILED: why")),
            id="child failed",
        ),
        pytest.param(
            calling("FAILED"),
            expect(
                updated={"pay": "FAILED"},
                created=[("pay", "SUB_WORKFLOW", "SCHEDULED")],
                timers=[("DECIDE", 1.0)],
                delayed={"pay": 1.0},
            ),
            id="child failed, retries left: a new attempt after the delay",
        ),
        pytest.param(
            calling("TERMINATED", optional=True),
            expect(updated={"pay": "CANCELED"}, ending=("FAILED", "TERMINATED: why")),
            id="child terminated: neither retried nor absorbed",
        ),
        pytest.param(
            snapshot(CALL, row("pay", "FAILED"), row("pay", "SCHEDULED", type="SUB_WORKFLOW", attempt=2)),
            expect(updated={"pay": "IN_PROGRESS"}, children=[("child@1", "pay.")]),
            id="a retry whose time has come starts a child",
        ),
        pytest.param(snapshot(CALL, depth=3), STARTS_CHILD, id="depth 3 may call"),
        pytest.param(
            snapshot(CALL, depth=4),
            expect(
                created=[("pay", "SUB_WORKFLOW", "FAILED_WITH_TERMINAL_ERROR")],
                ending=("FAILED", "exceeds the call depth limit 4"),
            ),
            id="depth 4 may not",
        ),
    ],
)
def test_sub_workflow(snap, expected):
    assert_decides(snap, expected)


def test_a_child_gets_the_tasks_resolved_input():
    [started] = run(snapshot(CALL, input={"orderId": 7})).children
    assert (started.input, started.path_prefix) == ({"orderId": 7}, "pay.")


# --- TERMINATE ------------------------------------------------------------------


def terminating(status: str, output=None) -> Snapshot:
    stop = task(
        "TERMINATE", "stop", {"terminationStatus": status, "workflowOutput": output, "terminationReason": "enough"}
    )
    return snapshot(workflow(simple("first"), stop, simple("after")), row("first", "COMPLETED"))


TERMINATED_IN_FORK = workflow(
    fork("fan", [simple("a")], [task("TERMINATE", "stop", {"terminationStatus": "TERMINATED"})])
)


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            terminating("COMPLETED"),
            expect(created=[("stop", "TERMINATE", "COMPLETED")], ending=("COMPLETED", "enough")),
            id="completed",
        ),
        pytest.param(
            terminating("TERMINATED"),
            expect(created=[("stop", "TERMINATE", "COMPLETED")], ending=("TERMINATED", "enough")),
            id="terminated",
        ),
        pytest.param(
            terminating("FAILED"),
            expect(created=[("stop", "TERMINATE", "COMPLETED")], ending=("FAILED", "enough")),
            id="failed",
        ),
        pytest.param(
            terminating("DONE"),
            expect(created=[("stop", "TERMINATE", "COMPLETED")], ending=("FAILED", "enough")),
            id="an unknown status fails",
        ),
        pytest.param(
            snapshot(TERMINATED_IN_FORK),
            expect(
                created=[
                    ("fan", "FORK_JOIN", "CANCELED"),
                    ("a", "SIMPLE", "CANCELED"),
                    ("stop", "TERMINATE", "COMPLETED"),
                ],
                ending=("TERMINATED", ""),
            ),
            id="inside a fork: the open rows are canceled",
        ),
    ],
)
def test_terminate(snap, expected):
    assert_decides(snap, expected)


@pytest.mark.parametrize(
    ("status", "output", "ending_output", "failed_tasks"),
    [("COMPLETED", {"k": 1}, {"k": 1}, ()), ("TERMINATED", 5, {"result": 5}, ()), ("FAILED", None, {}, ("stop",))],
)
def test_terminate_output_and_failed_tasks(status, output, ending_output, failed_tasks):
    ending = run(terminating(status, output)).ending
    assert (ending.output, ending.failed_tasks) == (ending_output, failed_tasks)


# --- SET_VARIABLE ---------------------------------------------------------------

SET = workflow(
    task("SET_VARIABLE", "set", {"region": "${workflow.input.region}", "tries": 3}),
    simple("after", inputParameters={"region": "${workflow.variables.region}"}),
    variables={"region": "us", "mode": "live"},
)


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(SET, input={"region": "eu"}),
            expect(
                created=[("set", "SET_VARIABLE", "COMPLETED"), ("after", "SIMPLE", "SCHEDULED")],
                variables={"region": "eu", "mode": "live", "tries": 3},
            ),
            id="merged into the workflow's variables",
        ),
        pytest.param(
            snapshot(
                SET,
                row("set", "COMPLETED", type="SET_VARIABLE"),
                input={"region": "eu"},
                variables={"region": "eu", "mode": "live", "tries": 3},
            ),
            expect(created=[("after", "SIMPLE", "SCHEDULED")]),
            id="set before: the variables are unchanged",
        ),
    ],
)
def test_set_variable(snap, expected):
    assert_decides(snap, expected)


def test_the_next_task_reads_the_new_variable():
    decision = run(snapshot(SET, input={"region": "eu"}))
    assert decision.created[1].input == {"region": "eu"}


# --- WAIT -------------------------------------------------------------------------


def waiting(inputs: dict, *rows, **fields) -> Snapshot:
    return snapshot(workflow(task("WAIT", "pause", inputs), simple("after")), *rows, **fields)


WAITS = [("pause", "WAIT", "IN_PROGRESS")]
WAITED = [("pause", "WAIT", "COMPLETED"), ("after", "SIMPLE", "SCHEDULED")]


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(waiting({"duration": "30s"}), expect(created=WAITS, timers=[("WAIT", 30.0)]), id="duration 30s"),
        pytest.param(
            waiting({"duration": 90}), expect(created=WAITS, timers=[("WAIT", 90.0)]), id="duration in seconds"
        ),
        pytest.param(waiting({"duration": "2m"}), expect(created=WAITS, timers=[("WAIT", 120.0)]), id="duration 2m"),
        pytest.param(
            waiting({"until": "2026-06-01T13:00:00Z"}),
            expect(created=WAITS, timers=[("WAIT", 3600.0)]),
            id="until an instant",
        ),
        pytest.param(waiting({"until": "2026-06-01T11:00:00Z"}), expect(created=WAITED), id="until a past instant"),
        pytest.param(waiting({"duration": "0s"}), expect(created=WAITED), id="no duration"),
        pytest.param(
            waiting({"duration": "soon"}),
            expect(
                created=[("pause", "WAIT", "FAILED_WITH_TERMINAL_ERROR")],
                ending=("FAILED", 'WAIT: must be seconds or a string like "30s"'),
            ),
            id="a bad duration fails",
        ),
        pytest.param(
            waiting({"until": 5}),
            expect(
                created=[("pause", "WAIT", "FAILED_WITH_TERMINAL_ERROR")],
                ending=("FAILED", "WAIT: must be an ISO 8601 time"),
            ),
            id="a bad instant fails",
        ),
        pytest.param(
            waiting({"duration": "${workflow.input.d}"}, input={"d": -3}),
            expect(
                created=[("pause", "WAIT", "FAILED_WITH_TERMINAL_ERROR")],
                ending=("FAILED", "WAIT: must not be negative"),
            ),
            id="a negative duration from an expression fails",
        ),
        pytest.param(
            waiting({"duration": "30s"}, row("pause", "IN_PROGRESS", type="WAIT")),
            expect(),
            id="waiting: nothing to do",
        ),
        pytest.param(
            waiting({"duration": "30s"}, row("pause", "COMPLETED", type="WAIT")),
            expect(created=[("after", "SIMPLE", "SCHEDULED")]),
            id="its timer fired: goes on",
        ),
    ],
)
def test_wait(snap, expected):
    assert_decides(snap, expected)


# --- HUMAN and WAIT_FOR_WEBHOOK ---------------------------------------------------


def human(*rows, **fields) -> Snapshot:
    return snapshot(workflow(task("HUMAN", "approve", **fields), simple("after")), *rows)


def webhook(*rows) -> Snapshot:
    return snapshot(workflow(task("WAIT_FOR_WEBHOOK", "hook", {"matches": {"$.orderId": 7}}), simple("after")), *rows)


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(human(), expect(created=[("approve", "HUMAN", "IN_PROGRESS")]), id="human: waits"),
        pytest.param(
            human(timeoutSeconds=3600, scheduleToStartTimeout=10),
            expect(created=[("approve", "HUMAN", "IN_PROGRESS")], timers=[("TASK_TOTAL", 3600.0)]),
            id="human: only timeoutSeconds is armed",
        ),
        pytest.param(human(row("approve", "IN_PROGRESS", type="HUMAN")), expect(), id="human: still waiting"),
        pytest.param(
            human(row("approve", "COMPLETED", type="HUMAN")),
            expect(created=[("after", "SIMPLE", "SCHEDULED")]),
            id="human: completed through the API",
        ),
        pytest.param(
            human(row("approve", "FAILED", type="HUMAN", reason="rejected", policy=NO_RETRIES)),
            expect(ending=("FAILED", "task approve FAILED: rejected")),
            id="human: failed through the API",
        ),
        pytest.param(webhook(), expect(created=[("hook", "WAIT_FOR_WEBHOOK", "IN_PROGRESS")]), id="webhook: waits"),
        pytest.param(
            webhook(row("hook", "IN_PROGRESS", type="WAIT_FOR_WEBHOOK")), expect(), id="webhook: still waiting"
        ),
        pytest.param(
            webhook(row("hook", "COMPLETED", type="WAIT_FOR_WEBHOOK")),
            expect(created=[("after", "SIMPLE", "SCHEDULED")]),
            id="webhook: matched",
        ),
    ],
)
def test_human_and_webhook(snap, expected):
    assert_decides(snap, expected)


# --- PULL_WORKFLOW_MESSAGES -------------------------------------------------------

PULL = workflow(task("PULL_WORKFLOW_MESSAGES", "inbox", {"batchSize": 2}), simple("after"))
PULLING = row("inbox", "IN_PROGRESS", type="PULL_WORKFLOW_MESSAGES", input={"batchSize": 2})


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(PULL, messages=[(1, {"a": 1}), (2, {"b": 2}), (3, {"c": 3})]),
            expect(
                created=[("inbox", "PULL_WORKFLOW_MESSAGES", "COMPLETED"), ("after", "SIMPLE", "SCHEDULED")],
                consumed=[1, 2],
            ),
            id="takes batchSize messages, oldest first",
        ),
        pytest.param(
            snapshot(PULL),
            expect(created=[("inbox", "PULL_WORKFLOW_MESSAGES", "IN_PROGRESS")]),
            id="none waiting: waits",
        ),
        pytest.param(snapshot(PULL, PULLING), expect(), id="still none"),
        pytest.param(
            snapshot(PULL, PULLING, messages=[(4, "hello")]),
            expect(updated={"inbox": "COMPLETED"}, created=[("after", "SIMPLE", "SCHEDULED")], consumed=[4]),
            id="a message arrives",
        ),
    ],
)
def test_pull_workflow_messages(snap, expected):
    assert_decides(snap, expected)


def test_pulled_messages_are_the_tasks_output():
    decision = run(snapshot(PULL, messages=[(1, {"a": 1}), (2, {"b": 2}), (3, {"c": 3})]))
    assert decision.created[0].output == {"messages": [{"a": 1}, {"b": 2}]}


# --- SIMPLE: scheduling, retries, deadlines, caps ----------------------------------

CHAIN = workflow(simple("charge"), simple("ship"))
TIMED = workflow(simple("charge", timeoutSeconds=60, scheduleToStartTimeout=10), timeoutSeconds=600)
ALERTING = workflow(simple("charge"), timeoutSeconds=600, timeoutPolicy="ALERT_ONLY")
CAPPED = workflow(fork("fan", [simple("a")], [simple("b")], [simple("c")]), maxConcurrentTasks=2)
TEN_S = policy(retryDelaySeconds=10, jitter=0.2)
RETRIED = [("charge", "SIMPLE", "SCHEDULED")]


def failed(status: str = "FAILED", *, reason: str = "boom", deadline: float | None = None, **fields) -> Snapshot:
    """``charge`` ended ``status`` just now; ``deadline`` is in seconds from NOW."""
    return snapshot(
        CHAIN, row("charge", status, reason=reason, **fields), deadline=None if deadline is None else seconds(deadline)
    )


@pytest.mark.parametrize(
    ("snap", "rand", "expected"),
    [
        pytest.param(snapshot(CHAIN), 0.5, expect(created=RETRIED), id="first task scheduled"),
        pytest.param(
            snapshot(TIMED),
            0.5,
            expect(
                created=RETRIED, timers=[("WORKFLOW_TIMEOUT", 600.0), ("TASK_TOTAL", 60.0), ("SCHEDULE_TO_START", 10.0)]
            ),
            id="its timeouts armed",
        ),
        pytest.param(
            snapshot(ALERTING),
            0.5,
            expect(created=RETRIED, timers=[("WORKFLOW_TIMEOUT", 600.0)]),
            id="an ALERT_ONLY workflow timeout only alerts",
        ),
        pytest.param(
            failed(policy=TEN_S),
            0.0,
            expect(created=RETRIED, delayed={"charge": 8.0}),
            id="retry: rand 0 is the bottom of the jitter band",
        ),
        pytest.param(
            failed(policy=TEN_S),
            0.5,
            expect(created=RETRIED, delayed={"charge": 10.0}),
            id="retry: rand 0.5 is the middle",
        ),
        pytest.param(
            failed(policy=TEN_S),
            0.999,
            expect(created=RETRIED, delayed={"charge": 11.996}),
            id="retry: rand near 1 is the top",
        ),
        pytest.param(
            failed(policy=policy(retryDelaySeconds=10, jitter=0), attempt=3),
            0.5,
            expect(created=RETRIED, delayed={"charge": 40.0}),
            id="retry: exponential backoff",
        ),
        pytest.param(
            failed(policy=TEN_S, output={"retryAfterSeconds": 30}),
            0.5,
            expect(created=RETRIED, delayed={"charge": 30.0}),
            id="retry: Retry-After lengthens the delay",
        ),
        pytest.param(
            failed(attempt=4), 0.5, expect(ending=("FAILED", "task charge FAILED: boom")), id="retries exhausted"
        ),
        pytest.param(
            failed("FAILED_WITH_TERMINAL_ERROR"),
            0.5,
            expect(ending=("FAILED", "task charge FAILED_WITH_TERMINAL_ERROR: boom")),
            id="terminal error",
        ),
        pytest.param(
            failed(reason="card_declined", policy=policy(nonRetryableErrors=["card_declined"])),
            0.5,
            expect(ending=("FAILED", "card_declined")),
            id="non-retryable error",
        ),
        pytest.param(
            failed(policy=NO_RETRIES, optional=True),
            0.5,
            expect(updated={"charge": "COMPLETED_WITH_ERRORS"}, created=[("ship", "SIMPLE", "SCHEDULED")]),
            id="optional absorbs the last failure",
        ),
        pytest.param(
            failed(optional=True), 0.5, expect(created=RETRIED, delayed={"charge": 1.0}), id="optional is retried first"
        ),
        pytest.param(
            failed("CANCELED", optional=True),
            0.5,
            expect(ending=("FAILED", "task charge CANCELED")),
            id="optional never absorbs a cancellation",
        ),
        pytest.param(
            failed("TIMED_OUT", optional=True, policy=policy(timeoutPolicy="TIME_OUT_WF")),
            0.5,
            expect(ending=("TIMED_OUT", "task charge TIMED_OUT")),
            id="TIME_OUT_WF times the workflow out",
        ),
        pytest.param(
            failed("TIMED_OUT"),
            0.5,
            expect(created=RETRIED, delayed={"charge": 1.0}),
            id="a timeout with policy RETRY is retried",
        ),
        pytest.param(
            snapshot(CHAIN, row("charge", "IN_PROGRESS"), deadline=seconds(-1)),
            0.5,
            expect(updated={"charge": "CANCELED"}, ending=("TIMED_OUT", "deadline 2026-06-01T11:59:59Z passed")),
            id="deadline passed: TIMED_OUT, open rows canceled",
        ),
        pytest.param(
            failed(policy=TEN_S, deadline=5),
            0.5,
            expect(updated={"charge": "FAILED"}),
            id="a retry that cannot start before the deadline is not made",
        ),
        pytest.param(
            failed(policy=TEN_S, deadline=9),
            0.999,
            expect(created=RETRIED, delayed={"charge": 8.0}),
            id="a draw past the deadline gives way to the shortest delay",
        ),
        pytest.param(
            failed(policy=TEN_S, deadline=5, optional=True),
            0.5,
            expect(updated={"charge": "COMPLETED_WITH_ERRORS"}, created=[("ship", "SIMPLE", "SCHEDULED")]),
            id="no retry before the deadline: optional absorbs",
        ),
        pytest.param(
            failed(policy=policy(timeoutSeconds=30), at=seconds(-60)),
            0.5,
            expect(ending=("FAILED", "task charge FAILED: boom")),
            id="the task's total timeout spent: no retry",
        ),
        pytest.param(
            snapshot(CHAIN, row("charge", "FAILED"), row("charge", "SCHEDULED", attempt=2)),
            0.5,
            expect(),
            id="a retry waiting: nothing to do",
        ),
        pytest.param(
            snapshot(CAPPED),
            0.5,
            expect(
                created=[
                    ("fan", "FORK_JOIN", "IN_PROGRESS"),
                    ("a", "SIMPLE", "SCHEDULED"),
                    ("b", "SIMPLE", "SCHEDULED"),
                ]
            ),
            id="maxConcurrentTasks caps the open tasks",
        ),
        pytest.param(
            snapshot(CAPPED, FAN, row("a", "COMPLETED"), row("b", "IN_PROGRESS")),
            0.5,
            expect(created=[("c", "SIMPLE", "SCHEDULED")]),
            id="maxConcurrentTasks: a finished task frees a place",
        ),
    ],
)
def test_simple(snap, rand, expected):
    assert_decides(snap, expected, rand=rand)


def test_a_retry_past_the_deadline_says_why_once():
    snap = failed(policy=TEN_S, deadline=5)
    first = run(snap)
    assert first.updated[0].reason == "boom; not retried: the next attempt would start after the execution's deadline"
    assert summary(run(applied(snap, first))) == expect()


def test_the_retry_budget_refuses_with_its_reason():
    snap = snapshot(
        CHAIN, row("charge", "FAILED", reason="boom", policy=policy(retryBudget=0.1)), budgets={"charge": (100, 50)}
    )
    decision = run(snap)
    assert decision.budget_refusals == ["charge"]
    reason = (
        "task charge FAILED: retry budget spent: 50 of 100 attempts in the last 300 s were retries "
        "(retryBudget 0.1); last error: boom"
    )
    assert summary(decision) == expect(updated={"charge": "FAILED"}, ending=("FAILED", reason))


def test_the_cap_counts_what_it_held_back():
    assert run(snapshot(CAPPED)).capped == 1


# --- what these tables found, one regression test each ------------------------------
# An optional FORK_JOIN or DO_WHILE that failed ended the execution in the walk
# that saw it fail, and was absorbed only if the same snapshot was decided
# again; a snapshot of an ended execution scheduled the task after a TERMINATE.

OPTIONAL_FORK = workflow(fork("fan", [simple("a")], [simple("b")], optional=True), simple("after"))
OPTIONAL_LOOP = workflow({**loop("lp", "true", simple("step"), max_iterations=1), "optional": True}, simple("after"))


def test_an_optional_fork_absorbs_a_failed_branch():
    snap = snapshot(
        OPTIONAL_FORK,
        row("fan", "IN_PROGRESS", type="FORK_JOIN", optional=True),
        row("a", "FAILED", policy=NO_RETRIES),
        row("b", "IN_PROGRESS"),
    )
    decision = run(snap)
    assert (decision.ending, summary(decision)["created"]) == (None, [("after", "SIMPLE", "SCHEDULED")])


def test_an_optional_loop_absorbs_running_out_of_iterations():
    snap = snapshot(
        OPTIONAL_LOOP,
        row("lp", "IN_PROGRESS", type="DO_WHILE", optional=True, output={"iteration": 1}),
        row("lp[1].step", "COMPLETED"),
    )
    decision = run(snap)
    assert (decision.ending, summary(decision)["created"]) == (None, [("after", "SIMPLE", "SCHEDULED")])


def test_an_ended_execution_schedules_nothing():
    snap = snapshot(workflow(task("TERMINATE", "stop", {"terminationStatus": "TERMINATED"}), simple("after")))
    ended = applied(snap, run(snap))
    assert ended.status == "TERMINATED"
    assert summary(run(ended))["created"] == []
