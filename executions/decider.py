"""The decider: (snapshot, now) → decision. Pure.

It walks the workflow definition against the task rows of the execution and
says what happens next: which tasks to schedule, which operators complete
(operators are evaluated here, never dispatched), which rows to retry,
cancel or absorb, which children to start, and whether the execution ends.
It reads no clock (``snapshot.now``), no database and no randomness but the
``rand`` it is given; the executor (``executions.executor``) applies the
decision under the execution's row lock.

Paths name logical tasks: ``charge``; ``fan[3].charge`` (item 3 of a dynamic
fork); ``loop[2].step`` (iteration 2 of a DO_WHILE); ``sub.inner`` (a task of
the child started by SUB_WORKFLOW ``sub``). Static fork branches and switch
cases add nothing: reference names are unique in a definition.
"""
from __future__ import annotations

import datetime as dt
import random
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from executions import javascript, retry
from executions.state import FAILURE, OPEN, SUCCESS, Decision, Ending, Row, Snapshot, StartChild, TimerSpec
from metadata import durations, task_types
from metadata.baking import snapshot_key
from metadata.expressions import case_key, resolve
from metadata.tree import walk_tasks
from nodeflow.ids import new_id

DONE, RUNNING, FAILED, ENDED = "DONE", "RUNNING", "FAILED", "ENDED"
# Operators are never retried: evaluating them again gives the same answer.
NOT_RETRIED = frozenset({"SWITCH", "FORK_JOIN", "JOIN", "FORK_JOIN_DYNAMIC", "DO_WHILE", "TERMINATE", "SET_VARIABLE"})
DISPATCHED = frozenset({"worker", "system"})
_SEGMENT = re.compile(r"[^.\[]+")
# Noted on a failed attempt whose retry could not start before the deadline.
PAST_DEADLINE = "not retried: the next attempt would start after the execution's deadline"


@dataclass
class Outcome:
    kind: str
    reason: str = ""
    failed: tuple[str, ...] = ()
    output: dict = field(default_factory=dict)
    joins: dict = field(default_factory=dict)
    ending: Ending | None = None
    timed_out: bool = False


DONE_EMPTY = Outcome(DONE)
RUNNING_OUTCOME = Outcome(RUNNING)


@dataclass(frozen=True)
class Scope:
    """Where a task list is being evaluated: the path prefix of its rows, and
    inside a dynamic fork, the item and its index."""

    prefix: str
    item: Any = None
    index: int | None = None


def decide(snap: Snapshot, *, rand: Callable[[], float] = random.random, make_id: Callable[[], uuid.UUID] = new_id,
           in_time: Callable[[], bool] = lambda: True) -> Decision:
    """What should happen next in this execution. ``in_time``: False once
    the decision has run long enough that a loop should start no further
    iteration (the executor's time budget; the walk reads no clock)."""
    return _Walk(snap, rand, make_id, in_time).run()


class _Context(Mapping):
    """The expression context of one scope: ``workflow``, ``item``/``index``,
    and every task reference, resolved from the innermost scope outwards."""

    def __init__(self, walk: _Walk, scope: Scope) -> None:
        self.walk, self.scope = walk, scope

    def __getitem__(self, key: str) -> Any:
        if key == "workflow":
            return self.walk.workflow_context()
        if key == "item" and self.scope.index is not None:
            return self.scope.item
        if key == "index" and self.scope.index is not None:
            return self.scope.index
        row = self.walk.find(key, self.scope.prefix)
        if row is None:
            raise KeyError(key)
        return {
            "input": row.input, "output": row.output, "status": row.status, "taskId": str(row.id),
            "reasonForIncompletion": row.reason, "attempt": row.attempt,
        }

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class _Walk:
    def __init__(self, snap: Snapshot, rand: Callable[[], float], make_id: Callable[[], uuid.UUID],
                 in_time: Callable[[], bool]) -> None:
        self.snap, self.now, self.rand, self.make_id, self.in_time = snap, snap.now, rand, make_id, in_time
        self.iterations_left = snap.max_loop_iterations
        self.decision = Decision(next_seq=snap.next_seq)
        self.by_path: dict[str, list[Row]] = {}
        self.latest_by_ref: dict[str, Row] = {}
        self.changed: dict[uuid.UUID, Row] = {}
        self.variables = dict(snap.variables)
        self.messages = list(snap.messages)
        self.open_dispatchable = 0
        for row in sorted(snap.rows, key=lambda r: r.seq):
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
            "input": snap.input, "variables": self.variables, "output": {},
            "executionId": str(snap.execution_id), "workflowId": str(snap.execution_id),
            "correlationId": snap.correlation_id, "name": snap.name, "version": snap.version,
            "parentExecutionId": str(snap.parent_execution_id) if snap.parent_execution_id else None,
        }

    def resolve(self, value: Any, scope: Scope) -> Any:
        return resolve(value, _Context(self, scope))

    def policy(self, task: dict) -> dict:
        """Defaults ← the task definition ← the workflow task's own overrides."""
        merged = dict(retry.DEFAULT_POLICY)
        merged.update({k: v for k, v in self.snap.task_defs.get(task["name"], {}).items() if k in merged})
        merged.update({k: v for k, v in task.items() if k in merged})
        return merged

    def new_row(self, task: dict, path: str, *, status: str, kind: str, inputs: dict, attempt: int = 1,
                available_at: dt.datetime | None = None, first_scheduled_at: dt.datetime | None = None,
                output: dict | None = None, reason: str = "") -> Row:
        seq = self.decision.next_seq
        self.decision.next_seq += 1
        task_type = task["type"]
        row = Row(
            id=self.make_id(), path=path, ref=task["taskReferenceName"], type=task_type, kind=kind,
            task_def_name=task["name"], status=status, attempt=attempt, seq=seq, scheduled_at=self.now,
            available_at=available_at or self.now, first_scheduled_at=first_scheduled_at or self.now,
            input=inputs, output=output or {}, reason=reason, optional=task.get("optional", False),
            policy=self.policy(task), queue=_queue(task, kind),
        )
        if status != "SCHEDULED":
            row.started_at = self.now
        if status in SUCCESS or status in FAILURE:
            row.ended_at = self.now
        self._index(row)
        self.decision.created.append(row)
        return row

    def finish(self, row: Row, status: str, *, output: dict | None = None, reason: str | None = None) -> None:
        fields: dict[str, Any] = {"status": status, "ended_at": self.now}
        if output is not None:
            fields["output"] = output
        if reason is not None:
            fields["reason"] = reason
        self.change(row, **fields)

    # --- the walk ---------------------------------------------------------
    def run(self) -> Decision:
        snap, decision = self.snap, self.decision
        if snap.deadline is not None and self.now >= snap.deadline:
            # One budget: once the deadline has passed nothing more is
            # scheduled, retried or iterated, even if the workflow-timeout
            # timer has not fired yet (a sweeper lags, or a parent decides
            # before its own timer): the execution ends TIMED_OUT here.
            ending = Ending("TIMED_OUT", {}, deadline_reason(snap.deadline))
            outcome = RUNNING_OUTCOME
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
        path = scope.prefix + task["taskReferenceName"]
        row = self.latest(path)
        if row is None:
            return self.start(task, path, scope, previous)
        handler = getattr(self, f"progress_{task['type'].lower()}", None)
        if row.status in FAILURE:
            return self.failed(task, row, scope, previous)
        if handler is not None:
            return handler(task, row, scope)
        if row.status in SUCCESS:
            return Outcome(DONE, output=row.output)
        if row.status == "SCHEDULED" and row.kind not in DISPATCHED:
            return self.activate(task, row, scope)
        return RUNNING_OUTCOME

    # --- starting tasks ---------------------------------------------------
    def start(self, task: dict, path: str, scope: Scope, previous: Outcome = DONE_EMPTY, *, attempt: int = 1,
              available_at: dt.datetime | None = None, first_scheduled_at: dt.datetime | None = None) -> Outcome:
        kind = task_types.kind_of(task["type"])
        if kind in DISPATCHED and self.over_task_cap():
            self.decision.capped += 1  # blockedBy maxConcurrentTasks on the execution
            return RUNNING_OUTCOME  # maxConcurrentTasks: scheduled when a running task ends
        inputs = self.resolve(task["inputParameters"], scope)
        if kind == "operator" and task["type"] != "SUB_WORKFLOW":
            return getattr(self, f"start_{task['type'].lower()}")(task, path, scope, inputs, previous)
        row = self.new_row(task, path, status="SCHEDULED", kind=kind, inputs=inputs, attempt=attempt,
                           available_at=available_at, first_scheduled_at=first_scheduled_at)
        self.arm_task_timers(row, attempt)
        if kind in DISPATCHED:
            self.open_dispatchable += 1
            return RUNNING_OUTCOME
        return self.activate(task, row, scope)

    def over_task_cap(self) -> bool:
        cap = int(self.snap.workflow.get("maxConcurrentTasks") or 0)
        return cap > 0 and self.open_dispatchable >= cap

    def arm_task_timers(self, row: Row, attempt: int) -> None:
        self.decision.timers.extend(task_timers(row, starts_budget=attempt == 1))

    def activate(self, task: dict, row: Row, scope: Scope) -> Outcome:
        """A SUB_WORKFLOW or waiting task whose (retry) time has come starts."""
        if row.available_at > self.now:
            self.decision.timers.append(TimerSpec("DECIDE", row.available_at, row.id))
            return RUNNING_OUTCOME
        self.change(row, status="IN_PROGRESS", started_at=self.now)
        return getattr(self, f"begin_{task['type'].lower()}", self.begin_waiting)(task, row, scope)

    def begin_waiting(self, task: dict, row: Row, scope: Scope) -> Outcome:
        return RUNNING_OUTCOME  # HUMAN and WAIT_FOR_WEBHOOK wait for the API

    def begin_wait(self, task: dict, row: Row, scope: Scope) -> Outcome:
        try:
            if "until" in row.input:
                due = durations.parse_instant(row.input["until"])
            else:
                due = self.now + dt.timedelta(seconds=durations.parse_duration(row.input.get("duration")))
        except ValueError as exc:
            self.finish(row, "FAILED_WITH_TERMINAL_ERROR", reason=f"WAIT: {exc}")
            return self.failed(task, row, scope, DONE_EMPTY)
        if due <= self.now:
            self.finish(row, "COMPLETED")
            return Outcome(DONE)
        self.decision.timers.append(TimerSpec("WAIT", due, row.id))
        return RUNNING_OUTCOME

    def begin_pull_workflow_messages(self, task: dict, row: Row, scope: Scope) -> Outcome:
        return self.progress_pull_workflow_messages(task, row, scope)

    def begin_sub_workflow(self, task: dict, row: Row, scope: Scope) -> Outcome:
        if self.snap.depth + 1 > task_types.MAX_CALL_DEPTH:
            self.finish(row, "FAILED_WITH_TERMINAL_ERROR",
                        reason=f"a child started from depth {self.snap.depth} exceeds the call depth limit {task_types.MAX_CALL_DEPTH}")
            return self.failed(task, row, scope, DONE_EMPTY)
        param = task["subWorkflowParam"]
        key = snapshot_key(param["name"], param["version"])
        self.decision.children.append(StartChild(row.id, key, row.input, row.path + "."))
        return RUNNING_OUTCOME

    # --- operators --------------------------------------------------------
    def operator_row(self, task: dict, path: str, inputs: dict, status: str, output: dict | None = None, reason: str = "") -> Row:
        return self.new_row(task, path, status=status, kind="operator", inputs=inputs, output=output, reason=reason)

    def start_set_variable(self, task, path, scope, inputs, previous) -> Outcome:
        self.variables.update(inputs)
        self.operator_row(task, path, inputs, "COMPLETED")
        return Outcome(DONE)

    def start_terminate(self, task, path, scope, inputs, previous) -> Outcome:
        status = inputs.get("terminationStatus") or "COMPLETED"
        if status not in task_types.TERMINATION_STATUSES:
            status = "FAILED"
        output = inputs.get("workflowOutput")
        output = output if isinstance(output, dict) else ({} if output is None else {"result": output})
        reason = str(inputs.get("terminationReason") or "")
        self.operator_row(task, path, inputs, "COMPLETED", output=output)
        return Outcome(ENDED, ending=Ending(status, output, reason, (task["name"],) if status == "FAILED" else ()))

    def start_join(self, task, path, scope, inputs, previous) -> Outcome:
        wanted = task.get("joinOn") or []
        joined = previous.joins
        if wanted:
            joined = {key: out for key, out in joined.items() if _ref_of(key) in wanted}
            for ref in wanted:
                if not any(_ref_of(key) == ref for key in joined):
                    row = self.find(ref, scope.prefix)
                    if row is not None:
                        joined[ref] = row.output
        self.operator_row(task, path, inputs, "COMPLETED", output=joined)
        return Outcome(DONE, output=joined)

    def start_switch(self, task, path, scope, inputs, previous) -> Outcome:
        try:
            if task["evaluatorType"] == "javascript":
                case = case_key(javascript.evaluate(task["expression"], inputs))
            else:
                case = case_key(inputs.get(task["expression"]))
        except javascript.ScriptError as exc:
            row = self.operator_row(task, path, inputs, "FAILED_WITH_TERMINAL_ERROR", reason=f"SWITCH expression: {exc}")
            return self.failed(task, row, scope, previous)
        selected = case if case in task["decisionCases"] else "default"
        row = self.operator_row(task, path, inputs, "COMPLETED", output={"selectedCase": case, "branch": selected})
        return self.progress_switch(task, row, scope)

    def progress_switch(self, task, row, scope) -> Outcome:
        branch = row.output.get("branch")
        tasks = task["decisionCases"].get(branch, []) if branch != "default" else task.get("defaultCase", [])
        return self.block(tasks, scope)

    def start_fork_join(self, task, path, scope, inputs, previous) -> Outcome:
        return self.progress_fork_join(task, self.operator_row(task, path, inputs, "IN_PROGRESS"), scope)

    def progress_fork_join(self, task, row, scope) -> Outcome:
        branches = [(scope, branch) for branch in task["forkTasks"]]
        return self.fork(task, row, scope, branches, task.get("maxConcurrency") or len(branches))

    def start_fork_join_dynamic(self, task, path, scope, inputs, previous) -> Outcome:
        items = inputs.get("items")
        if not isinstance(items, list):
            row = self.operator_row(task, path, inputs, "FAILED_WITH_TERMINAL_ERROR",
                                    reason=f"FORK_JOIN_DYNAMIC: items must be a list, not {type(items).__name__}")
            return self.failed(task, row, scope, previous)
        if len(items) > self.snap.max_fork_items:
            row = self.operator_row(task, path, {"items": len(items)}, "FAILED_WITH_TERMINAL_ERROR",
                                    reason=f"FORK_JOIN_DYNAMIC: {len(items)} items exceed the limit of {self.snap.max_fork_items}")
            return self.failed(task, row, scope, previous)
        row = self.operator_row(task, path, inputs, "IN_PROGRESS", output={"items": len(items)})
        return self.progress_fork_join_dynamic(task, row, scope)

    def progress_fork_join_dynamic(self, task, row, scope) -> Outcome:
        items = row.input.get("items") or []
        branches = [
            (Scope(f"{row.path}[{index}].", item, index), [task["forkTask"]]) for index, item in enumerate(items)
        ]
        return self.fork(task, row, scope, branches, task["maxConcurrency"])

    def fork(self, task: dict, row: Row, scope: Scope, branches: list[tuple[Scope, list[dict]]], limit: int) -> Outcome:
        """Run branches side by side, at most ``limit`` at once; fail fast."""
        running, joins = 0, {}
        for branch_scope, tasks in branches:
            started = self.latest(branch_scope.prefix + tasks[0]["taskReferenceName"]) is not None
            if not started and running >= limit:
                running += 1  # waits for a free slot
                continue
            outcome = self.block(tasks, branch_scope)
            if outcome.kind == RUNNING:
                running += 1
            elif outcome.kind in (FAILED, ENDED):
                if outcome.kind == FAILED:
                    self.cancel(self.subtree_rows(task, row, scope))
                    self.finish(row, "FAILED", reason=outcome.reason)
                return outcome
            else:
                joins.update(self.branch_outputs(tasks, branch_scope, scope))
        if running:
            return RUNNING_OUTCOME
        if row.status != "COMPLETED":
            self.finish(row, "COMPLETED", output={**row.output, "joined": len(joins)})
        return Outcome(DONE, joins=joins)

    def branch_outputs(self, tasks: list[dict], branch_scope: Scope, scope: Scope) -> dict:
        outputs = {}
        for task, _ in walk_tasks(tasks):
            found = self.latest(branch_scope.prefix + task["taskReferenceName"])
            if found is not None and found.status in SUCCESS:
                outputs[found.path[len(scope.prefix):]] = found.output
        return outputs

    def start_do_while(self, task, path, scope, inputs, previous) -> Outcome:
        row = self.operator_row(task, path, inputs, "IN_PROGRESS", output={"iteration": 1})
        return self.progress_do_while(task, row, scope)

    def progress_do_while(self, task, row, scope) -> Outcome:
        if row.status in SUCCESS:
            return Outcome(DONE, output=row.output)
        while True:
            iteration = int(row.output.get("iteration", 1))
            inner = Scope(f"{row.path}[{iteration}].", scope.item, scope.index)
            outcome = self.block(task["loopOver"], inner)
            if outcome.kind == FAILED:
                self.finish(row, "FAILED", reason=outcome.reason)
                return outcome
            if outcome.kind != DONE:
                return outcome
            verdict = self.loop_again(task, row, scope, inner, iteration)
            if verdict is not None:
                return verdict
            self.change(row, output={**row.output, "iteration": iteration + 1})
            if not self.another_iteration():
                self.decision.again = True
                return RUNNING_OUTCOME

    def another_iteration(self) -> bool:
        """Whether this decision may run one more loop iteration: loops whose
        iterations end within the walk (operators only) are decided in
        bounded steps, at most ``max_loop_iterations`` per decision and none
        started after ``in_time()`` turns False; a follow-up decision goes on."""
        self.iterations_left -= 1
        return self.iterations_left > 0 and self.in_time()

    def loop_again(self, task: dict, row: Row, scope: Scope, inner: Scope, iteration: int) -> Outcome | None:
        """None to run another iteration, else how the loop ended."""
        value = dict(self.resolve(task["inputParameters"], inner))
        value["iteration"] = iteration
        for child, _ in walk_tasks(task["loopOver"]):
            found = self.latest(inner.prefix + child["taskReferenceName"])
            if found is not None:
                value[child["taskReferenceName"]] = {"output": found.output, "status": found.status}
        try:
            again = javascript.truthy(javascript.evaluate(task["loopCondition"], value))
        except javascript.ScriptError as exc:
            self.finish(row, "FAILED_WITH_TERMINAL_ERROR", reason=f"DO_WHILE loopCondition: {exc}")
            return Outcome(FAILED, reason=f"{row.path}: {row.reason}", failed=(task["name"],))
        if not again:
            self.finish(row, "COMPLETED", output={"iteration": iteration})
            return Outcome(DONE, output=row.output)
        if iteration >= task["maxIterations"]:
            reason = f"DO_WHILE ran out of iterations: loopCondition still true after maxIterations ({task['maxIterations']})"
            self.finish(row, "FAILED", reason=reason)
            return Outcome(FAILED, reason=f"{row.path}: {reason}", failed=(task["name"],))
        return None

    def progress_sub_workflow(self, task, row, scope) -> Outcome:
        if row.status in SUCCESS:
            return Outcome(DONE, output=row.output)
        if row.status == "SCHEDULED":
            return self.activate(task, row, scope)
        child = self.snap.children.get(row.child_execution_id) if row.child_execution_id else None
        if child is None or child.status in ("RUNNING", "PAUSED"):
            return RUNNING_OUTCOME
        if child.status == "COMPLETED":
            self.finish(row, "COMPLETED", output={**child.output, "subWorkflowId": str(child.id)})
            return Outcome(DONE, output=row.output)
        # A terminated child is not retried or absorbed by ``optional``: that
        # would swallow the terminate (SPEC §6). Its task ends CANCELED.
        status = "CANCELED" if child.status == "TERMINATED" else "FAILED"
        self.finish(row, status, reason=f"sub-workflow {child.id} {child.status}: {child.reason}")
        return self.failed(task, row, scope, DONE_EMPTY)

    def progress_pull_workflow_messages(self, task, row, scope) -> Outcome:
        if row.status in SUCCESS:
            return Outcome(DONE, output=row.output)
        if row.status == "SCHEDULED":
            return self.activate(task, row, scope)
        if not self.messages:
            return RUNNING_OUTCOME
        size = row.input.get("batchSize", 1)
        size = size if isinstance(size, int) and size > 0 else 1
        taken, self.messages = self.messages[:size], self.messages[size:]
        self.decision.consumed_messages[row.id] = [message_id for message_id, _ in taken]
        self.finish(row, "COMPLETED", output={"messages": [payload for _, payload in taken]})
        return Outcome(DONE, output=row.output)

    # --- failure ----------------------------------------------------------
    def failed(self, task: dict, row: Row, scope: Scope, previous: Outcome) -> Outcome:
        """A row ended in failure: retry it, absorb it (optional), or fail.
        Neither a cancellation nor a TIME_OUT_WF timeout is absorbed by
        ``optional``: one is the terminate, the other times out the workflow."""
        timed_out = row.status == "TIMED_OUT" and row.policy.get("timeoutPolicy") == "TIME_OUT_WF"
        if task["type"] not in NOT_RETRIED and row.status != "CANCELED" and not self.budget_spent(row):
            verdict = retry.should_retry(row.policy, status=row.status, reason=row.reason, attempt=row.attempt,
                                         budget=self.snap.budgets.get(row.task_def_name, (0, 0)))
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
        if row.optional and row.status != "CANCELED" and not timed_out:
            self.change(row, status="COMPLETED_WITH_ERRORS")
            return Outcome(DONE, output=row.output)
        return Outcome(FAILED, reason=f"task {row.path} {row.status}: {row.reason}".rstrip(": "),
                       failed=(row.task_def_name,), timed_out=timed_out)

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
        return self.start(task, row.path, scope, attempt=row.attempt + 1,
                          available_at=ended + dt.timedelta(seconds=delay), first_scheduled_at=row.first_scheduled_at)

    def note(self, row: Row, text: str) -> None:
        """Append ``text`` to a failed row's reason, once (decisions repeat)."""
        if text not in row.reason:
            self.change(row, reason=f"{row.reason}; {text}" if row.reason else text)

    # --- cancellation -----------------------------------------------------
    def cancel(self, rows) -> None:
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
            rest = path[len(scope.prefix):]
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


def _ref_of(key: str) -> str:
    """``fan[3].charge`` → ``charge``; ``charge`` → ``charge``."""
    return key.rsplit(".", 1)[-1]
