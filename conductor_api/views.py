"""The Conductor-compatible routes under ``/v1/ns/{ns}/api/`` (docs/conductor.md).
Thin, as every edge: parse (conductor.serializers), authorise (the same
scopes as Node Flow's own routes), call Node Flow's services, render in
Conductor's shapes (conductor.shapes) and error model (conductor.errors)."""

from __future__ import annotations

from django.db.models import F
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from conductor_api import definitions, updates
from conductor_api.auth import TokenAuthentication
from conductor_api.errors import exception_handler
from conductor_api.schema import TokenSchema
from conductor_api.serializers import (
    MAX_CORRELATED,
    MAX_CORRELATION_IDS,
    BatchPollQuerySerializer,
    CorrelatedQuerySerializer,
    CorrelationIdsSerializer,
    GetWorkflowQuerySerializer,
    PollQuerySerializer,
    RegisterQuerySerializer,
    RestartQuerySerializer,
    RetryQuerySerializer,
    StartQuerySerializer,
    StartRequestSerializer,
    StatusQuerySerializer,
    TaskResultSerializer,
    TerminateQuerySerializer,
    TokenRequestSerializer,
    VersionQuerySerializer,
    WorkerQuerySerializer,
    query,
)
from conductor_api.shapes import RunOf, task_view, taskdef_view, workflow_status, workflow_view, workflowdef_view
from conductor_api.tokens import exchange
from executions import dispatch, executor, lifecycle
from executions.models import ACTIVE_EXECUTION, Execution, Task
from executions.serializers import StartExecutionSerializer
from metadata import taskdefs, workflows
from metadata.models import TaskDefinition, WorkflowVersion
from nodeflow import throttling, transactions
from nodeflow.auth import ApiKeyAuthentication, Principal, Scope, StaffSessionAuthentication, client_address
from nodeflow.errors import Conflict, InvalidField
from nodeflow.fields import is_name
from nodeflow.views import NamespacedView

TEXT = "text/plain"
CONDUCTOR_TASK = inline_serializer(
    "ConductorTask",
    fields={
        "taskId": serializers.CharField(),
        "taskType": serializers.CharField(),
        "taskDefName": serializers.CharField(),
        "referenceTaskName": serializers.CharField(),
        "workflowInstanceId": serializers.CharField(),
        "workflowType": serializers.CharField(),
        "status": serializers.CharField(),
        "inputData": serializers.DictField(),
        "outputData": serializers.DictField(),
        "retryCount": serializers.IntegerField(),
        "pollCount": serializers.IntegerField(),
        "responseTimeoutSeconds": serializers.IntegerField(),
        "scheduledTime": serializers.IntegerField(),
        "startTime": serializers.IntegerField(),
        "endTime": serializers.IntegerField(),
    },
)
CONDUCTOR_WORKFLOW = inline_serializer(
    "ConductorWorkflow",
    fields={
        "workflowId": serializers.CharField(),
        "workflowName": serializers.CharField(),
        "workflowVersion": serializers.IntegerField(),
        "status": serializers.CharField(),
        "input": serializers.DictField(),
        "output": serializers.DictField(),
        "correlationId": serializers.CharField(allow_null=True),
        "reasonForIncompletion": serializers.CharField(allow_null=True),
        "startTime": serializers.IntegerField(),
        "endTime": serializers.IntegerField(),
        "tasks": serializers.ListField(child=serializers.DictField(), required=False),
    },
)


class AnyAccept(BaseContentNegotiation):
    """JSON whatever the client accepts: Conductor clients ask for
    ``text/plain`` on the routes that answer an id, which these views
    answer as text themselves (an error is still JSON)."""

    def select_parser(self, request, parsers):
        for parser in parsers:
            if parser.media_type == request.content_type.split(";")[0].strip():
                return parser
        return None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class ConductorView(NamespacedView):
    authentication_classes = [TokenAuthentication, ApiKeyAuthentication, StaffSessionAuthentication]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = AnyAccept

    def get_exception_handler(self):
        return exception_handler


def text(value: str) -> HttpResponse:
    return HttpResponse(value, content_type=TEXT)


def _valid_type(task_type: str) -> str:
    if not is_name(task_type):
        raise InvalidField("taskType", "not a task type name")
    return task_type


def _body(request) -> object:
    return request.data


# --- the token exchange -------------------------------------------------------


class TokenView(ConductorView):
    """Open, like Conductor's: the key pair in the body is the credential.
    A request that also carries a key valid elsewhere is refused with 403,
    like every route of a namespace its key is not for."""

    authentication_classes = [ApiKeyAuthentication]
    permission_classes: list = []  # open: the namespace is checked below
    schema = TokenSchema()

    @extend_schema(
        summary="Exchange a key id and secret (a Node Flow API key) for a token to send as X-Authorization",
        request=TokenRequestSerializer,
        responses=inline_serializer("ConductorToken", fields={"token": serializers.CharField()}),
        auth=[],
    )
    def post(self, request, ns):
        principal = request.user
        if isinstance(principal, Principal) and not principal.may_use(ns):
            raise exceptions.PermissionDenied(f"this API key is not valid for namespace '{ns}'")
        body = TokenRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        client = client_address(request)
        if throttling.wait_s(client) is not None:
            raise exceptions.Throttled(detail="too many failed authentications from this address")
        found = exchange(key_id=body.validated_data["keyId"], key_secret=body.validated_data["keySecret"])
        if found is None:
            throttling.failed(client)
            raise exceptions.AuthenticationFailed("unknown or revoked key, or a key id that is not the secret's")
        key, token = found
        if key.namespace is not None and key.namespace != ns:
            raise exceptions.PermissionDenied(f"this key is not valid for namespace '{ns}'")
        return Response({"token": token})


# --- tasks ----------------------------------------------------------------------


def _conductor_tasks(tasks: list[Task]) -> list[dict]:
    """Leased rows in Conductor's Task shape: read again whole, with their
    workflows (a lease answer carries only some columns), in one query."""
    if not tasks:
        return []
    rows = Task.objects.filter(pk__in=[t.id for t in tasks]).select_related("execution")
    by_id = {row.id: row for row in rows}
    return [task_view(by_id[t.id], RunOf.of(by_id[t.id].execution)) for t in tasks if t.id in by_id]


class PollView(ConductorView):
    scopes = {"GET": Scope.TASKS_WORK}

    @extend_schema(
        summary="Lease one ready task of a type (204 when there is none)",
        parameters=[PollQuerySerializer],
        responses={200: CONDUCTOR_TASK, 204: None},
    )
    def get(self, request, ns, task_type):
        params = query(PollQuerySerializer, request)
        leased = dispatch.poll(
            namespace=self.namespace, queue=_valid_type(task_type), worker_id=params["workerid"], count=1, wait_s=0
        )
        found = _conductor_tasks(leased)
        return Response(found[0]) if found else Response(status=status.HTTP_204_NO_CONTENT)


class BatchPollView(ConductorView):
    scopes = {"GET": Scope.TASKS_WORK}

    @extend_schema(
        summary="Lease up to count ready tasks of a type, waiting up to timeout milliseconds for one",
        parameters=[BatchPollQuerySerializer],
        responses=serializers.ListSerializer(child=CONDUCTOR_TASK),
    )
    def get(self, request, ns, task_type):
        params = query(BatchPollQuerySerializer, request)
        leased = dispatch.poll(
            namespace=self.namespace,
            queue=_valid_type(task_type),
            worker_id=params["workerid"],
            count=params["count"],
            wait_s=params["timeout"] / 1000,
        )
        return Response(_conductor_tasks(leased))


def _update(request) -> updates.Update:
    body = TaskResultSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    return updates.Update(dict(body.validated_data))


# Workers report leased tasks; developers complete HUMAN tasks, as on Node Flow's own route.
UPDATE_SCOPES = {"POST": (Scope.TASKS_WORK, Scope.HUMAN_TASKS)}


class UpdateTaskView(ConductorView):
    scopes = UPDATE_SCOPES

    @extend_schema(
        summary="Report a task's result, or extend its lease (409 when the attempt is no longer this worker's)",
        request=TaskResultSerializer,
        responses={(200, TEXT): OpenApiTypes.STR},
    )
    def post(self, request, ns):
        task, _ = updates.apply(namespace=self.namespace, update=_update(request), principal=request.user)
        return text(str(task.id))


class UpdateTaskV2View(ConductorView):
    scopes = UPDATE_SCOPES

    @extend_schema(
        summary="Report a task's result and lease the worker's next task of its type (204 when there is none)",
        request=TaskResultSerializer,
        responses={200: CONDUCTOR_TASK, 204: None},
    )
    def post(self, request, ns):
        update = _update(request)
        _, leased = updates.apply(namespace=self.namespace, update=update, principal=request.user, lease_next=True)
        found = _conductor_tasks(leased)
        return Response(found[0]) if found else Response(status=status.HTTP_204_NO_CONTENT)


class UpdateByReferenceView(ConductorView):
    """``tasks/{workflowId}/{taskRefName}/{status}``: the body is the output."""

    scopes = UPDATE_SCOPES

    @extend_schema(
        summary="Report the result of a workflow's open task named by its reference; answers its id as text",
        parameters=[WorkerQuerySerializer],
        request=OpenApiTypes.OBJECT,
        responses={(200, TEXT): OpenApiTypes.STR},
    )
    def post(self, request, ns, workflow_id, task_ref, status):
        task = self.update(request, workflow_id, task_ref, status)
        return text(str(task.id))

    def update(self, request, workflow_id: str, task_ref: str, status: str) -> Task:
        update = updates.by_reference(
            namespace=self.namespace,
            workflow_id=workflow_id,
            ref=task_ref,
            status=status,
            output=request.data,
            worker_id=query(WorkerQuerySerializer, request).get("workerid"),
        )
        task, _ = updates.apply(namespace=self.namespace, update=update, principal=request.user)
        return task


class UpdateByReferenceSyncView(UpdateByReferenceView):
    @extend_schema(
        summary="The same, answering the workflow as it is after the update",
        parameters=[WorkerQuerySerializer],
        request=OpenApiTypes.OBJECT,
        responses=CONDUCTOR_WORKFLOW,
    )
    def post(self, request, ns, workflow_id, task_ref, status):
        task = self.update(request, workflow_id, task_ref, status)
        execution = lifecycle.get_execution(namespace=self.namespace, execution_id=task.execution_id)
        return Response(workflow_view(execution, executor.read_run(execution)))


class TaskView(ConductorView):
    scopes = {"GET": (Scope.EXECUTIONS_READ, Scope.TASKS_WORK)}

    @extend_schema(summary="One task (one attempt) by id", responses=CONDUCTOR_TASK)
    def get(self, request, ns, task_id):
        task = updates.task_in(namespace=self.namespace, task_id=task_id)
        return Response(task_view(task, RunOf.of(task.execution)))


# --- metadata -------------------------------------------------------------------


class TaskDefsView(ConductorView):
    scopes = {"GET": Scope.TASKDEFS_READ, "POST": Scope.TASKDEFS_WRITE, "PUT": Scope.TASKDEFS_WRITE}

    @extend_schema(summary="Every task definition", responses=serializers.ListSerializer(child=serializers.DictField()))
    def get(self, request, ns):
        rows = TaskDefinition.objects.filter(namespace=self.namespace).order_by("name")
        return Response([taskdef_view(row) for row in rows])

    @extend_schema(
        summary="Create or replace task definitions (a list, or one)",
        request=OpenApiTypes.OBJECT,
        responses={200: None},
    )
    def post(self, request, ns):
        definitions.register_task_definitions(namespace=self.namespace, body=_body(request))
        return Response()

    @extend_schema(
        summary="Create or replace a task definition (one, or a list)",
        request=OpenApiTypes.OBJECT,
        responses={200: None},
    )
    def put(self, request, ns):
        definitions.register_task_definitions(namespace=self.namespace, body=_body(request))
        return Response()


class TaskDefView(ConductorView):
    scopes = {"GET": Scope.TASKDEFS_READ, "DELETE": Scope.TASKDEFS_WRITE}

    @extend_schema(summary="One task definition", responses=OpenApiTypes.OBJECT)
    def get(self, request, ns, name):
        return Response(taskdef_view(taskdefs.get_task_definition(namespace=self.namespace, name=name)))

    @extend_schema(summary="Delete a task definition", responses={200: None})
    def delete(self, request, ns, name):
        taskdefs.delete_task_definition(namespace=self.namespace, name=name)
        return Response()


class WorkflowDefsView(ConductorView):
    scopes = {"GET": Scope.WORKFLOWS_READ, "POST": Scope.WORKFLOWS_WRITE, "PUT": Scope.WORKFLOWS_WRITE}

    @extend_schema(
        summary="Every workflow definition (its published version)",
        responses=serializers.ListSerializer(child=serializers.DictField()),
    )
    def get(self, request, ns):
        rows = (
            WorkflowVersion.objects.select_related("definition")
            .filter(definition__namespace=self.namespace, definition__published_version=F("version"))
            .order_by("definition__name")
        )
        return Response([workflowdef_view(row) for row in rows])

    @extend_schema(
        summary="Register a workflow definition; published at once (the published body again registers nothing)",
        parameters=[RegisterQuerySerializer],
        request=OpenApiTypes.OBJECT,
        responses={200: None},
    )
    def post(self, request, ns):
        query(RegisterQuerySerializer, request)
        if isinstance(request.data, list):
            raise InvalidField("body", "one workflow definition (PUT takes a list)")
        return _registered(definitions.register_workflows(namespace=self.namespace, body=_body(request)))

    @extend_schema(
        summary="Register workflow definitions (a list); each published at once",
        parameters=[RegisterQuerySerializer],
        request=OpenApiTypes.OBJECT,
        responses={200: None},
    )
    def put(self, request, ns):
        query(RegisterQuerySerializer, request)
        return _registered(definitions.register_workflows(namespace=self.namespace, body=_body(request)))


def _registered(rows: list[WorkflowVersion]) -> Response:
    """Conductor answers nothing; what a registration warns of (a loop given
    the iteration ceiling, …) is said when there is any."""
    warnings = [warning for row in rows for warning in getattr(row, "warnings", None) or []]
    return Response({"warnings": warnings}) if warnings else Response()


class WorkflowDefView(ConductorView):
    scopes = {"GET": Scope.WORKFLOWS_READ}

    @extend_schema(
        summary="A workflow definition: a version, or the published one",
        parameters=[VersionQuerySerializer],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request, ns, name):
        version = query(VersionQuerySerializer, request).get("version")
        return Response(workflowdef_view(workflows.get_version(namespace=self.namespace, name=name, version=version)))


# --- workflows --------------------------------------------------------------------


def _start(namespace, start: dict, *, fail_if_exists: bool = False) -> str:
    """Start through the start route's own validation and the one start path.
    An idempotency key already used answers its execution, or, with
    Conductor's ``idempotencyStrategy: FAIL``, 409."""
    body = StartExecutionSerializer(data={key: value for key, value in start.items() if value is not None})
    body.is_valid(raise_exception=True)
    with transactions.outermost():
        execution, created = lifecycle.start_requested(namespace=namespace, start=body.validated_data)
    if not created and fail_if_exists:
        raise Conflict(f"workflow {execution.id} was started with this idempotencyKey (idempotencyStrategy FAIL)")
    return str(execution.id)


NODE_FLOW_START = ("name", "version", "input", "correlationId", "idempotencyKey", "priority")


class StartView(ConductorView):
    scopes = {"POST": Scope.EXECUTIONS_WRITE}

    @extend_schema(
        summary="Start a workflow (StartWorkflowRequest); answers its id as text",
        request=StartRequestSerializer,
        responses={(200, TEXT): OpenApiTypes.STR},
    )
    def post(self, request, ns):
        body = StartRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        start = {key: body.validated_data.get(key) for key in NODE_FLOW_START}
        fail = body.validated_data.get("idempotencyStrategy") in (None, "FAIL")  # Conductor's default
        return text(_start(self.namespace, start, fail_if_exists=fail))


class WorkflowView(ConductorView):
    """``workflow/{x}``: POST starts the workflow named x; GET and DELETE
    read and terminate the workflow whose id is x (Conductor's shapes)."""

    scopes = {"GET": Scope.EXECUTIONS_READ, "POST": Scope.EXECUTIONS_WRITE, "DELETE": Scope.EXECUTIONS_WRITE}

    @extend_schema(
        summary="Start the workflow named in the path; the body is its input; answers its id as text",
        parameters=[StartQuerySerializer],
        request=OpenApiTypes.OBJECT,
        responses={(200, TEXT): OpenApiTypes.STR},
    )
    def post(self, request, ns, ident):
        params = query(StartQuerySerializer, request)
        start = {"name": ident, "input": request.data, **params}
        return text(_start(self.namespace, start))

    @extend_schema(
        summary="A workflow by id, with its tasks (every attempt) unless includeTasks=false",
        parameters=[GetWorkflowQuerySerializer],
        responses=CONDUCTOR_WORKFLOW,
    )
    def get(self, request, ns, ident):
        params = query(GetWorkflowQuerySerializer, request)
        execution = lifecycle.get_execution(namespace=self.namespace, execution_id=ident)
        tasks = executor.read_run(execution) if params["includeTasks"] else None
        return Response(workflow_view(execution, tasks))

    @extend_schema(
        summary="Terminate a workflow: cancel its open tasks, cascade to children",
        parameters=[TerminateQuerySerializer],
        responses={200: None},
    )
    def delete(self, request, ns, ident):
        params = query(TerminateQuerySerializer, request)
        execution = lifecycle.get_execution(namespace=self.namespace, execution_id=ident)
        lifecycle.terminate_execution(execution_id=execution.id, reason=params["reason"])
        return Response()


class WorkflowStatusView(ConductorView):
    scopes = {"GET": Scope.EXECUTIONS_READ}

    @extend_schema(
        summary="A workflow's status (Conductor's WorkflowStatus), with its output and variables if asked",
        parameters=[StatusQuerySerializer],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request, ns, workflow_id):
        params = query(StatusQuerySerializer, request)
        execution = lifecycle.get_execution(namespace=self.namespace, execution_id=workflow_id)
        return Response(workflow_status(execution, **params))


class _ControlView(ConductorView):
    """``workflow/{id}/<control>``: the lifecycle service of the same name."""

    params: type | None = RetryQuerySerializer
    answer = status.HTTP_200_OK

    def control(self, execution: Execution) -> None:
        raise NotImplementedError

    def run(self, request, workflow_id):
        if self.params is not None:
            query(self.params, request)
        execution = lifecycle.get_execution(namespace=self.namespace, execution_id=workflow_id)
        self.control(execution)
        return Response(status=self.answer)


class PauseView(_ControlView):
    scopes = {"PUT": Scope.EXECUTIONS_WRITE}
    params = None

    @extend_schema(summary="Pause: schedule and dispatch nothing new", request=None, responses={200: None})
    def put(self, request, ns, workflow_id):
        return self.run(request, workflow_id)

    def control(self, execution):
        lifecycle.pause_execution(execution_id=execution.id)


class ResumeView(PauseView):
    @extend_schema(summary="Resume a paused workflow", request=None, responses={200: None})
    def put(self, request, ns, workflow_id):
        return self.run(request, workflow_id)

    def control(self, execution):
        lifecycle.resume_execution(execution_id=execution.id)


class RetryView(_ControlView):
    scopes = {"POST": Scope.EXECUTIONS_WRITE}
    answer = status.HTTP_204_NO_CONTENT

    @extend_schema(
        summary="Retry from the failed tasks", parameters=[RetryQuerySerializer], request=None, responses={204: None}
    )
    def post(self, request, ns, workflow_id):
        return self.run(request, workflow_id)

    def control(self, execution):
        lifecycle.retry_execution(execution_id=execution.id)


class RestartView(RetryView):
    params = RestartQuerySerializer

    @extend_schema(
        summary="Restart from the beginning (same id, a new run)",
        parameters=[RestartQuerySerializer],
        request=None,
        responses={204: None},
    )
    def post(self, request, ns, workflow_id):
        return self.run(request, workflow_id)

    def control(self, execution):
        lifecycle.restart_execution(execution_id=execution.id)


def _correlated(namespace, name: str, correlation_id: str, params: dict) -> list[dict]:
    rows = Execution.objects.filter(namespace=namespace, name=name, correlation_id=correlation_id)
    if not params["includeClosed"]:
        rows = rows.filter(status__in=ACTIVE_EXECUTION)
    found = rows.order_by("-created_at")[:MAX_CORRELATED]
    return [workflow_view(row, executor.read_run(row) if params["includeTasks"] else None) for row in found]


class CorrelatedView(ConductorView):
    scopes = {"GET": Scope.EXECUTIONS_READ}

    @extend_schema(
        summary=f"Workflows of a name with a correlation id, newest first (at most {MAX_CORRELATED})",
        parameters=[CorrelatedQuerySerializer],
        responses=serializers.ListSerializer(child=CONDUCTOR_WORKFLOW),
    )
    def get(self, request, ns, name, correlation_id):
        params = query(CorrelatedQuerySerializer, request)
        return Response(_correlated(self.namespace, name, correlation_id, params))


class CorrelatedBatchView(ConductorView):
    scopes = {"POST": Scope.EXECUTIONS_READ}

    @extend_schema(
        summary=f"Workflows of a name for each of up to {MAX_CORRELATION_IDS} correlation ids",
        parameters=[CorrelatedQuerySerializer],
        request=CorrelationIdsSerializer,
        responses=OpenApiTypes.OBJECT,
    )
    def post(self, request, ns, name):
        params = query(CorrelatedQuerySerializer, request)
        body = CorrelationIdsSerializer(data={"correlationIds": request.data})
        body.is_valid(raise_exception=True)
        ids = body.validated_data["correlationIds"]
        return Response({cid: _correlated(self.namespace, name, cid, params) for cid in ids})
