"""The walk: one pass over the workflow definition against the execution's
task rows, saying what happens next.

``Walk.block`` runs a task list in order; ``Walk.task`` looks at one task's
latest row and hands it to its type's handler (``operators.HANDLERS``), or,
for a dispatched task (SIMPLE, system), waits for its result. Failures go
through ``Walk.failed`` (retry, absorb as optional, or fail the block), and
everything the walk wants changed is collected in its ``Decision``.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from executions import javascript, retry
from executions.decider import fork_join, operators
from executions.decider.decision import Decision, Ending, TimerSpec
from executions.decider.outcomes import DONE, DONE_EMPTY, ENDED, FAILED, RUNNING_OUTCOME, Outcome, Scope
from executions.decider.snapshot import FAILURE, OPEN, SUCCESS, Row, Snapshot
from metadata import task_types
from metadata.expressions import resolve
from metadata.tree import walk_tasks

# Operators are never retried: evaluating them again gives the same answer.
NOT_RETRIED = frozenset({"SWITCH", "FORK_JOIN", "JOIN", "FORK_JOIN_DYNAMIC", "DO_WHILE", "TERMINATE", "SET_VARIABLE"})
DISPATCHED = frozenset({"worker", "system"})
_SEGMENT = re.compile(r"[^.\[]+")
# Noted on a failed attempt whose retry could not start before the deadline.
PAST_DEADLINE = "not retried: the next attempt would start after the execution's deadline"


def decide(
    snap: Snapshot,
    *,
    rand: Callable[[], float],
    make_id: Callable[[], uuid.UUID],
    in_time: Callable[[], bool] = lambda: True,
) -> Decision:
    """What should happen next in this execution. ``rand`` draws retry
    jitter in [0, 1); ``make_id`` names new task rows; ``in_time`` is False
    once the decision has run long enough that a loop should start no
    further iteration (the executor's time budget: the walk reads no clock).
    ``snap`` is left as it was."""
    return Walk(snap, rand, make_id, in_time).run()


class _Context(Mapping):
    """The expression context of one scope: ``workflow``, ``item``/``index``,
    and every task reference, resolved from the innermost scope outwards."""

    def __init__(self, walk: Walk, scope: Scope, task_id: uuid.UUID | None = None) -> None:
        self.walk, self.scope, self.task_id = walk, scope, task_id

    def __getitem__(self, key: str) -> Any:
        if key == "workflow":
            return self.walk.workflow_context()
        if key == "CPEWF_TASK_ID" and self.task_id is not None:  # Conductor's: the task's own id
            return str(self.task_id)
        if key == "item" and self.scope.index is not None:
            return self.scope.item
        if key == "index" and self.scope.index is not None:
            return self.scope.index
        row = self.walk.find(key, self.scope.prefix)
        if row is None:
            raise KeyError(key)
        return {
            "input": row.input,
            "output": row.output,
            "status": row.status,
            "taskId": str(row.id),
            "reasonForIncompletion": row.reason,
            "attempt": row.attempt,
        }

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class Walk:
    def __init__(
        self, snap: Snapshot, rand: Callable[[], float], make_id: Callable[[], uuid.UUID], in_time: Callable[[], bool]
    ) -> None:
        self.snap, self.now, self.rand, self.make_id, self.in_time = snap, snap.now, rand, make_id, in_time
        # Rows a dynamic fork settled are not read, but their seqs stay taken.
        settled_seqs = (fork_join.settled_branches(r)[1] for r in snap.rows if r.type == "FORK_JOIN_DYNAMIC")
        self.decision = Decision(next_seq=max(snap.next_seq, 1 + max(settled_seqs, default=-1)))
        self.by_path: dict[str, list[Row]] = {}
        self.latest_by_ref: dict[str, Row] = {}
        self.changed: dict[uuid.UUID, Row] = {}
        self.variables = dict(snap.variables)
        self.messages = list(snap.messages)
        self.open_dispatchable = 0
        self.iterations_left = snap.max_loop_iterations
        self.script_limits = javascript.Limits(max_result_bytes=snap.max_output_bytes, max_depth=snap.max_json_depth)
        for read in sorted(snap.rows, key=lambda r: r.seq):
            row = copy.copy(read)  # the walk changes its own copies, never the snapshot's rows
            row.read_status = row.status
            self._index(row)
            if row.kind in DISPATCHED and row.status in OPEN:
                self.open_dispatchable += 1

    # --- bookkeeping ------------------------------------------------------
    def _index(self, row: Row) -> None:
        self.by_path.setdefault(row.path, []).append(row)
        self.latest_by_ref[row.ref] = row

    def latest(self, path: str) -> Row | None:
        rows = self.by_path.get(path)
        return rows[-1] if rows else None

    def find(self, ref: str, prefix: str) -> Row | None:
        """The row ``ref`` names from inside ``prefix``: the innermost scope's,
        else the most recent row of that reference anywhere."""
        scope = prefix
        while True:
            row = self.latest(scope + ref)
            if row is not None:
                return row
            if not scope:
                return self.latest_by_ref.get(ref)
            scope = _parent_prefix(scope)

    def change(self, row: Row, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(row, name, value)
        if row.read_status is not None:
            self.changed[row.id] = row

    def workflow_context(self) -> dict:
        snap = self.snap
        return {
            "input": snap.input,
            "variables": self.variables,
            "output": {},
            "executionId": str(snap.execution_id),
            "workflowId": str(snap.execution_id),
            "correlationId": snap.correlation_id,
            "name": snap.name,
            "version": snap.version,
            "parentExecutionId": str(snap.parent_execution_id) if snap.parent_execution_id else None,
            # Conductor's names: the definition's name; the creation time (epoch ms, a UUIDv7 id's first 48 bits).
            "workflowType": snap.name,
            "createTime": int.from_bytes(snap.execution_id.bytes[:6], "big"),
        }

    def resolve(self, value: Any, scope: Scope) -> Any:
        return resolve(value, _Context(self, scope))

    def evaluate(self, code: str, value: Any) -> Any:
        """A SWITCH or DO_WHILE script, under the decider's limits."""
        return javascript.evaluate(code, value, self.script_limits)

    def policy(self, task: dict) -> dict:
        """Defaults ← the task definition ← the workflow task's own overrides."""
        merged = dict(retry.DEFAULT_POLICY)
        merged.update({k: v for k, v in self.snap.task_defs.get(task["name"], {}).items() if k in merged})
        merged.update({k: v for k, v in task.items() if k in merged})
        return merged

    def new_row(
        self,
        task: dict,
        path: str,
        *,
        status: str,
        kind: str,
        inputs: dict,
        attempt: int = 1,
        available_at: dt.datetime | None = None,
        first_scheduled_at: dt.datetime | None = None,
        output: dict | None = None,
        reason: str = "",
    ) -> Row:
        seq = self.decision.next_seq
        self.decision.next_seq += 1
        task_type = task["type"]
        row = Row(
            id=self.make_id(),
            path=path,
            ref=task["taskReferenceName"],
            type=task_type,
            kind=kind,
            task_def_name=task["name"],
            status=status,
            attempt=attempt,
            seq=seq,
            scheduled_at=self.now,
            available_at=available_at or self.now,
            first_scheduled_at=first_scheduled_at or self.now,
            input=inputs,
            output=output or {},
            reason=reason,
            optional=task.get("optional", False),
            policy=self.policy(task),
            queue=_queue(task, kind),
        )
        if status != "SCHEDULED":
            row.started_at = self.now
        if status in SUCCESS or status in FAILURE:
            row.ended_at = self.now
        self._index(row)
        self.decision.created.append(row)
        return row

    def operator_row(
        self, task: dict, path: str, inputs: dict, status: str, output: dict | None = None, reason: str = ""
    ) -> Row:
        return self.new_row(task, path, status=status, kind="operator", inputs=inputs, output=output, reason=reason)

    def finish(self, row: Row, status: str, *, output: dict | None = None, reason: str | None = None) -> None:
        fields: dict[str, Any] = {"status": status, "ended_at": self.now}
        if output is not None:
            fields["output"] = output
        if reason is not None:
            fields["reason"] = reason
        self.change(row, **fields)

    def another_iteration(self) -> bool:
        """Whether this decision may run one more loop iteration: loops whose
        iterations end within the walk (operators only) are decided in
        bounded steps, at most ``max_loop_iterations`` per decision and none
        started after ``in_time()`` turns False; a follow-up decision goes on."""
        self.iterations_left -= 1
        return self.iterations_left > 0 and self.in_time()

    # --- the walk ---------------------------------------------------------
    def run(self) -> Decision:
        snap, decision = self.snap, self.decision
        if snap.status != "RUNNING":
            return decision  # ended, or paused: nothing is scheduled
        ending: Ending | None
        if snap.deadline is not None and self.now >= snap.deadline:
            # One budget: once the deadline has passed nothing more is
            # scheduled, retried or iterated, even if the workflow-timeout
            # timer has not fired yet (a sweeper lags, or a parent decides
            # before its own timer): the execution ends TIMED_OUT here.
            ending = Ending("TIMED_OUT", {}, deadline_reason(snap.deadline))
        else:
            if snap.evaluated_at is None:
                self.arm_workflow_deadline()
            outcome = self.block(snap.workflow["tasks"], Scope(snap.path_prefix))
            ending = self.ending(outcome)
        if ending is not None:
            decision.ending = ending
            self.cancel(row for rows in self.by_path.values() for row in rows)
        if self.variables != snap.variables:
            decision.variables = self.variables
        decision.updated = list(self.changed.values())
        return decision

    def arm_workflow_deadline(self) -> None:
        """The workflow timeout, armed once on the first evaluation. The
        deadline is the hard budget: a child inherits its parent's; its own
        timeout (TIME_OUT_WF) can only shorten it. An ALERT_ONLY timeout arms
        a timer that only alerts, and is no budget: it sets no deadline."""
        self.decision.evaluated = True
        deadline = self.snap.deadline
        timeout = float(self.snap.workflow.get("timeoutSeconds") or 0)
        if timeout > 0:
            own = self.now + dt.timedelta(seconds=timeout)
            if self.snap.workflow.get("timeoutPolicy") == "ALERT_ONLY":
                self.decision.timers.append(TimerSpec("WORKFLOW_TIMEOUT", own))
            else:
                deadline = own if deadline is None else min(deadline, own)
        if deadline is not None:
            self.decision.deadline = deadline
            self.decision.timers.append(TimerSpec("WORKFLOW_TIMEOUT", deadline))

    def ending(self, outcome: Outcome) -> Ending | None:
        if outcome.kind == DONE:
            outputs = self.snap.workflow.get("outputParameters") or {}
            output = self.resolve(outputs, Scope(self.snap.path_prefix)) if outputs else outcome.output
            return Ending("COMPLETED", output or {})
        if outcome.kind == FAILED:
            return Ending("TIMED_OUT" if outcome.timed_out else "FAILED", {}, outcome.reason, outcome.failed)
        if outcome.kind == ENDED:
            return outcome.ending
        return None

    def block(self, tasks: list[dict], scope: Scope) -> Outcome:
        """Run a sequence: each task in turn, on to the next once it is done."""
        last = DONE_EMPTY
        for task in tasks:
            outcome = self.task(task, scope, last)
            if outcome.kind != DONE:
                return outcome
            last = outcome
        return last

    def task(self, task: dict, scope: Scope, previous: Outcome) -> Outcome:
        concrete = operators.handler_of(task["type"]).concrete
        if concrete is not None:
            task = concrete(self, task, scope)  # resolved at run time: a DYNAMIC task's SIMPLE task
        path = scope.prefix + task["taskReferenceName"]
        row = self.latest(path)
        if row is None:
            return self.start(task, path, scope, previous)
        if row.status in FAILURE:
            return self.failed(task, row, scope, previous)
        progress = operators.handler_of(task["type"]).progress
        if progress is not None:
            return progress(self, task, row, scope)
        if row.status in SUCCESS:
            return Outcome(DONE, output=row.output)
        if row.status == "SCHEDULED" and row.kind not in DISPATCHED:
            return self.activate(task, row, scope)
        return RUNNING_OUTCOME

    # --- starting tasks ---------------------------------------------------
    def start(
        self,
        task: dict,
        path: str,
        scope: Scope,
        previous: Outcome = DONE_EMPTY,
        *,
        attempt: int = 1,
        available_at: dt.datetime | None = None,
        first_scheduled_at: dt.datetime | None = None,
    ) -> Outcome:
        kind = task_types.kind_of(task["type"])
        if kind in DISPATCHED and self.over_task_cap():
            self.decision.capped += 1  # blockedBy maxConcurrentTasks on the execution
            return RUNNING_OUTCOME  # maxConcurrentTasks: scheduled when a running task ends
        inputs = self.resolve(task["inputParameters"], scope)
        start = operators.handler_of(task["type"]).start
        if start is not None:
            return start(self, task, path, scope, inputs, previous)
        row = self.new_row(
            task,
            path,
            status="SCHEDULED",
            kind=kind,
            inputs=inputs,
            attempt=attempt,
            available_at=available_at,
            first_scheduled_at=first_scheduled_at,
        )
        if "CPEWF_TASK_ID" in str(task["inputParameters"]):  # resolved again, now the row has its id
            row.input = resolve(task["inputParameters"], _Context(self, scope, row.id))
        self.decision.timers.extend(task_timers(row, starts_budget=attempt == 1))
        if kind in DISPATCHED:
            self.open_dispatchable += 1
            return RUNNING_OUTCOME
        return self.activate(task, row, scope)

    def over_task_cap(self) -> bool:
        cap = int(self.snap.workflow.get("maxConcurrentTasks") or 0)
        return cap > 0 and self.open_dispatchable >= cap

    def activate(self, task: dict, row: Row, scope: Scope) -> Outcome:
        """A SUB_WORKFLOW or waiting task whose (retry) time has come starts."""
        if row.available_at > self.now:
            self.decision.timers.append(TimerSpec("DECIDE", row.available_at, row.id))
            return RUNNING_OUTCOME
        self.change(row, status="IN_PROGRESS", started_at=self.now)
        begin = operators.handler_of(task["type"]).begin
        return RUNNING_OUTCOME if begin is None else begin(self, task, row, scope)

    # --- failure ----------------------------------------------------------
    def failed(self, task: dict, row: Row, scope: Scope, previous: Outcome) -> Outcome:
        """A row ended in failure: retry it, absorb it (optional), or fail.
        Neither a cancellation nor a TIME_OUT_WF timeout is absorbed by
        ``optional``: one is the terminate, the other times out the workflow."""
        timed_out = row.status == "TIMED_OUT" and row.policy.get("timeoutPolicy") == "TIME_OUT_WF"
        if task["type"] not in NOT_RETRIED and row.status != "CANCELED" and not self.budget_spent(row):
            verdict = retry.should_retry(
                row.policy,
                status=row.status,
                reason=row.reason,
                attempt=row.attempt,
                budget=self.snap.budgets.get(row.task_def_name, (0, 0)),
            )
            if verdict.retry:
                delay = self.retry_delay(row)
                if delay is not None:
                    return self.retry(task, row, scope, delay)
                self.note(row, PAST_DEADLINE)
                if not row.optional:
                    return RUNNING_OUTCOME  # the workflow timeout ends it at the deadline
            elif verdict.budget_refused:
                self.decision.budget_refusals.append(row.task_def_name)
                self.change(row, reason=f"{verdict.reason}; last error: {row.reason}")
        absorbed = self.absorbed(row, timed_out=timed_out)
        if absorbed is not None:
            return absorbed
        return Outcome(
            FAILED,
            reason=f"task {row.path} {row.status}: {row.reason}".rstrip(": "),
            failed=(row.task_def_name,),
            timed_out=timed_out,
        )

    def absorbed(self, row: Row, *, timed_out: bool) -> Outcome | None:
        """An optional task or operator that failed (an operator: its fork
        branch, loop body or condition did) completes with errors, and its
        block goes on; None when it is not absorbed. Neither a cancellation
        nor a TIME_OUT_WF timeout is: one is the terminate, the other times
        out the workflow."""
        if row.optional and row.status != "CANCELED" and not timed_out:
            self.change(row, status="COMPLETED_WITH_ERRORS")
            return Outcome(DONE, output=row.output)
        return None

    def budget_spent(self, row: Row) -> bool:
        """The task's total timeoutSeconds covers every attempt and retry
        delay: once it has passed, no retry can fit in it (unless the policy
        only alerts)."""
        total = float(row.policy.get("timeoutSeconds") or 0)
        if total <= 0 or row.policy.get("timeoutPolicy") == "ALERT_ONLY":
            return False
        return self.now >= row.first_scheduled_at + dt.timedelta(seconds=total)

    def retry_delay(self, row: Row) -> float | None:
        """The delay before the next attempt of ``row``, or None when no
        delay in the jitter band lets it start before the execution's
        deadline (the one budget). A draw that would pass the deadline, when
        the shortest delay in the band would not, gives way to the shortest."""
        at_least = row.output.get("retryAfterSeconds", 0) if isinstance(row.output, dict) else 0
        at_least = float(at_least) if isinstance(at_least, (int, float)) and not isinstance(at_least, bool) else 0.0
        delay = retry.retry_delay(row.policy, row.attempt, self.rand(), at_least=at_least)
        deadline, ended = self.snap.deadline, row.ended_at or self.now
        if deadline is None or ended + dt.timedelta(seconds=delay) < deadline:
            return delay
        shortest = retry.shortest_delay(row.policy, row.attempt, at_least=at_least)
        return shortest if ended + dt.timedelta(seconds=shortest) < deadline else None

    def retry(self, task: dict, row: Row, scope: Scope, delay: float) -> Outcome:
        """The next attempt: a new row whose availableAt carries the delay."""
        self.decision.retries.append(row.task_def_name)
        ended = row.ended_at or self.now
        return self.start(
            task,
            row.path,
            scope,
            attempt=row.attempt + 1,
            available_at=ended + dt.timedelta(seconds=delay),
            first_scheduled_at=row.first_scheduled_at,
        )

    def note(self, row: Row, text: str) -> None:
        """Append ``text`` to a failed row's reason, once (decisions repeat)."""
        if text not in row.reason:
            self.change(row, reason=f"{row.reason}; {text}" if row.reason else text)

    # --- cancellation -----------------------------------------------------
    def cancel(self, rows: Iterable[Row]) -> None:
        for row in list(rows):
            if row.status in OPEN:
                self.finish(row, "CANCELED", reason="canceled")
                if row.child_execution_id:
                    self.decision.cancel_children.append(row.child_execution_id)

    def subtree_rows(self, task: dict, row: Row, scope: Scope) -> Iterator[Row]:
        """Every row under a fork: its branches' tasks, however deep."""
        refs = {child["taskReferenceName"] for child, _ in walk_tasks([task])} - {task["taskReferenceName"]}
        for path, rows in self.by_path.items():
            if not path.startswith(scope.prefix):
                continue
            rest = path[len(scope.prefix) :]
            head = _SEGMENT.match(rest)
            if head and (head.group(0) in refs or rest.startswith(row.ref + "[")):
                yield from rows


def task_timers(row: Row, *, starts_budget: bool) -> list[TimerSpec]:
    """The durable timers a newly scheduled attempt needs, each only when its
    timeout is non-zero. The total budget (timeoutSeconds) is armed by the
    attempt that ``starts_budget`` (attempt 1, or the attempt a manual retry
    makes), due ``first_scheduled_at + timeoutSeconds``, for every kind of task.
    scheduleToStart is armed per attempt, for dispatched tasks only: a waiting
    task is never picked up, so it would fire while it legitimately waits.
    startToClose and heartbeat are the lease's expiry (``executions.dispatch``)."""
    policy, timers = row.policy, []
    total = float(policy.get("timeoutSeconds") or 0)
    if total > 0 and starts_budget:
        timers.append(TimerSpec("TASK_TOTAL", row.first_scheduled_at + dt.timedelta(seconds=total), row.id))
    to_start = float(policy.get("scheduleToStartTimeout") or 0)
    if row.kind in DISPATCHED and to_start > 0:
        timers.append(TimerSpec("SCHEDULE_TO_START", row.available_at + dt.timedelta(seconds=to_start), row.id))
    return timers


def deadline_reason(deadline: dt.datetime) -> str:
    return f"workflow timed out: deadline {deadline.isoformat().replace('+00:00', 'Z')} passed"


def _queue(task: dict, kind: str) -> str | None:
    if kind == "worker":
        return task["name"]
    if kind == "system":
        return "@" + task["type"]
    return None


def _parent_prefix(prefix: str) -> str:
    """``a[1].b[2].`` → ``a[1].``; ``a[1].`` → ``""``."""
    trimmed = prefix[:-1]
    cut = trimmed.rfind(".")
    return "" if cut < 0 else trimmed[: cut + 1]
