"""Admin for controls. Changes go through the services (``quotas.semaphores``,
``quotas.schedules``), never by writing shared rows directly."""
from django.contrib import admin, messages

from metadata.admin import ReadOnlyAdmin
from quotas import schedules, semaphores
from quotas.models import Admission, NamespaceQuota, RateWindow, Schedule, Semaphore, SemaphoreHolder, WorkerPoll


@admin.register(Semaphore)
class SemaphoreAdmin(ReadOnlyAdmin):
    list_display = ("name", "namespace", "permits", "updated_at")
    list_filter = ("namespace",)
    search_fields = ("name",)


@admin.register(SemaphoreHolder)
class SemaphoreHolderAdmin(ReadOnlyAdmin):
    list_display = ("id", "semaphore", "task_id", "worker_id", "acquired_at")
    list_filter = ("semaphore__namespace", "semaphore__name")
    search_fields = ("worker_id", "semaphore__name")
    actions = ["release"]

    @admin.action(description="Release the selected holders (free their permits now)")
    def release(self, request, queryset) -> None:
        released = sum(semaphores.release_holder(holder_id=pk) for pk in queryset.values_list("pk", flat=True))
        messages.success(request, f"Released {released} holder(s).")


@admin.register(NamespaceQuota)
class NamespaceQuotaAdmin(ReadOnlyAdmin):
    list_display = ("namespace", "max_concurrent_executions", "max_executions_per_minute",
                    "max_workflow_definitions", "max_schedules", "updated_at")


@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyAdmin):
    list_display = ("name", "namespace", "cron", "timezone", "workflow_name", "paused", "next_fire_at",
                    "last_fired_at", "last_error")
    list_filter = ("namespace", "paused")
    search_fields = ("name", "workflow_name")
    actions = ["pause", "resume"]

    def _set(self, request, queryset, paused: bool) -> None:
        for row in queryset.select_related("namespace"):
            schedules.set_paused(namespace=row.namespace, name=row.name, paused=paused)
        messages.success(request, f"{'Paused' if paused else 'Resumed'} {queryset.count()} schedule(s).")

    @admin.action(description="Pause the selected schedules")
    def pause(self, request, queryset) -> None:
        self._set(request, queryset, True)

    @admin.action(description="Resume the selected schedules")
    def resume(self, request, queryset) -> None:
        self._set(request, queryset, False)


@admin.register(Admission)
class AdmissionAdmin(ReadOnlyAdmin):
    list_display = ("id", "bucket", "namespace", "execution_id", "admitted", "created_at")
    list_filter = ("namespace", "admitted")
    search_fields = ("bucket",)


@admin.register(RateWindow)
class RateWindowAdmin(ReadOnlyAdmin):
    list_display = ("key", "namespace", "window_start", "used")
    list_filter = ("namespace",)


@admin.register(WorkerPoll)
class WorkerPollAdmin(ReadOnlyAdmin):
    list_display = ("worker_id", "queue", "namespace", "last_poll_at")
    list_filter = ("namespace",)
    search_fields = ("worker_id", "queue")
