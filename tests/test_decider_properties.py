"""Properties of the pure decider over small random workflows (sequences of
SIMPLE tasks, forks of them, switches, now and then a DO_WHILE), driven as
the executor and the workers drive an execution: decide, apply the
decision, let a worker end one open task (complete it or fail it), decide
again, until the execution ends.

- no logical task (path) ever has two open rows, or two COMPLETED ones;
- once an ending is decided, deciding again schedules nothing;
- a fork branch that fails for good cancels every sibling's open row in
  that same decision;
- the same snapshot and draw give the same decision, and the snapshot is
  left as it was.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import itertools
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from executions.decider import decide
from executions.decider.decision import Decision
from executions.decider.snapshot import OPEN, Row, Snapshot
from metadata.tree import walk_tasks
from tests.decider_builders import applied, fork, ids_for, loop, simple, snapshot, switch, workflow

PROPERTY = settings(max_examples=100, derandomize=True, database=None, deadline=None)
MAX_STEPS = 80
# What a worker does with the task it draws: picks it up (IN_PROGRESS), or ends it.
WORKER_ACTIONS = ["COMPLETED"] * 3 + ["IN_PROGRESS", "FAILED", "FAILED_WITH_TERMINAL_ERROR"]


# --- random workflows ---------------------------------------------------------


@st.composite
def workflows(draw, *, with_fork: bool = False) -> tuple[dict, dict]:
    """A normalised workflow and its input: 1–4 steps, each a SIMPLE task, a
    fork of SIMPLE tasks, a value-param switch, or (rarely) a DO_WHILE."""
    refs = itertools.count()

    def worker_task() -> dict:
        return simple(
            f"t{next(refs)}",
            retryCount=draw(st.integers(0, 2)),
            retryDelaySeconds=draw(st.sampled_from([0, 1, 5])),
            optional=draw(st.sampled_from([False, False, False, True])),
        )

    def tasks(low: int, high: int) -> list[dict]:
        return [worker_task() for _ in range(draw(st.integers(low, high)))]

    def step(kind: str) -> dict:
        if kind == "fork":
            branches = [tasks(1, 2) for _ in range(draw(st.integers(2, 3)))]
            limit = draw(st.sampled_from([None, 1, 2]))
            extra = {"maxConcurrency": limit} if limit else {}
            return fork(f"fork{next(refs)}", *branches, optional=draw(st.sampled_from([False, False, True])), **extra)
        if kind == "switch":
            return switch(f"switch{next(refs)}", {"a": tasks(1, 2), "b": tasks(0, 1)}, tasks(0, 1))
        if kind == "loop":
            condition = f"$.iteration < {draw(st.integers(1, 3))}"
            return loop(f"loop{next(refs)}", condition, *tasks(1, 2), max_iterations=draw(st.integers(1, 3)))
        return worker_task()

    kinds = st.sampled_from(["simple", "simple", "simple", "fork", "fork", "switch", "loop"])
    steps = [step(draw(kinds)) for _ in range(draw(st.integers(1, 4)))]
    if with_fork:
        steps.insert(draw(st.integers(0, len(steps))), step("fork"))
    return workflow(*steps), {"kind": draw(st.sampled_from(["a", "b", "c"]))}


# --- driving an execution -------------------------------------------------------


@dataclass
class Step:
    before: Snapshot  # what was decided on
    as_read: Snapshot  # a deep copy of it, taken before deciding
    decision: Decision
    after: Snapshot  # the decision applied
    by_worker: Row | None  # the row a worker picked up or ended just before ``before``


def decided(snap: Snapshot, draw_seed: int = 7) -> Decision:
    """The decision with a fixed draw and fresh ids: the same inputs every call."""
    return decide(snap, rand=random.Random(draw_seed).random, make_id=ids_for(snap))


def worker_acts(snap: Snapshot, target: Row, status: str) -> tuple[Snapshot, Row]:
    """A worker takes ``target`` once it is available and leaves it
    ``status`` (IN_PROGRESS: picked up, still running): the snapshot read at
    that moment, and the row as the worker left it."""
    now = max(snap.now, target.available_at) + dt.timedelta(seconds=1)
    if status == "IN_PROGRESS":
        done = dataclasses.replace(target, status=status, started_at=target.started_at or now)
    else:
        completed = status == "COMPLETED"
        done = dataclasses.replace(
            target,
            status=status,
            started_at=target.started_at or now,
            ended_at=now,
            output={"by": "worker"} if completed else {},
            reason="" if completed else "boom",
        )
    rows = [done if r.id == target.id else r for r in snap.rows]
    return dataclasses.replace(snap, rows=rows, now=now), done


def drive(data: st.DataObject, wf: dict, inputs: dict) -> Iterator[Step]:
    snap, acted = snapshot(wf, input=inputs), None
    for _ in range(MAX_STEPS):
        as_read = copy.deepcopy(snap)
        decision = decided(snap)
        after = applied(snap, decision)
        yield Step(snap, as_read, decision, after, acted)
        if decision.ending is not None:
            return
        if decision.again:
            snap, acted = after, None
            continue
        dispatched = [r for r in after.rows if r.kind == "worker" and r.status in OPEN]
        assert dispatched, "the execution neither ends nor has a task to run"
        target = dispatched[data.draw(st.integers(0, len(dispatched) - 1), label="task")]
        snap, acted = worker_acts(after, target, data.draw(st.sampled_from(WORKER_ACTIONS), label="worker"))


# --- the properties ---------------------------------------------------------------


@PROPERTY
@given(workflows(), st.data())
def test_no_logical_task_is_scheduled_twice(case, data):
    for step in drive(data, *case):
        open_paths = Counter(r.path for r in step.after.rows if r.status in OPEN)
        completed_paths = Counter(r.path for r in step.after.rows if r.status == "COMPLETED")
        assert [p for p, n in open_paths.items() if n > 1] == []
        assert [p for p, n in completed_paths.items() if n > 1] == []


@PROPERTY
@given(workflows(), st.data())
def test_an_ended_execution_schedules_nothing(case, data):
    last = list(drive(data, *case))[-1]
    if last.decision.ending is None:
        return  # ran out of steps before it ended
    again = decided(last.after)
    assert (again.created, again.children, again.timers) == ([], [], [])
    assert [r for r in last.after.rows if r.status in OPEN] == []


@PROPERTY
@given(workflows(with_fork=True), st.data())
def test_a_failed_fork_branch_cancels_its_siblings(case, data):
    wf, _ = case
    branch_of = fork_branches(wf)
    for step in drive(data, *case):
        failed = step.by_worker
        if failed is None or failed.path not in branch_of or not fails_for_good(failed):
            continue
        fork_ref, branch = branch_of[failed.path]
        in_fork = [r for r in step.before.rows if r.status in OPEN and r.path in branch_of]
        siblings = [r for r in in_fork if branch_of[r.path][0] == fork_ref and branch_of[r.path][1] != branch]
        canceled = {r.id for r in step.decision.updated if r.status == "CANCELED"}
        assert [r.path for r in siblings if r.id not in canceled] == []
        optional = next(t for t in wf["tasks"] if t["taskReferenceName"] == fork_ref).get("optional")
        # The fork fails with its branch; an optional one completes with errors.
        expected = "COMPLETED_WITH_ERRORS" if optional else "FAILED"
        assert {r.path: r.status for r in step.decision.updated}[fork_ref] == expected


@PROPERTY
@given(workflows(), st.data())
def test_the_same_snapshot_and_draw_give_the_same_decision(case, data):
    for step in drive(data, *case):
        assert step.before == step.as_read
        assert decided(step.before) == step.decision
        assert step.before == step.as_read


def fork_branches(wf: dict) -> dict[str, tuple[str, int]]:
    """path → (fork ref, branch index) of every task inside a top-level fork."""
    found = {}
    for fork_task in (t for t in wf["tasks"] if t["type"] == "FORK_JOIN"):
        for index, branch in enumerate(fork_task["forkTasks"]):
            for inner, _ in walk_tasks(branch):
                found[inner["taskReferenceName"]] = (fork_task["taskReferenceName"], index)
    return found


def fails_for_good(row: Row) -> bool:
    """Ended in a failure no retry follows and ``optional`` does not absorb."""
    if row.optional:
        return False
    exhausted = row.status == "FAILED" and row.attempt > row.policy["retryCount"]
    return exhausted or row.status == "FAILED_WITH_TERMINAL_ERROR"
