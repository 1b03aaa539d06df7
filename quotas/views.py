"""Routes for execution controls (SPEC §8–§9): semaphores, namespace quotas,
schedules and queue diagnostics. Thin: parse, authorise, call a service,
render."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from nodeflow.auth import Scope
from nodeflow.errors import InvalidField
from nodeflow.fields import checked_name
from nodeflow.views import NamespacedView
from quotas import diagnostics, namespace_quotas, schedules, semaphores
from quotas.models import Schedule
from quotas.serializers import (
    QueueSerializer,
    QueueWorkerSerializer,
    QuotasSerializer,
    ScheduleSerializer,
    SemaphoreSerializer,
    SemaphoreUseSerializer,
    holder_view,
    schedule_view,
    semaphore_view,
    workers_view,
)

# The answers' shapes, for the schema only (quotas/serializers.py).
SEMAPHORES = SemaphoreUseSerializer(many=True)
QUEUE = QueueSerializer
QUEUES = QueueSerializer(many=True)


class SemaphoreListView(NamespacedView):
    scopes = {"GET": Scope.CONTROLS_READ}

    @extend_schema(
        operation_id="list_semaphores", summary="Semaphores with their permits and live holders", responses=SEMAPHORES
    )
    def get(self, request, ns):
        return Response([semaphore_view(use) for use in semaphores.list_semaphores(namespace=self.namespace)])


class SemaphoreDetailView(NamespacedView):
    scopes = {"GET": Scope.CONTROLS_READ, "PUT": Scope.CONTROLS_WRITE, "DELETE": Scope.CONTROLS_WRITE}

    def _body(self, name: str) -> dict:
        row = semaphores.get_semaphore(namespace=self.namespace, name=name)
        holders = semaphores.live_holders(row)
        return {
            "name": row.name,
            "permits": row.permits,
            "held": len(holders),
            "holders": [holder_view(holder) for holder in holders],
        }

    @extend_schema(summary="One semaphore with its holders", responses=SemaphoreSerializer)
    def get(self, request, ns, name):
        return Response(self._body(name))

    @extend_schema(
        summary="Create or change a semaphore",
        request=SemaphoreSerializer,
        responses={200: SemaphoreSerializer, 201: SemaphoreSerializer},
    )
    def put(self, request, ns, name):
        body = SemaphoreSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        _, created = semaphores.set_semaphore(
            namespace=self.namespace, name=checked_name(name), permits=body.validated_data["permits"]
        )
        return Response(self._body(name), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(summary="Delete a semaphore (tasks naming it are no longer gated)", responses={204: None})
    def delete(self, request, ns, name):
        semaphores.delete_semaphore(namespace=self.namespace, name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class QuotasView(NamespacedView):
    scopes = {"GET": Scope.QUOTAS, "PUT": Scope.QUOTAS}

    @extend_schema(summary="The namespace's quotas (null: unlimited)", responses=QuotasSerializer)
    def get(self, request, ns):
        return Response(namespace_quotas.get_quotas(namespace=self.namespace))

    @extend_schema(
        summary="Replace the namespace's quotas (absent: unlimited)",
        request=QuotasSerializer,
        responses=QuotasSerializer,
    )
    def put(self, request, ns):
        body = QuotasSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(namespace_quotas.set_quotas(namespace=self.namespace, values=body.validated_data))


def _schedule_values(request, name: str | None) -> tuple[str, dict]:
    body = ScheduleSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    data = dict(body.validated_data)
    given = data.pop("name", None)
    if name is None and given is None:
        raise InvalidField("name", "required")
    if name is not None and given is not None and given != name:
        raise InvalidField("name", "differs from the name in the URL")
    return name or given, data


class ScheduleListView(NamespacedView):
    scopes = {"GET": Scope.EXECUTIONS_READ, "POST": Scope.EXECUTIONS_WRITE}

    @extend_schema(operation_id="list_schedules", summary="List schedules", responses=ScheduleSerializer(many=True))
    def get(self, request, ns):
        rows = Schedule.objects.filter(namespace=self.namespace).order_by("name")
        return Response([schedule_view(row) for row in rows])

    @extend_schema(
        summary="Create or replace a schedule",
        request=ScheduleSerializer,
        responses={200: ScheduleSerializer, 201: ScheduleSerializer},
    )
    def post(self, request, ns):
        name, values = _schedule_values(request, None)
        row, created = schedules.upsert_schedule(namespace=self.namespace, name=name, values=values)
        return Response(schedule_view(row), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class ScheduleDetailView(NamespacedView):
    scopes = {"GET": Scope.EXECUTIONS_READ, "PUT": Scope.EXECUTIONS_WRITE, "DELETE": Scope.EXECUTIONS_WRITE}

    @extend_schema(summary="One schedule, with its last firing and refusal", responses=ScheduleSerializer)
    def get(self, request, ns, name):
        return Response(schedule_view(schedules.get_schedule(namespace=self.namespace, name=name)))

    @extend_schema(
        summary="Create or replace a schedule",
        request=ScheduleSerializer,
        responses={200: ScheduleSerializer, 201: ScheduleSerializer},
    )
    def put(self, request, ns, name):
        name, values = _schedule_values(request, checked_name(name))
        row, created = schedules.upsert_schedule(namespace=self.namespace, name=name, values=values)
        return Response(schedule_view(row), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(summary="Delete a schedule", responses={204: None})
    def delete(self, request, ns, name):
        schedules.delete_schedule(namespace=self.namespace, name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class _SchedulePauseView(NamespacedView):
    scopes = {"POST": Scope.EXECUTIONS_WRITE}
    paused = True

    def post(self, request, ns, name):
        row = schedules.set_paused(namespace=self.namespace, name=name, paused=self.paused)
        return Response(schedule_view(row))


@extend_schema(summary="Pause a schedule", request=None, responses=ScheduleSerializer)
class SchedulePauseView(_SchedulePauseView):
    paused = True


@extend_schema(
    summary="Resume a schedule (next firing: the first after now)", request=None, responses=ScheduleSerializer
)
class ScheduleResumeView(_SchedulePauseView):
    paused = False


class QueueListView(NamespacedView):
    scopes = {"GET": Scope.CONTROLS_READ}

    @extend_schema(
        operation_id="list_queues", summary="Worker queues: depth (waiting) and tasks in flight", responses=QUEUES
    )
    def get(self, request, ns):
        return Response([use.view() for use in diagnostics.queues(namespace_id=self.namespace.id)])


class QueueDepthView(NamespacedView):
    scopes = {"GET": Scope.CONTROLS_READ}

    @extend_schema(summary="One queue's depth and tasks in flight", responses=QUEUE)
    def get(self, request, ns, task_type):
        return Response(
            diagnostics.queue_use(namespace_id=self.namespace.id, queue=checked_name(task_type, "taskType")).view()
        )


class QueueWorkersView(NamespacedView):
    scopes = {"GET": Scope.CONTROLS_READ}

    @extend_schema(
        summary="Workers and when each last polled each queue",
        parameters=[OpenApiParameter("taskType", str, required=False)],
        responses=QueueWorkerSerializer(many=True),
    )
    def get(self, request, ns):
        queue = request.query_params.get("taskType")
        rows = diagnostics.workers(
            namespace_id=self.namespace.id, queue=checked_name(queue, "taskType") if queue else None
        )
        return Response(workers_view(rows))
