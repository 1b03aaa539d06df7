"""Worker routes (SPEC §7): poll, heartbeat, result, batched results; and the
inbound webhook that completes WAIT_FOR_WEBHOOK tasks."""
from __future__ import annotations

import uuid

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from executions import dispatch, results, waiting
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

LEASED_TASK = inline_serializer(
    "LeasedTask",
    many=True,
    fields={
        "taskId": serializers.UUIDField(), "executionId": serializers.UUIDField(), "taskType": serializers.CharField(),
        "referenceTaskName": serializers.CharField(), "path": serializers.CharField(),
        "inputData": serializers.DictField(), "attempt": serializers.IntegerField(),
        "idempotencyKey": serializers.CharField(), "leaseToken": serializers.CharField(),
        "leaseExpiresAt": serializers.DateTimeField(),
    },
)
TASK = inline_serializer("Task", fields={"taskId": serializers.UUIDField(), "status": serializers.CharField()})
BATCH_ANSWER = inline_serializer(
    "BatchResultAnswers",
    fields={"results": serializers.ListField(child=inline_serializer(
        "BatchResultAnswer",
        fields={"taskId": serializers.UUIDField(), "status": serializers.IntegerField(), "error": serializers.CharField(required=False)},
    ))},
)


def _task_uuid(task_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(task_id))
    except ValueError as exc:
        raise NotFound(f"task '{task_id}' does not exist") from exc


class PollView(NamespacedView):
    scopes = {"POST": Scope.TASKS_WORK}

    @extend_schema(
        summary="Lease up to count ready tasks of a queue (long-polls up to waitSeconds)",
        request=PollSerializer, responses=LEASED_TASK,
    )
    def post(self, request, ns, task_type):
        if not is_name(task_type):
            raise InvalidField("taskType", "not a task type name")
        body = PollSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        leased = dispatch.poll(
            namespace=self.namespace, queue=task_type, worker_id=data["workerId"], count=data["count"],
            wait_s=data["waitSeconds"],
        )
        return Response([leased_view(task) for task in leased])


class HeartbeatView(NamespacedView):
    scopes = {"POST": Scope.TASKS_WORK}

    @extend_schema(summary="Extend a lease (409 when it is no longer yours)", request=HeartbeatSerializer, responses=TASK)
    def post(self, request, ns, task_id):
        body = HeartbeatSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        task = results.heartbeat(
            namespace=self.namespace, task_id=_task_uuid(task_id), lease_token=body.validated_data["leaseToken"],
            progress=body.validated_data.get("progress"),
        )
        return Response({"taskId": str(task.id), "status": task.status, "leaseExpiresAt": task_view(task)["leaseExpiresAt"]})


def _result(task_id, data: dict) -> results.Result:
    return results.Result(
        task_id=task_id, status=data["status"], lease_token=data.get("leaseToken"), output=data["outputData"],
        reason=data["reasonForIncompletion"], callback_after_s=data["callbackAfterSeconds"], logs=data["logs"],
    )


class ResultView(NamespacedView):
    # Workers report with their lease; developers complete HUMAN tasks without one.
    scopes = {"POST": (Scope.TASKS_WORK, Scope.HUMAN_TASKS)}

    @extend_schema(summary="Report a task's result (409 for a stale lease)", request=ResultSerializer, responses=TASK)
    def post(self, request, ns, task_id):
        body = ResultSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        human = not data.get("leaseToken")
        if human and not request.user.has_scope(Scope.HUMAN_TASKS):
            raise InvalidField("leaseToken", "required")
        task = results.report_result(namespace=self.namespace, result=_result(_task_uuid(task_id), data), human=human)
        return Response(task_view(task))


class BatchResultsView(NamespacedView):
    scopes = {"POST": Scope.TASKS_WORK}

    @extend_schema(
        summary="Report up to 100 results at once; one answer per result, in order",
        request=BatchResultsSerializer, responses=BATCH_ANSWER,
    )
    def post(self, request, ns):
        body = BatchResultsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        items = [_result(item["taskId"], item) for item in body.validated_data["results"]]
        for item in items:
            if not item.lease_token:
                raise InvalidField("results.leaseToken", "required for every result in a batch")
        return Response({"results": results.report_results(namespace=self.namespace, results=items)})


class WebhookView(NamespacedView):
    scopes = {"POST": Scope.EXECUTIONS_WRITE}

    @extend_schema(
        summary="Deliver an inbound webhook to the WAIT_FOR_WEBHOOK tasks it matches",
        request=serializers.JSONField,
        responses=inline_serializer("WebhookDelivered", fields={
            "matched": serializers.IntegerField(), "taskIds": serializers.ListField(child=serializers.UUIDField()),
        }),
    )
    def post(self, request, ns, name):
        if not isinstance(request.data, dict):
            raise InvalidField("body", "must be a JSON object")
        completed = waiting.deliver_webhook(namespace=self.namespace, name=name, body=request.data)
        return Response({"matched": len(completed), "taskIds": [str(pk) for pk in completed]})
