"""Admin for controls. Changes go through the services (``quotas.semaphores``,
``quotas.schedules``), never by writing shared rows directly; the rest
(admission tickets, rate windows, polls) is read-only bookkeeping."""

from django.contrib import admin
from django.db.models import Model

from metadata.admin import DeletesThroughService
from nodeflow.admin_support import ReadOnlyAdmin, has_operate_permission, report_each
from quotas import schedules, semaphores
from quotas.models import Admission, NamespaceQuota, RateWindow, Schedule, Semaphore, SemaphoreHolder, WorkerPoll


class OperateMixin:
    model: type[Model]  # set by the ModelAdmin it is mixed into

    def has_operate_permission(self, request) -> bool:
        return has_operate_permission(request, self.model)


@admin.register(Semaphore)
class SemaphoreAdmin(DeletesThroughService):
    list_display = ("name", "namespace", "permits", "updated_at")
    list_filter = ("namespace",)
    list_select_related = ("namespace",)
    search_fields = ("name",)
    delete = staticmethod(semaphores.delete_semaphore)


@admin.register(SemaphoreHolder)
class SemaphoreHolderAdmin(OperateMixin, ReadOnlyAdmin):
    list_display = ("id", "semaphore", "task_id", "worker_id", "acquired_at")
    list_filter = ("semaphore__namespace", "semaphore__name")
    list_select_related = ("semaphore",)
    search_fields = ("worker_id", "semaphore__name")
    actions = ["release"]

    @admin.action(description="Release the selected holders (free their permits now)", permissions=["operate"])
    def release(self, request, queryset) -> None:
        def release(pk: int) -> str:
            return "released" if semaphores.release_holder(holder_id=pk) else "already released"

        report_each(request, queryset.values_list("pk", flat=True), call=release, label=lambda pk: f"holder {pk}")


@admin.register(NamespaceQuota)
class NamespaceQuotaAdmin(ReadOnlyAdmin):
    list_display = (
        "namespace",
        "max_concurrent_executions",
        "max_executions_per_minute",
        "max_workflow_definitions",
        "max_schedules",
        "updated_at",
    )
    list_select_related = ("namespace",)


@admin.register(Schedule)
class ScheduleAdmin(OperateMixin, DeletesThroughService):
    list_display = (
        "name",
        "namespace",
        "cron",
        "timezone",
        "workflow_name",
        "paused",
        "next_fire_at",
        "last_fired_at",
        "last_error",
    )
    list_filter = ("namespace", "paused")
    list_select_related = ("namespace",)
    search_fields = ("name", "workflow_name")
    actions = ["pause", "resume"]
    delete = staticmethod(schedules.delete_schedule)

    def _set(self, request, queryset, paused: bool) -> None:
        def act(row: Schedule) -> str:
            schedules.set_paused(namespace=row.namespace, name=row.name, paused=paused)
            return "paused" if paused else "resumed"

        report_each(
            request,
            list(queryset.select_related("namespace")),
            call=act,
            label=lambda row: f"schedule {row.namespace.name}/{row.name}",
        )

    @admin.action(description="Pause the selected schedules", permissions=["operate"])
    def pause(self, request, queryset) -> None:
        self._set(request, queryset, True)

    @admin.action(description="Resume the selected schedules", permissions=["operate"])
    def resume(self, request, queryset) -> None:
        self._set(request, queryset, False)


@admin.register(Admission)
class AdmissionAdmin(ReadOnlyAdmin):
    list_display = ("id", "bucket", "namespace", "execution_id", "admitted", "created_at")
    list_filter = ("namespace", "admitted")
    list_select_related = ("namespace",)
    search_fields = ("bucket",)


@admin.register(RateWindow)
class RateWindowAdmin(ReadOnlyAdmin):
    list_display = ("key", "namespace", "window_start", "used")
    list_filter = ("namespace",)
    list_select_related = ("namespace",)


@admin.register(WorkerPoll)
class WorkerPollAdmin(ReadOnlyAdmin):
    list_display = ("worker_id", "queue", "namespace", "last_poll_at")
    list_filter = ("namespace",)
    list_select_related = ("namespace",)
    search_fields = ("worker_id", "queue")
