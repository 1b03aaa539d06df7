"""Hand-built input for the pure decider (``executions.decider``): normalised
task dicts per type, rows in a given status, snapshots at a fixed ``NOW``,
deterministic ids and draws, and readable summaries of a decision.

Nothing here needs Django or a database. Task dicts are what
``metadata.validation.normalize_workflow`` would return (every task has
name, taskReferenceName, type, inputParameters and optional); each task's
name is its reference name, so a row's ``task_def_name`` is its ref.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import uuid
from collections.abc import Callable
from typing import Any

from executions.decider import decide
from executions.decider.decision import Decision
from executions.decider.snapshot import FAILURE, SUCCESS, Child, Row, Snapshot
from executions.retry import DEFAULT_POLICY
from metadata import task_types

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
EXECUTION_ID = uuid.UUID(int=0xE)
_ROW_IDS = uuid.UUID("00000000-0000-0000-0000-00000000a000")


# --- normalised task dicts --------------------------------------------------


def task(type: str, ref: str, inputs: dict | None = None, **fields: Any) -> dict:
    return {
        "name": ref,
        "taskReferenceName": ref,
        "type": type,
        "inputParameters": inputs or {},
        "optional": False,
        **fields,
    }


def simple(ref: str, **fields: Any) -> dict:
    return task("SIMPLE", ref, **fields)


def switch(
    ref: str,
    cases: dict[str, list],
    default: list | None = None,
    *,
    expression: str = "kind",
    evaluator: str = "value-param",
    inputs: dict | None = None,
) -> dict:
    """By default a value-param switch on ``${workflow.input.kind}``."""
    inputs = {"kind": "${workflow.input.kind}"} if inputs is None else inputs
    return task(
        "SWITCH",
        ref,
        inputs,
        evaluatorType=evaluator,
        expression=expression,
        decisionCases=cases,
        defaultCase=default or [],
    )


def fork(ref: str, *branches: list, **fields: Any) -> dict:
    return task("FORK_JOIN", ref, forkTasks=list(branches), **fields)


def join(ref: str, *on: str) -> dict:
    return task("JOIN", ref, joinOn=list(on))


def dynamic(ref: str, template: dict, items: Any = "${workflow.input.items}", max_concurrency: int = 4) -> dict:
    return task("FORK_JOIN_DYNAMIC", ref, {"items": items}, forkTask=template, maxConcurrency=max_concurrency)


def loop(ref: str, condition: str, *body: dict, max_iterations: int = 10) -> dict:
    return task("DO_WHILE", ref, loopCondition=condition, loopOver=list(body), maxIterations=max_iterations)


def sub_workflow(ref: str, child: str = "child", version: int = 1) -> dict:
    """Baked: the child's version is pinned."""
    return task(
        "SUB_WORKFLOW",
        ref,
        {"orderId": "${workflow.input.orderId}"},
        subWorkflowParam={"name": child, "version": version},
    )


def workflow(*tasks: dict, **settings: Any) -> dict:
    """A normalised workflow definition, every setting at its default."""
    return {
        "name": "wf",
        "description": "",
        "tasks": list(tasks),
        "inputParameters": [],
        "outputParameters": {},
        "variables": {},
        "failureWorkflow": None,
        "timeoutSeconds": 0,
        "timeoutPolicy": "TIME_OUT_WF",
        "maxConcurrentTasks": 0,
        "maxConcurrentExecutions": 0,
        "rateLimitConfig": None,
        **settings,
    }


def policy(**fields: Any) -> dict:
    return {**DEFAULT_POLICY, **fields}


NO_RETRIES = policy(retryCount=0)


# --- rows and snapshots -------------------------------------------------------


def row_id(path: str, attempt: int = 1) -> uuid.UUID:
    """A hand-built row's id: stable, and never one ``Ids`` hands out."""
    return uuid.uuid5(_ROW_IDS, f"{path}#{attempt}")


def row(
    path: str,
    status: str = "SCHEDULED",
    *,
    type: str = "SIMPLE",
    attempt: int = 1,
    output: dict | None = None,
    reason: str = "",
    policy: dict | None = None,
    optional: bool = False,
    input: dict | None = None,
    at: dt.datetime | None = None,
    child_execution_id: uuid.UUID | None = None,
) -> Row:
    """One attempt of the task at ``path`` (``fan[3].charge``: ref ``charge``).
    It was scheduled at ``at`` (a minute before NOW); an ended row ended at NOW."""
    ref = path.rsplit(".", 1)[-1]
    kind = task_types.kind_of(type)
    at = at or NOW - dt.timedelta(minutes=1)
    ended = status in SUCCESS or status in FAILURE
    return Row(
        id=row_id(path, attempt),
        path=path,
        ref=ref,
        type=type,
        kind=kind,
        task_def_name=ref,
        status=status,
        attempt=attempt,
        seq=0,
        scheduled_at=at,
        available_at=at,
        first_scheduled_at=at,
        input=input or {},
        output=output or {},
        reason=reason,
        optional=optional,
        policy=dict(policy or DEFAULT_POLICY),
        queue=ref if kind == "worker" else None,
        started_at=None if status == "SCHEDULED" else at,
        ended_at=NOW if ended else None,
        child_execution_id=child_execution_id,
    )


def snapshot(wf: dict, *rows: Row, now: dt.datetime = NOW, input: dict | None = None, **fields: Any) -> Snapshot:
    """The execution of ``wf`` at ``now`` with ``rows`` in this order (their
    seq). With rows, it was evaluated before (its timeout is armed)."""
    ordered = [dataclasses.replace(r, seq=seq) for seq, r in enumerate(rows)]
    fields.setdefault("evaluated_at", now - dt.timedelta(minutes=1) if rows else None)
    fields.setdefault("variables", dict(wf["variables"]))
    return Snapshot(
        execution_id=EXECUTION_ID,
        status="RUNNING",
        workflow=wf,
        workflows={},
        input=input or {},
        rows=ordered,
        now=now,
        task_defs={},
        next_seq=len(ordered),
        name=wf["name"],
        version=1,
        **fields,
    )


def child(status: str, output: dict | None = None, reason: str = "") -> Child:
    return Child(uuid.UUID(int=0xC), status, output or {}, reason)


# --- deciding -------------------------------------------------------------------


class Ids:
    """``make_id``: uuid ``first``, ``first`` + 1, … (never a hand-built row's id)."""

    def __init__(self, first: int = 1) -> None:
        self.counter = itertools.count(first)

    def __call__(self) -> uuid.UUID:
        return uuid.UUID(int=next(self.counter))


def ids_for(snap: Snapshot) -> Ids:
    """Ids that follow the snapshot's seq: the same for the same snapshot,
    and never one an earlier decision of the execution handed out."""
    return Ids(first=snap.next_seq + 1)


def run(snap: Snapshot, *, rand: float = 0.5, in_time: Callable[[], bool] = lambda: True) -> Decision:
    """``decide`` with a fixed draw (0.5: the middle of the jitter band)."""
    return decide(snap, rand=lambda: rand, make_id=ids_for(snap), in_time=in_time)


def applied(snap: Snapshot, decision: Decision, *, now: dt.datetime | None = None) -> Snapshot:
    """The snapshot after the executor applied ``decision`` (rows updated and
    inserted, variables, timeout, messages, the ending), read again at ``now``."""
    updated = {r.id: r for r in decision.updated}
    rows = [updated.get(r.id, r) for r in snap.rows] + decision.created
    consumed = {m for ids in decision.consumed_messages.values() for m in ids}
    fields: dict[str, Any] = {
        "rows": [dataclasses.replace(r, read_status=None) for r in rows],
        "next_seq": decision.next_seq,
        "now": now or snap.now,
        "messages": [m for m in snap.messages if m[0] not in consumed],
    }
    if decision.variables is not None:
        fields["variables"] = decision.variables
    if decision.evaluated:
        fields.update(evaluated_at=snap.now, deadline=decision.deadline or snap.deadline)
    if decision.ending is not None:
        fields["status"] = decision.ending.status
    return dataclasses.replace(snap, **fields)


# --- readable summaries -------------------------------------------------------


def seconds_from_now(at: dt.datetime) -> float:
    return (at - NOW).total_seconds()


def created(decision: Decision) -> list[tuple[str, str, str]]:
    return [(r.path, r.type, r.status) for r in decision.created]


def updated(decision: Decision) -> dict[str, str]:
    return {r.path: r.status for r in decision.updated}


def timers(decision: Decision) -> list[tuple[str, float]]:
    """(kind, seconds after NOW) of each timer armed."""
    return [(t.kind, seconds_from_now(t.due_at)) for t in decision.timers]


def children(decision: Decision) -> list[tuple[str, str]]:
    """(workflow key, path prefix) of each child started."""
    return [(c.workflow_key, c.path_prefix) for c in decision.children]


def delayed(decision: Decision) -> dict[str, float]:
    """path → seconds after NOW, of each created row not available at once (a retry's backoff)."""
    return {r.path: seconds_from_now(r.available_at) for r in decision.created if r.available_at != r.scheduled_at}


def consumed(decision: Decision) -> list[int]:
    return [m for ids in decision.consumed_messages.values() for m in ids]


def ending(decision: Decision) -> tuple[str, str] | None:
    return None if decision.ending is None else (decision.ending.status, decision.ending.reason)


def summary(decision: Decision) -> dict:
    """Everything a table compares, each part in its readable form."""
    return {
        "created": created(decision),
        "updated": updated(decision),
        "timers": timers(decision),
        "children": children(decision),
        "ending": ending(decision),
        "delayed": delayed(decision),
        "consumed": consumed(decision),
        "variables": decision.variables,
        "again": decision.again,
    }
