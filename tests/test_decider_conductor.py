"""The pure decider on Conductor's task types and idioms (docs/conductor.md),
table by table as tests/test_decider_tables.py does: DYNAMIC, EXCLUSIVE_JOIN,
FORK_JOIN_DYNAMIC with tasks chosen at run time, DO_WHILE conditions that
read ``$.<loopRef>['iteration']`` and a body task's output fields, DO_WHILE
over items, WAIT with no duration, and a SUB_WORKFLOW named by an
expression. Hand-built snapshots; no database."""

from __future__ import annotations

import dataclasses

import pytest

from tests.decider_builders import NO_RETRIES, loop, row, run, simple, snapshot, switch, task, workflow
from tests.test_decider_tables import assert_decides, expect


def named(r, name: str):
    """A row of a task whose definition name differs from its reference."""
    return dataclasses.replace(r, task_def_name=name, queue=name if r.kind == "worker" else r.queue)


# --- DYNAMIC ------------------------------------------------------------------

DYNAMIC_STEP = task(
    "DYNAMIC", "step", {"taskToExecute": "${workflow.input.which}"}, dynamicTaskNameParam="taskToExecute"
)
DYNAMIC_WF = workflow(DYNAMIC_STEP, simple("ship"))


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(DYNAMIC_WF, input={"which": "charge"}),
            expect(created=[("step", "SIMPLE", "SCHEDULED")]),
            id="schedules a SIMPLE task of the name its input gives",
        ),
        pytest.param(
            snapshot(DYNAMIC_WF, input={"which": "not a name!"}),
            expect(created=[("step", "DYNAMIC", "FAILED_WITH_TERMINAL_ERROR")], ending=("FAILED", "must name a task")),
            id="a value that names no task fails it terminally",
        ),
        pytest.param(
            snapshot(DYNAMIC_WF, input={}),
            expect(created=[("step", "DYNAMIC", "FAILED_WITH_TERMINAL_ERROR")], ending=("FAILED", "taskToExecute")),
            id="a missing input fails it, naming the input",
        ),
        pytest.param(
            snapshot(DYNAMIC_WF, named(row("step", "COMPLETED"), "charge"), input={"which": "other"}),
            expect(created=[("ship", "SIMPLE", "SCHEDULED")]),
            id="once scheduled, the row's name holds and the walk goes on",
        ),
    ],
)
def test_dynamic(snap, expected):
    assert_decides(snap, expected)


def test_dynamic_queues_on_the_named_definition_and_takes_its_policy():
    snap = dataclasses.replace(snapshot(DYNAMIC_WF, input={"which": "charge"}), task_defs={"charge": {"retryCount": 7}})
    created = run(snap).created
    assert [(r.task_def_name, r.queue, r.policy["retryCount"]) for r in created] == [("charge", "charge", 7)]


def test_a_failed_dynamic_task_is_retried_under_the_same_name():
    failed = named(row("step", "FAILED", reason="boom"), "charge")
    decision = run(snapshot(DYNAMIC_WF, failed, input={"which": "other"}))
    assert [(r.path, r.task_def_name, r.attempt) for r in decision.created] == [("step", "charge", 2)]


def test_dynamic_tasks_count_against_max_concurrent_tasks():
    wf = workflow(task("FORK_JOIN", "fan", forkTasks=[[simple("a")], [DYNAMIC_STEP]]), maxConcurrentTasks=1)
    decision = run(snapshot(wf, input={"which": "charge"}))
    assert [r.path for r in decision.created if r.kind == "worker"] == ["a"]
    assert decision.capped == 1


# --- EXCLUSIVE_JOIN -------------------------------------------------------------

EXCLUSIVE_WF = workflow(
    simple("task1"),
    switch(
        "decide", {"true": [simple("task2")], "false": [simple("task4")]}, [], inputs={"kind": "${workflow.input.d}"}
    ),
    task("EXCLUSIVE_JOIN", "ej", joinOn=["task2", "task4"], defaultExclusiveJoinTask=["task1"]),
)
DECIDED_TRUE = row("decide", "COMPLETED", type="SWITCH", output={"selectedCase": "true", "branch": "true"})
DECIDED_OTHER = row("decide", "COMPLETED", type="SWITCH", output={"selectedCase": "x", "branch": "default"})


@pytest.mark.parametrize(
    ("snap", "output"),
    [
        pytest.param(
            snapshot(
                EXCLUSIVE_WF,
                row("task1", "COMPLETED", output={"from": 1}),
                DECIDED_TRUE,
                row("task2", "COMPLETED", output={"from": 2}),
            ),
            {"from": 2},
            id="joins whichever of joinOn ran",
        ),
        pytest.param(
            snapshot(EXCLUSIVE_WF, row("task1", "COMPLETED", output={"from": 1}), DECIDED_OTHER),
            {"from": 1},
            id="none of joinOn ran: the first of defaultExclusiveJoinTask that did",
        ),
    ],
)
def test_exclusive_join(snap, output):
    decision = run(snap)
    assert [(r.path, r.type, r.status, r.output) for r in decision.created] == [
        ("ej", "EXCLUSIVE_JOIN", "COMPLETED", output)
    ]
    assert decision.ending is not None and decision.ending.status == "COMPLETED"


def test_exclusive_join_waits_for_the_branch_before_it():
    snap = snapshot(EXCLUSIVE_WF, row("task1", "COMPLETED"), DECIDED_TRUE, row("task2", "IN_PROGRESS"))
    assert_decides(snap, expect())


# --- FORK_JOIN_DYNAMIC, tasks chosen at run time ------------------------------------

TASKS_FORK = task(
    "FORK_JOIN_DYNAMIC",
    "fan",
    {"dynamicTasks": "${workflow.input.tasks}", "dynamicTasksInput": "${workflow.input.inputs}"},
    dynamicForkTasksParam="dynamicTasks",
    dynamicForkTasksInputParamName="dynamicTasksInput",
)
TASKS_FORK_WF = workflow(TASKS_FORK, task("JOIN", "fan_join", joinOn=[]), simple("after"))
TWO_TASKS = {
    "tasks": [{"name": "resize", "taskReferenceName": "r1"}, {"name": "resize", "taskReferenceName": "r2"}],
    "inputs": {"r1": {"size": 1}, "r2": {"size": "${not resolved}"}},
}


def _forked(snap_input: dict):
    """The fork row as its start wrote it (the branch tasks in its input)."""
    decision = run(snapshot(TASKS_FORK_WF, input=snap_input))
    return decision.created[0]


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(TASKS_FORK_WF, input=TWO_TASKS),
            expect(
                created=[
                    ("fan", "FORK_JOIN_DYNAMIC", "IN_PROGRESS"),
                    ("r1", "SIMPLE", "SCHEDULED"),
                    ("r2", "SIMPLE", "SCHEDULED"),
                ]
            ),
            id="one branch per task, all at once, rows named by reference",
        ),
        pytest.param(
            snapshot(TASKS_FORK_WF, input={"tasks": "nope"}),
            expect(
                created=[("fan", "FORK_JOIN_DYNAMIC", "FAILED_WITH_TERMINAL_ERROR")],
                ending=("FAILED", "must be a list of tasks"),
            ),
            id="a list that is not one fails it terminally",
        ),
        pytest.param(
            snapshot(TASKS_FORK_WF, input={"tasks": [{"name": "a", "taskReferenceName": "x", "type": "FORK_JOIN"}]}),
            expect(
                created=[("fan", "FORK_JOIN_DYNAMIC", "FAILED_WITH_TERMINAL_ERROR")],
                ending=("FAILED", "cannot be forked dynamically"),
            ),
            id="a structural branch type is refused",
        ),
        pytest.param(
            snapshot(TASKS_FORK_WF, input={"tasks": [{"name": "a"}]}),
            expect(
                created=[("fan", "FORK_JOIN_DYNAMIC", "FAILED_WITH_TERMINAL_ERROR")],
                ending=("FAILED", "taskReferenceName"),
            ),
            id="a branch without a reference name is refused",
        ),
        pytest.param(
            snapshot(TASKS_FORK_WF, input={"tasks": [{"name": "a", "taskReferenceName": "after"}]}),
            expect(
                created=[("fan", "FORK_JOIN_DYNAMIC", "FAILED_WITH_TERMINAL_ERROR")],
                ending=("FAILED", "'after' is already used"),
            ),
            id="a branch may not take a reference name of the workflow",
        ),
    ],
)
def test_tasks_fork(snap, expected):
    assert_decides(snap, expected)


def test_tasks_fork_inputs_are_taken_literally():
    decision = run(snapshot(TASKS_FORK_WF, input=TWO_TASKS))
    assert {r.path: r.input for r in decision.created[1:]} == {"r1": {"size": 1}, "r2": {"size": "${not resolved}"}}


def test_tasks_fork_joins_by_reference_name_and_goes_on():
    fork_row = _forked(TWO_TASKS)
    snap = snapshot(
        TASKS_FORK_WF,
        dataclasses.replace(fork_row, read_status=None, seq=0),
        named(row("r1", "COMPLETED", output={"w": 1}), "resize"),
        named(row("r2", "COMPLETED", output={"w": 2}), "resize"),
        input=TWO_TASKS,
    )
    decision = run(snap)
    assert [(r.path, r.status, r.output) for r in decision.created] == [
        ("fan_join", "COMPLETED", {"r1": {"w": 1}, "r2": {"w": 2}}),
        ("after", "SCHEDULED", {}),
    ]
    assert {r.path: r.status for r in decision.updated} == {"fan": "COMPLETED"}


def test_tasks_fork_fails_fast_and_cancels_its_other_branches():
    fork_row = _forked(TWO_TASKS)
    snap = snapshot(
        TASKS_FORK_WF,
        dataclasses.replace(fork_row, read_status=None, seq=0),
        named(row("r1", "FAILED_WITH_TERMINAL_ERROR", reason="bad image", policy=NO_RETRIES), "resize"),
        named(row("r2", "IN_PROGRESS"), "resize"),
        input=TWO_TASKS,
    )
    decision = run(snap)
    assert {r.path: r.status for r in decision.updated} == {"fan": "FAILED", "r2": "CANCELED"}
    assert decision.ending is not None and decision.ending.status == "FAILED"


def test_tasks_fork_takes_one_task_over_a_list_of_inputs():
    wf = workflow(
        task(
            "FORK_JOIN_DYNAMIC",
            "fan",
            {"forkTaskName": "resize", "forkTaskInputs": "${workflow.input.each}", "tasks": None},
            dynamicForkTasksParam="tasks",
        )
    )
    decision = run(snapshot(wf, input={"each": [{"size": 1}, {"size": 2}]}))
    assert [(r.path, r.task_def_name, r.input) for r in decision.created[1:]] == [
        ("resize_0", "resize", {"size": 1}),
        ("resize_1", "resize", {"size": 2}),
    ]


# --- DO_WHILE: Conductor's conditions, and items -------------------------------------

ITERATION_LOOP = workflow(
    {
        **loop("loopTask", "if ($.loopTask['iteration'] < $.value) { true; } else { false; }", simple("step")),
        "inputParameters": {"value": "${workflow.input.loop}"},
    }
)
LOOP_OPEN = row("loopTask", "IN_PROGRESS", type="DO_WHILE", output={"iteration": 1})


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(ITERATION_LOOP, LOOP_OPEN, row("loopTask[1].step", "COMPLETED"), input={"loop": 2}),
            expect(created=[("loopTask[2].step", "SIMPLE", "SCHEDULED")], updated={"loopTask": "IN_PROGRESS"}),
            id="$.loopTask['iteration'] reads the loop's iteration: another one",
        ),
        pytest.param(
            snapshot(
                ITERATION_LOOP,
                dataclasses.replace(LOOP_OPEN, output={"iteration": 2}),
                row("loopTask[1].step", "COMPLETED"),
                row("loopTask[2].step", "COMPLETED"),
                input={"loop": 2},
            ),
            expect(updated={"loopTask": "COMPLETED"}, ending=("COMPLETED", "")),
            id="and ends it when the iteration reaches the value",
        ),
    ],
)
def test_do_while_reads_the_loop_iteration(snap, expected):
    assert_decides(snap, expected)


def test_do_while_condition_reads_a_body_tasks_output_fields_both_ways():
    wf = workflow(loop("lp", "$.step.more && $.step.output.more", simple("step")))
    snap = snapshot(
        wf, dataclasses.replace(LOOP_OPEN, path="lp", ref="lp"), row("lp[1].step", "COMPLETED", output={"more": True})
    )
    assert [r.path for r in run(snap).created] == ["lp[2].step"]


ITEMS_LOOP = workflow(
    {
        **task(
            "DO_WHILE",
            "each",
            loopOver=[simple("step", inputs={"item": "${each.output.loopItem}", "at": "${each.output.loopIndex}"})],
            maxIterations=1000,
            items="${workflow.input.items}",
        )
    }
)


def test_do_while_over_items_runs_one_iteration_per_item():
    first = run(snapshot(ITEMS_LOOP, input={"items": ["a", "b"]}))
    assert [(r.path, r.input, r.output) for r in first.created] == [
        ("each", {"items": ["a", "b"]}, {"iteration": 1, "loopItem": "a", "loopIndex": 0}),
        ("each[1].step", {"item": "a", "at": 0}, {}),
    ]
    loop_row = dataclasses.replace(first.created[0], read_status=None, seq=0)
    second = run(snapshot(ITEMS_LOOP, loop_row, row("each[1].step", "COMPLETED"), input={"items": ["a", "b"]}))
    assert [(r.path, r.input) for r in second.created] == [("each[2].step", {"item": "b", "at": 1})]
    loop_row = dataclasses.replace(second.updated[0], read_status=None)
    done = run(
        snapshot(
            ITEMS_LOOP,
            loop_row,
            row("each[1].step", "COMPLETED"),
            row("each[2].step", "COMPLETED"),
            input={"items": ["a", "b"]},
        )
    )
    assert {r.path: r.status for r in done.updated} == {"each": "COMPLETED"}
    assert done.ending is not None and done.ending.status == "COMPLETED"


def test_do_while_over_no_items_completes_at_once():
    decision = run(snapshot(ITEMS_LOOP, input={"items": []}))
    assert [(r.path, r.status) for r in decision.created] == [("each", "COMPLETED")]


def test_do_while_over_items_that_are_not_a_list_fails():
    decision = run(snapshot(ITEMS_LOOP, input={"items": "ab"}))
    assert [(r.path, r.status) for r in decision.created] == [("each", "FAILED_WITH_TERMINAL_ERROR")]
    assert decision.ending is not None and "items must be a list" in decision.ending.reason


# --- WAIT with no duration, SUB_WORKFLOW named by an expression ---------------------------


def test_wait_with_no_duration_waits_with_no_timer():
    assert_decides(snapshot(workflow(task("WAIT", "approval"))), expect(created=[("approval", "WAIT", "IN_PROGRESS")]))


def test_a_sub_workflow_named_by_an_expression_starts_the_child_it_resolves_to():
    child = task("SUB_WORKFLOW", "sub", {}, subWorkflowParam={"name": "${workflow.input.which}", "version": None})
    decision = run(snapshot(workflow(child), input={"which": "billing"}))
    assert [(c.workflow_key, c.path_prefix) for c in decision.children] == [("billing@None", "sub.")]


def test_a_run_time_child_is_held_to_the_call_depth_limit():
    child = task("SUB_WORKFLOW", "sub", {}, subWorkflowParam={"name": "${workflow.input.which}", "version": None})
    decision = run(snapshot(workflow(child), input={"which": "billing"}, depth=4))
    assert decision.children == []
    assert decision.ending is not None and "call depth limit" in decision.ending.reason


def test_workflow_context_has_conductors_names():
    wf = workflow(simple("a", inputs={"t": "${workflow.workflowType}", "c": "${workflow.createTime}"}))
    created = run(snapshot(wf)).created
    assert created[0].input == {"t": "wf", "c": 0}


def test_cpewf_task_id_is_the_tasks_own_id_on_every_attempt():
    wf = workflow(simple("a", inputs={"me": "${CPEWF_TASK_ID}", "text": "id=${CPEWF_TASK_ID}"}))
    first = run(snapshot(wf)).created[0]
    assert first.input == {"me": str(first.id), "text": f"id={first.id}"}
    retried = run(snapshot(wf, row("a", "FAILED", reason="boom"))).created[0]
    assert retried.attempt == 2 and retried.input["me"] == str(retried.id)


@pytest.mark.parametrize(
    ("until", "seconds"),
    [("2026-06-01 05:00 PST", 3600), ("2026-06-01 13:00", 3600), ("2026-06-01 14:00 Europe/Paris", 0)],
)
def test_wait_until_takes_conductors_instants(until, seconds):
    decision = run(snapshot(workflow(task("WAIT", "w", {"until": until}))))
    if seconds:
        assert [(t.kind, (t.due_at - decision.created[0].scheduled_at).total_seconds()) for t in decision.timers] == [
            ("WAIT", seconds)
        ]
    else:
        assert decision.created[0].status == "COMPLETED"  # 14:00 in Paris is 12:00 UTC: due now
