"""Task updates from Conductor workers, fenced without a lease token.

Conductor has no lease token: a ``TaskResult`` names the task (one attempt
of it: every attempt is its own task row) and the worker. The update is
applied through the worker API's own services (``executions.results``)
with the token of the lease that attempt holds *now*, read here, and only
if that lease is the named worker's. So a result for an attempt that is no
longer leased (it ended, expired, or was offered again) or that another
worker holds gets 409 and changes nothing, as a stale token does on Node
Flow's own routes: ``results`` checks the token under the execution's lock,
so a lease that changed between the read here and the write is refused too.

Statuses, as Conductor's server takes them:

- COMPLETED, FAILED (retried by the policy), FAILED_WITH_TERMINAL_ERROR
  (never retried): the attempt ends.
- IN_PROGRESS with ``extendLease``: a heartbeat (the lease is extended,
  nothing else changes).
- IN_PROGRESS otherwise: back to the queue, offered again after
  ``callbackAfterSeconds`` (at once for 0), the output kept.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from rest_framework.exceptions import PermissionDenied

from conductor_api.serializers import TaskResultSerializer
from executions import lifecycle, results
from executions.models import OPEN_TASK, Task, TaskStatus
from nodeflow.auth import Principal, Scope
from nodeflow.errors import Conflict, InvalidField, NotFound
from nodeflow.models import Namespace

# Conductor puts an IN_PROGRESS task with no callback back in its queue at
# once; Node Flow's put-back needs a delay (0 renews the lease instead).
AT_ONCE_S = 0.001


@dataclass(frozen=True)
class Update:
    """A validated ``TaskResult`` body (conductor.serializers.TaskResultSerializer)."""

    body: dict

    @property
    def worker_id(self) -> str | None:
        return self.body.get("workerId") or None

    @property
    def heartbeat(self) -> bool:
        return self.body["status"] == TaskStatus.IN_PROGRESS and self.body["extendLease"]


def named_task(*, namespace: Namespace, update: Update) -> Task:
    """The task the update names (in its workflow, when it names one)."""
    task_id = update.body["taskId"]
    task = _task(namespace, task_id)
    workflow_id = update.body.get("workflowInstanceId")
    if task is None or (workflow_id and workflow_id != str(task.execution_id)):
        raise NotFound(f"task '{task_id}' does not exist")
    return task


def by_reference(
    *, namespace: Namespace, workflow_id: str, ref: str, status: str, output: object, worker_id: str | None
) -> Update:
    """Conductor's update by reference name (``tasks/{workflowId}/{ref}/{status}``)
    as an update of the open task of that name in the workflow's current
    run (its latest, inside a loop), fenced as every update is."""
    execution = lifecycle.get_execution(namespace=namespace, execution_id=workflow_id)
    task = (
        Task.objects.filter(execution=execution, run=execution.run, ref=ref, status__in=OPEN_TASK)
        .order_by("-seq")
        .only("id")
        .first()
    )
    if task is None:
        raise NotFound(f"workflow '{execution.id}' has no task '{ref}' in progress")
    body = {"taskId": str(task.id), "workflowInstanceId": str(execution.id), "status": status, "outputData": output}
    if worker_id:
        body["workerId"] = worker_id
    serializer = TaskResultSerializer(data=body)
    serializer.is_valid(raise_exception=True)
    return Update(dict(serializer.validated_data))


def unleased(task: Task) -> bool:
    """A waiting task (HUMAN, a WAIT with no duration, …), which no worker
    leases: a client completes it, as on Conductor, with the role that
    completes HUMAN tasks on Node Flow's own route (once: then 409, as for a
    stale lease)."""
    return task.kind == "waiting" and task.lease_token is None


def check_worker(task: Task, update: Update) -> None:
    """A leased task's update, checked against the worker it names."""
    if update.worker_id is None and not update.heartbeat:
        raise InvalidField("workerId", "required: the worker that polled the task (it fences the update)")
    if task.status == TaskStatus.IN_PROGRESS and update.worker_id is not None and task.worker_id != update.worker_id:
        raise Conflict("this task is leased to another worker; this update changes nothing", taskStatus=task.status)


def _task(namespace: Namespace, task_id: str, *, with_execution: bool = False) -> Task | None:
    try:
        pk = uuid.UUID(task_id)
    except ValueError:
        return None
    rows = Task.objects.filter(pk=pk, namespace=namespace)
    return (rows.select_related("execution") if with_execution else rows).first()


def task_in(*, namespace: Namespace, task_id: str) -> Task:
    """One task (attempt) of the namespace, with its execution."""
    task = _task(namespace, task_id, with_execution=True)
    if task is None:
        raise NotFound(f"task '{task_id}' does not exist")
    return task


def apply(
    *, namespace: Namespace, update: Update, principal: Principal, lease_next: bool = False
) -> tuple[Task, list[Task]]:
    """Apply ``update``; with ``lease_next`` (update-v2), lease the worker's
    next task of the same type in the same transaction."""
    task = named_task(namespace=namespace, update=update)
    if unleased(task):
        if not principal.has_scope(Scope.HUMAN_TASKS):
            raise PermissionDenied(f"role '{principal.role}' may not complete a {task.type} task")
        return _complete_unleased(namespace, task, update.body), []
    if not principal.has_scope(Scope.TASKS_WORK):
        raise PermissionDenied(f"role '{principal.role}' may not report a leased task's result")
    check_worker(task, update)
    if update.heartbeat:
        results.heartbeat(namespace=namespace, task_id=task.id, lease_token=task.lease_token or "")
        return task, []
    result = _result(task, update.body)
    if not lease_next:
        return results.report_result(namespace=namespace, result=result), []
    then = results.Next(worker_id=update.worker_id or "", count=1)
    return results.report_and_lease(namespace=namespace, result=result, then=then)


def _complete_unleased(namespace: Namespace, task: Task, body: dict) -> Task:
    """Through the engine's entry point for waiting tasks completed from
    outside (a HUMAN task; a WAIT with no duration, as Conductor completes one)."""
    result = _result(task, body, put_back=False)
    result.lease_token = None
    try:
        return results.complete_by_api(namespace=namespace, result=result)
    except InvalidField as exc:
        if exc.fields.get("field") != "leaseToken":
            raise
        # No lease to name on these routes: the task is not one a client completes.
        raise Conflict(f"a {task.type} task is not completed by a task update", taskStatus=task.status) from exc


def _result(task: Task, body: dict, *, put_back: bool = True) -> results.Result:
    """``put_back``: IN_PROGRESS puts a leased task back in its queue, as
    Conductor does (an unleased one has no queue: its output is updated)."""
    callback_s = body["callbackAfterSeconds"]
    if body["status"] == TaskStatus.IN_PROGRESS and put_back:
        callback_s = max(callback_s, AT_ONCE_S)
    return results.Result(
        task_id=task.id,
        status=body["status"],
        # An attempt not in flight has no token: results answers 409 for it.
        lease_token=task.lease_token or "",
        output=body.get("outputData") or {},
        reason=body.get("reasonForIncompletion") or "",
        callback_after_s=callback_s,
        logs=[_log_line(entry) for entry in body["logs"]],
    )


def _log_line(entry) -> object:
    # conductor-python sends TaskExecLog objects: {"log", "taskId", "createdTime"}.
    return entry.get("log", entry) if isinstance(entry, dict) else entry
