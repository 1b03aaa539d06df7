"""Execution routes (SPEC §6). Thin: parse, authorise, call a service, render."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from executions import executor, lifecycle, request_bodies, schema_shapes, start_bodies, waiting
from executions.models import Execution, Task
from executions.pagination import paginate, task_page
from executions.serializers import (
    ExecutionViewSerializer,
    ListExecutionsSerializer,
    ListTasksSerializer,
    ReasonSerializer,
    StartExecutionSerializer,
    StartExecutionsSerializer,
    execution_view,
    task_views,
)
from nodeflow import transactions
from nodeflow.auth import Scope
from nodeflow.errors import Conflict
from nodeflow.views import NamespacedView

# The answers' shapes, for the schema only (executions/schema_shapes.py).
EXECUTION = schema_shapes.ExecutionSerializer
EXECUTION_PAGE = schema_shapes.ExecutionPageSerializer
TASK_PAGE = schema_shapes.TaskPageSerializer


def full_view(execution: Execution) -> dict:
    """The execution with every row of its current run; a start that just
    made them answers with the rows it inserted, without reading them back."""
    tasks = executor.started_rows(execution)
    return execution_view(execution, tasks=executor.read_run(execution, settled=True) if tasks is None else tasks)


class ExecutionListView(NamespacedView):
    scopes = {"GET": Scope.EXECUTIONS_READ, "POST": Scope.EXECUTIONS_WRITE}
    plain_json_methods = frozenset({"POST"})  # a start

    @extend_schema(
        operation_id="list_executions",
        summary="List executions, newest first",
        parameters=[ListExecutionsSerializer],
        responses=EXECUTION_PAGE,
    )
    def get(self, request, ns):
        params = self.query(ListExecutionsSerializer)
        rows = Execution.objects.filter(namespace=self.namespace)
        for field, column in (("status", "status"), ("name", "name"), ("correlationId", "correlation_id")):
            if field in params:
                rows = rows.filter(**{column: params[field]})
        page, next_cursor = paginate(rows, cursor=params.get("cursor"), limit=params.get("limit", 50))
        return Response({"results": [execution_view(row) for row in page], "next": next_cursor})

    @extend_schema(
        summary="Start an execution",
        description="201 with the execution; the same idempotencyKey returns the existing one with 200.",
        request=StartExecutionSerializer,
        responses={200: EXECUTION, 201: EXECUTION},
    )
    def post(self, request, ns):
        plain = request_bodies.plain_if_json(request, start_bodies.plain_start)
        data = request_bodies.validated(StartExecutionSerializer, request.data, plain=plain)
        # One commit for the start and the view of it: reads after the commit
        # would each be a transaction of their own. The view is cheap (blockedBy
        # reads cached controls and a remembered recent poll), so the commit
        # that makes the first tasks visible follows their insert closely.
        with transactions.outermost():
            execution, created = lifecycle.start_requested(namespace=self.namespace, start=data)
            body = full_view(execution)
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


BATCH_STARTS = schema_shapes.BatchStartAnswersSerializer


class ExecutionBatchView(NamespacedView):
    scopes = {"POST": Scope.EXECUTIONS_WRITE}

    @extend_schema(
        operation_id="start_executions",
        summary="Start up to 100 executions at once; one answer per start, in order",
        description=(
            "Each start goes through the same controls as a single start, with its own idempotencyKey, inside "
            "the batch's one transaction (one commit for the batch; each start sees those before it; a refused "
            "start has written nothing). An answer is {status: 201 (created) or 200 (its idempotencyKey's execution), id, "
            "executionStatus}, or {status: 4xx, error, message, field?} for a start refused (a quota: 429; an "
            "unknown workflow: 404); one refused start spoils none of the others."
        ),
        request=StartExecutionsSerializer,
        responses=BATCH_STARTS,
    )
    def post(self, request, ns):
        body = StartExecutionsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        starts = body.validated_data["executions"]
        return Response({"results": lifecycle.start_executions(namespace=self.namespace, starts=starts)})


class ExecutionDetailView(NamespacedView):
    scopes = {"GET": Scope.EXECUTIONS_READ}

    @extend_schema(
        summary="An execution with its tasks (every attempt, up to NODE_FLOW_EXECUTION_VIEW_TASKS)",
        description=(
            "The current run's tasks in seq order, at most NODE_FLOW_EXECUTION_VIEW_TASKS (1,000) of them; "
            "`tasksNext` is then the cursor of GET …/executions/{id}/tasks for the rest (null when every "
            "task is shown). `includeTasks=false` leaves the tasks out."
        ),
        parameters=[ExecutionViewSerializer],
        responses=EXECUTION,
    )
    def get(self, request, ns, execution_id):
        params = self.query(ExecutionViewSerializer)
        execution = lifecycle.get_execution(namespace=self.namespace, execution_id=execution_id)
        if not params["includeTasks"]:
            return Response(execution_view(execution))
        rows = Task.objects.filter(execution_id=execution.id)
        shown, more = task_page(rows, run=execution.run, cursor=None, limit=settings.NODE_FLOW_EXECUTION_VIEW_TASKS)
        # blockedBy looks at the run as deciding does (its open rows are never settled)
        body = execution_view(execution, tasks=shown if more is None else executor.read_run(execution))
        body["tasks"] = body["tasks"] if more is None else task_views(shown)
        body["tasksNext"] = more
        return Response(body)


class ExecutionTasksView(NamespacedView):
    scopes = {"GET": Scope.EXECUTIONS_READ}

    @extend_schema(
        summary="An execution's tasks, a page at a time",
        description=(
            "The current run's tasks (every attempt) in seq order, optionally only those in one `status`, "
            "at one `path` (`fan[3].charge`) or under a `pathPrefix` (`fan[3].`); `next` is the cursor of "
            "the following page, null on the last."
        ),
        parameters=[ListTasksSerializer],
        responses=TASK_PAGE,
    )
    def get(self, request, ns, execution_id):
        params = self.query(ListTasksSerializer)
        execution = lifecycle.get_execution(namespace=self.namespace, execution_id=execution_id)
        rows = Task.objects.filter(execution_id=execution.id)
        if "status" in params:
            rows = rows.filter(status=params["status"])
        if "path" in params:
            rows = rows.filter(path=params["path"])
        if "pathPrefix" in params:
            rows = rows.filter(path__startswith=params["pathPrefix"])
        page, next_cursor = task_page(rows, run=execution.run, cursor=params.get("cursor"), limit=params["limit"])
        return Response({"results": task_views(page), "next": next_cursor})


class _ActionView(NamespacedView):
    """POST …/executions/{id}/<action>: checks the namespace, calls a service."""

    scopes = {"POST": Scope.EXECUTIONS_WRITE}

    def act(self, execution: Execution, body: dict) -> None:
        raise NotImplementedError

    def post(self, request, ns, execution_id):
        execution = lifecycle.get_execution(namespace=self.namespace, execution_id=execution_id)
        self.act(execution, request.data if isinstance(request.data, dict) else {})
        execution.refresh_from_db()
        return Response(full_view(execution))


@extend_schema(
    summary="Terminate: cancel open tasks, cascade to children", request=ReasonSerializer, responses=EXECUTION
)
class TerminateView(_ActionView):
    def act(self, execution, body):
        reason = ReasonSerializer(data=body)
        reason.is_valid(raise_exception=True)
        lifecycle.terminate_execution(execution_id=execution.id, reason=reason.validated_data["reason"])


@extend_schema(summary="Pause: schedule and dispatch nothing new", request=None, responses=EXECUTION)
class PauseView(_ActionView):
    def act(self, execution, body):
        lifecycle.pause_execution(execution_id=execution.id)


@extend_schema(summary="Resume a paused execution", request=None, responses=EXECUTION)
class ResumeView(_ActionView):
    def act(self, execution, body):
        lifecycle.resume_execution(execution_id=execution.id)


@extend_schema(summary="Retry from the failed task", request=None, responses=EXECUTION)
class RetryView(_ActionView):
    def act(self, execution, body):
        lifecycle.retry_execution(execution_id=execution.id)


@extend_schema(summary="Restart from the beginning (same id, a new run)", request=None, responses=EXECUTION)
class RestartView(_ActionView):
    def act(self, execution, body):
        lifecycle.restart_execution(execution_id=execution.id)


@extend_schema(summary="Evaluate the execution now", request=None, responses=EXECUTION)
class DecideView(_ActionView):
    def act(self, execution, body):
        executor.decide_now(execution.id)


class MessagesView(NamespacedView):
    scopes = {"POST": Scope.EXECUTIONS_WRITE}

    @extend_schema(
        summary="Post a message to an execution (for PULL_WORKFLOW_MESSAGES)",
        request=OpenApiTypes.ANY,
        responses={201: schema_shapes.MessageAcceptedSerializer},
    )
    def post(self, request, ns, execution_id):
        execution = lifecycle.get_execution(namespace=self.namespace, execution_id=execution_id)
        if not execution.active:
            raise Conflict(f"execution is {execution.status}; it takes no more messages")
        message = waiting.post_message(execution_id=execution.id, payload=request.data)
        return Response({"id": message.id}, status=status.HTTP_201_CREATED)
