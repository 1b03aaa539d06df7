"""Settled branches of a dynamic fork (``executions.decider.fork_join``):
finished branches are settled in runs of SETTLE_AT, the executor stops
reading them, and a decision on the rows that are left says the same as a
decision on every row. No database (tests/decider_builders.py); the
executor's side is in tests/test_wide_fork.py."""

from __future__ import annotations

import dataclasses
import random

import pytest

from executions.decider import decide
from executions.decider.fork_join import SETTLE_AT
from executions.decider.snapshot import OPEN, Row, Snapshot
from tests.decider_builders import Ids, dynamic, join, row, simple, snapshot, workflow

N = 10 * SETTLE_AT + 5
WIDE = workflow(dynamic("fan", simple("one", inputs={"n": "${item}"}), max_concurrency=4), join("j"))
ITEMS = list(range(N))


def fan(status: str = "IN_PROGRESS", **output) -> Row:
    return row("fan", status, type="FORK_JOIN_DYNAMIC", input={"items": ITEMS}, output={"items": N, **output})


def branch(index: int, status: str) -> Row:
    return row(f"fan[{index}].one", status, output={"n": index} if status == "COMPLETED" else {})


def wide(*rows: Row, **fields) -> Snapshot:
    return snapshot(WIDE, *rows, input={"items": ITEMS}, **fields)


def decide_on(snap: Snapshot):
    return decide(snap, rand=lambda: 0.5, make_id=Ids(first=10_000 + snap.next_seq))


def test_finished_branches_are_settled_in_runs():
    done = [branch(i, "COMPLETED") for i in range(SETTLE_AT)]
    running = [branch(i, "IN_PROGRESS") for i in range(SETTLE_AT, SETTLE_AT + 3)]
    snap = wide(fan(), *done, *running)
    decision = decide_on(snap)
    fork_row = next(r for r in snap.rows if r.path == "fan")
    assert decision.settle == {fork_row.id: [r.id for r in done]}
    (updated,) = [r for r in decision.updated if r.path == "fan"]
    assert updated.output["settled"] == SETTLE_AT
    settled_ids = {r.id for r in done}
    assert updated.output["settledSeq"] == max(r.seq for r in snap.rows if r.id in settled_ids)
    assert [r.path for r in decision.created] == [f"fan[{SETTLE_AT + 3}].one"]


def test_fewer_than_a_run_are_not_settled():
    snap = wide(fan(), *[branch(i, "COMPLETED") for i in range(SETTLE_AT - 1)], branch(SETTLE_AT - 1, "IN_PROGRESS"))
    decision = decide_on(snap)
    assert decision.settle == {}
    assert not decision.updated


def test_a_gap_stops_the_settled_run():
    """Only branches finished in a row from the first are settled."""
    rows = [branch(0, "IN_PROGRESS"), *[branch(i, "COMPLETED") for i in range(1, SETTLE_AT + 2)]]
    decision = decide_on(wide(fan(), *rows))
    assert decision.settle == {}


def test_without_the_settled_rows_the_fork_goes_on_past_them():
    """The settled branches are not read: the fork starts the next item,
    with a seq past every settled row's."""
    snap = wide(fan(settled=20, settledSeq=500), branch(20, "COMPLETED"), branch(21, "IN_PROGRESS"))
    decision = decide_on(snap)
    assert [r.path for r in decision.created] == ["fan[22].one", "fan[23].one", "fan[24].one"]
    assert min(r.seq for r in decision.created) == 501
    assert not decision.needs_all_rows


def test_joining_asks_for_every_row():
    """Every branch is done but the settled ones were not read: the
    decision asks for all rows and changes nothing."""
    rest = [branch(i, "COMPLETED") for i in range(20, N)]
    decision = decide_on(wide(fan(settled=20, settledSeq=500), *rest))
    assert decision.needs_all_rows
    assert not decision.created and not decision.updated and decision.ending is None


def test_on_every_row_the_fork_joins_and_unsettles():
    rows = [branch(i, "COMPLETED") for i in range(N)]
    snap = wide(fan(settled=20, settledSeq=19), *rows)
    decision = decide_on(snap)
    fork_row = snap.rows[0]
    assert {r.path: r.status for r in decision.updated} == {"fan": "COMPLETED"}
    assert decision.unsettle == [fork_row.id]
    (joined,) = decision.created
    assert joined.output == {f"fan[{i}].one": {"n": i} for i in range(N)}


def test_a_failed_branch_fails_the_fork_and_unsettles():
    rows = [branch(20, "FAILED"), branch(21, "IN_PROGRESS")]
    rows[0].policy["retryCount"] = 0
    decision = decide_on(wide(fan(settled=20, settledSeq=500), *rows))
    assert {r.path: r.status for r in decision.updated} == {"fan": "FAILED", "fan[21].one": "CANCELED"}
    assert decision.unsettle and decision.ending is not None and decision.ending.status == "FAILED"


@pytest.mark.parametrize("seed", range(5))
def test_deciding_without_settled_rows_says_what_deciding_on_every_row_says(seed):
    """Drive the fork to its end twice, finishing open tasks in the same
    random order: once deciding on every row, once as the executor does
    (settled rows left out, every row read when the decision asks). The
    same tasks are created, in the same order, and the join is the same."""
    every_row, _ = _drive(seed, leave_out_settled=False)
    left_out, reads = _drive(seed, leave_out_settled=True)
    assert every_row == left_out
    assert reads["all"] == 1  # the join, once
    assert reads["read"] < 0.4 * reads["every"]  # the other decisions read a fraction of the rows


def _drive(seed: int, *, leave_out_settled: bool) -> tuple[tuple[list[str], dict], dict]:
    draw = random.Random(seed)
    rows: dict = {}  # id → Row, in seq order
    settled_by: dict = {}
    base = wide()
    created: list[str] = []
    reads = {"all": 0, "read": 0, "every": 0}
    for _ in range(10 * N):
        read = [r for r in rows.values() if not (leave_out_settled and r.id in settled_by)]
        decision = decide_on(_snap(base, read, rows))
        if decision.needs_all_rows:
            assert leave_out_settled
            reads["all"] += 1
            decision = decide_on(_snap(base, list(rows.values()), rows))
        else:
            reads["read"] += len(read)
            reads["every"] += len(rows)
        for r in decision.updated:
            rows[r.id] = dataclasses.replace(r, read_status=None)
        for r in decision.created:
            rows[r.id] = dataclasses.replace(r, read_status=None)
            created.append(r.path)
        for fork_id, ids in decision.settle.items():
            settled_by.update(dict.fromkeys(ids, fork_id))
        for fork_id in decision.unsettle:
            settled_by = {k: v for k, v in settled_by.items() if v != fork_id}
        if decision.ending is not None:
            return (created, decision.ending.output), reads
        open_rows = [r for r in rows.values() if r.status in OPEN and r.type == "SIMPLE"]
        finished = draw.choice(open_rows)
        rows[finished.id] = dataclasses.replace(finished, status="COMPLETED", output={"n": finished.input["n"]})
    raise AssertionError("the fork did not end")


def _snap(base: Snapshot, read: list[Row], every: dict) -> Snapshot:
    ordered = sorted(read, key=lambda r: r.seq)
    return dataclasses.replace(
        base,
        rows=ordered,
        next_seq=max((r.seq for r in ordered), default=-1) + 1,
        evaluated_at=base.now if every else None,
    )
