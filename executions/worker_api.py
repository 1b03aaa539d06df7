"""Worker routes (SPEC §7): poll, heartbeat, result, batched results; and the
inbound webhook that completes WAIT_FOR_WEBHOOK tasks."""

from __future__ import annotations

import uuid

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from executions import dispatch, request_bodies, result_bodies, results, schema_shapes, waiting
from executions.serializers import (
    BatchResultsSerializer,
    HeartbeatSerializer,
    PollSerializer,
    ResultSerializer,
    leased_view,
    task_view,
)
from nodeflow.auth import Scope
from nodeflow.errors import InvalidField, NotFound
from nodeflow.fields import is_name
from nodeflow.views import NamespacedView

# The answers' shapes, for the schema only (executions/schema_shapes.py).
LEASED_TASK = schema_shapes.LeasedTaskSerializer(many=True)
TASK = schema_shapes.TaskResultAnswerSerializer
BATCH_ANSWER = schema_shapes.BatchResultAnswersSerializer


class WorkerView(NamespacedView):
    # Workers speak JSON: no browsable-API renderer to build.
    renderer_classes = [JSONRenderer]
    plain_json_methods = frozenset({"POST"})


def _task_uuid(task_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(task_id))
    except ValueError as exc:
        raise NotFound(f"task '{task_id}' does not exist") from exc


class PollView(WorkerView):
    scopes = {"POST": Scope.TASKS_WORK}

    @extend_schema(
        summary="Lease up to count ready tasks of a queue (long-polls up to waitSeconds)",
        request=PollSerializer,
        responses=LEASED_TASK,
    )
    def post(self, request, ns, task_type):
        if not is_name(task_type):
            raise InvalidField("taskType", "not a task type name")
        data = request_bodies.validated(PollSerializer, request.data)
        leased = dispatch.poll(
            namespace=self.namespace,
            queue=task_type,
            worker_id=data["workerId"],
            count=data["count"],
            wait_s=data["waitSeconds"],
        )
        return Response([leased_view(task) for task in leased])


class HeartbeatView(WorkerView):
    scopes = {"POST": Scope.TASKS_WORK}

    @extend_schema(
        summary="Extend a lease (409 when it is no longer yours)",
        request=HeartbeatSerializer,
        responses=schema_shapes.HeartbeatAnswerSerializer,
    )
    def post(self, request, ns, task_id):
        body = HeartbeatSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        task = results.heartbeat(
            namespace=self.namespace,
            task_id=_task_uuid(task_id),
            lease_token=body.validated_data["leaseToken"],
            progress=body.validated_data.get("progress"),
        )
        return Response(
            {"taskId": str(task.id), "status": task.status, "leaseExpiresAt": task_view(task)["leaseExpiresAt"]}
        )


def _next(data: dict) -> results.Next:
    queue = data.get("taskType")
    if queue is not None and not is_name(queue):
        raise InvalidField("next.taskType", "not a task type name")
    return results.Next(worker_id=data["workerId"], count=data["count"], queue=queue)


def _result(task_id, data: dict) -> results.Result:
    return results.Result(
        task_id=task_id,
        status=data["status"],
        lease_token=data.get("leaseToken"),
        output=data["outputData"],
        reason=data["reasonForIncompletion"],
        callback_after_s=data["callbackAfterSeconds"],
        logs=data["logs"],
    )


class ResultView(WorkerView):
    # Workers report with their lease; developers complete HUMAN tasks without one.
    scopes = {"POST": (Scope.TASKS_WORK, Scope.HUMAN_TASKS)}

    @extend_schema(summary="Report a task's result (409 for a stale lease)", request=ResultSerializer, responses=TASK)
    def post(self, request, ns, task_id):
        data = request_bodies.validated(
            ResultSerializer, request.data, plain=request_bodies.plain_if_json(request, result_bodies.plain_result)
        )
        human = not data.get("leaseToken")
        if human and not request.user.has_scope(Scope.HUMAN_TASKS):
            if results.waits_for_api(namespace=self.namespace, task_id=_task_uuid(task_id)):
                raise exceptions.PermissionDenied(
                    f"role '{request.user.role}' may not complete a HUMAN task: "
                    f"that takes a developer or admin key (scope {Scope.HUMAN_TASKS})"
                )
            raise InvalidField("leaseToken", "required")
        if not human and not request.user.has_scope(Scope.TASKS_WORK):
            # A lease is a worker's: a developer completes HUMAN tasks only.
            raise exceptions.PermissionDenied(f"role '{request.user.role}' may not report a leased task's result")
        result = _result(_task_uuid(task_id), data)
        if "next" not in data:
            return Response(task_view(results.report_result(namespace=self.namespace, result=result, human=human)))
        if human:
            raise InvalidField("next", "only a leased task's result can lease the next tasks")
        task, leased = results.report_and_lease(namespace=self.namespace, result=result, then=_next(data["next"]))
        return Response({**task_view(task), "next": [leased_view(t) for t in leased]})


class BatchResultsView(WorkerView):
    scopes = {"POST": Scope.TASKS_WORK}

    @extend_schema(
        summary="Report up to 100 results at once; one answer per result, in order",
        request=BatchResultsSerializer,
        responses=BATCH_ANSWER,
    )
    def post(self, request, ns):
        body = request_bodies.validated(
            BatchResultsSerializer,
            request.data,
            plain=request_bodies.plain_if_json(request, result_bodies.plain_results),
        )
        items = [_result(item["taskId"], item) for item in body["results"]]
        for item in items:
            if not item.lease_token:
                raise InvalidField("results.leaseToken", "required for every result in a batch")
        then = _next(body["next"]) if "next" in body else None
        answers, leased = results.report_results(namespace=self.namespace, results=items, then=then)
        if then is None:
            return Response({"results": answers})
        return Response({"results": answers, "next": [leased_view(t) for t in leased]})


class WebhookView(NamespacedView):
    scopes = {"POST": Scope.EXECUTIONS_WRITE}

    @extend_schema(
        summary="Deliver an inbound webhook to the WAIT_FOR_WEBHOOK tasks named `name` that it matches",
        request=OpenApiTypes.OBJECT,
        responses=schema_shapes.WebhookDeliveredSerializer,
    )
    def post(self, request, ns, name):
        if not is_name(name):
            raise InvalidField("name", "not a webhook name")
        if not isinstance(request.data, dict):
            raise InvalidField("body", "must be a JSON object")
        completed = waiting.deliver_webhook(namespace=self.namespace, name=name, body=request.data)
        return Response({"matched": len(completed), "taskIds": [str(pk) for pk in completed]})
