"""Admin for executions and the rows around them. Everything is read-only:
an execution changes only through the actions below, each of which calls
the lifecycle service for one row at a time and reports what it said."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from executions import executor, lifecycle
from executions.models import BreakerState, DecideRequest, Execution, Message, Task, Timer
from nodeflow import clock
from nodeflow.admin_support import (
    BigTableAdmin,
    ReadOnlyAdmin,
    admin_link,
    changelist_link,
    has_operate_permission,
    report_each,
    short_id,
)

# The operator console's execution page (console/), when that app is installed.
CONSOLE_EXECUTION_URL = "console:execution"


class RootFilter(admin.SimpleListFilter):
    title = "tree position"
    parameter_name = "tree"

    def lookups(self, request, model_admin):
        return (("root", "root executions"), ("child", "sub-workflow children"))

    def queryset(self, request, queryset):
        if self.value() == "root":
            return queryset.filter(parent_execution__isnull=True)
        if self.value() == "child":
            return queryset.filter(parent_execution__isnull=False)
        return queryset


class OperateMixin:
    """Actions need the change permission (see admin_support)."""

    model: type[Model]  # set by the ModelAdmin it is mixed into

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return has_operate_permission(request, self.model)


@admin.register(Execution)
class ExecutionAdmin(OperateMixin, BigTableAdmin):
    list_display = (
        "short_id",
        "name",
        "version",
        "namespace",
        "status",
        "awaiting_admission",
        "depth",
        "created_at",
        "ended_at",
        "correlation_id",
    )
    list_filter = ("status", "namespace", "awaiting_admission", RootFilter)
    list_select_related = ("namespace",)
    search_fields = ("name", "=correlation_id", "=idempotency_key")
    uuid_search_fields = ("id", "parent_execution_id")
    changelist_defer = ("input", "output", "variables", "failed_task_names", "reason_for_incompletion")
    readonly_fields = ("tasks", "parent", "children", "console")
    actions = ["terminate", "pause", "resume", "retry", "restart", "decide"]

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: Execution):
        return short_id(obj.id)

    @admin.display(description="tasks")
    def tasks(self, obj: Execution):
        count = Task.objects.filter(execution_id=obj.id).count()
        current = Task.objects.filter(execution_id=obj.id, run=obj.run).count()
        return changelist_link(Task, f"{count} task rows ({current} in run {obj.run})", execution__exact=obj.id)

    @admin.display(description="parent execution")
    def parent(self, obj: Execution):
        return admin_link(Execution, obj.parent_execution_id)

    @admin.display(description="sub-workflow children")
    def children(self, obj: Execution):
        count = Execution.objects.filter(parent_execution_id=obj.id).count()
        return changelist_link(Execution, f"{count} children", parent_execution__exact=obj.id) if count else "-"

    @admin.display(description="console")
    def console(self, obj: Execution):
        try:
            url = reverse(CONSOLE_EXECUTION_URL, args=[obj.id])
        except NoReverseMatch:
            return "-"
        return format_html('<a href="{}">the execution page (graph)</a>', url)

    def _each(self, request: HttpRequest, queryset: QuerySet, call, done: str) -> None:
        def act(pk) -> str:
            call(pk)
            return done

        report_each(request, queryset.values_list("pk", flat=True), call=act, label=lambda pk: f"execution {pk}")

    @admin.action(description="Terminate (cancel open tasks and children)", permissions=["operate"])
    def terminate(self, request, queryset) -> None:
        reason = f"terminated in the admin by {request.user.get_username()}"
        self._each(
            request, queryset, lambda pk: lifecycle.terminate_execution(execution_id=pk, reason=reason), "terminated"
        )

    @admin.action(description="Pause", permissions=["operate"])
    def pause(self, request, queryset) -> None:
        self._each(request, queryset, lambda pk: lifecycle.pause_execution(execution_id=pk), "paused")

    @admin.action(description="Resume", permissions=["operate"])
    def resume(self, request, queryset) -> None:
        self._each(request, queryset, lambda pk: lifecycle.resume_execution(execution_id=pk), "resumed")

    @admin.action(description="Retry from the failed tasks", permissions=["operate"])
    def retry(self, request, queryset) -> None:
        self._each(request, queryset, lambda pk: lifecycle.retry_execution(execution_id=pk), "retried")

    @admin.action(description="Restart from the beginning (a new run)", permissions=["operate"])
    def restart(self, request, queryset) -> None:
        self._each(request, queryset, lambda pk: lifecycle.restart_execution(execution_id=pk), "restarted")

    @admin.action(description="Decide now (evaluate again)", permissions=["operate"])
    def decide(self, request, queryset) -> None:
        report_each(request, queryset.values_list("pk", flat=True), call=_decide, label=lambda pk: f"execution {pk}")


def _decide(execution_id) -> str:
    """What POST …/executions/{id}/decide does, said in words."""
    decision = executor.decide_now(execution_id)
    if decision is None:
        status = Execution.objects.filter(pk=execution_id).values_list("status", flat=True).first()
        return f"nothing to decide (it is {status or 'gone'})"
    return "decided"


class TaskKindFilter(admin.SimpleListFilter):
    """Fixed choices: a plain list_filter on the column would ask the whole
    task table for its distinct values."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return [(kind, kind) for kind in ("worker", "system", "operator", "waiting")]

    def queryset(self, request, queryset):
        return queryset.filter(kind=self.value()) if self.value() else queryset


@admin.register(Task)
class TaskAdmin(BigTableAdmin):
    list_display = (
        "short_id",
        "path",
        "attempt",
        "run",
        "status",
        "type",
        "queue",
        "execution_link",
        "worker_id",
        "scheduled_at",
        "started_at",
        "ended_at",
    )
    list_filter = ("status", TaskKindFilter, "namespace", "held")
    search_fields = ("path", "=task_def_name", "=queue", "=worker_id")
    uuid_search_fields = ("id", "execution_id", "child_execution_id")
    changelist_defer = ("input", "output", "policy", "logs", "reason_for_incompletion", "idempotency_key")
    readonly_fields = ("execution_link", "child_execution")

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: Task):
        return short_id(obj.id)

    @admin.display(description="execution")
    def execution_link(self, obj: Task):
        return admin_link(Execution, obj.execution_id, short_id(obj.execution_id))

    @admin.display(description="child execution")
    def child_execution(self, obj: Task):
        return admin_link(Execution, obj.child_execution_id)


@admin.register(DecideRequest)
class DecideRequestAdmin(OperateMixin, ReadOnlyAdmin):
    list_display = ("execution_link", "due_at", "waiting")
    ordering = ("due_at",)
    actions = ["decide"]

    @admin.display(description="execution")
    def execution_link(self, obj: DecideRequest):
        return admin_link(Execution, obj.execution_id)

    @admin.display(description="overdue by")
    def waiting(self, obj: DecideRequest) -> str:
        late = (clock.now() - obj.due_at).total_seconds()
        return f"{late:.1f} s" if late > 0 else "not due"

    @admin.action(description="Decide now", permissions=["operate"])
    def decide(self, request, queryset) -> None:
        report_each(
            request, queryset.values_list("execution_id", flat=True), call=_decide, label=lambda pk: f"execution {pk}"
        )


@admin.register(Timer)
class TimerAdmin(BigTableAdmin):
    list_display = ("id", "kind", "execution_link", "task_id", "due_at")
    list_filter = ("kind",)
    ordering = ("due_at",)
    uuid_search_fields = ("id", "execution_id", "task_id")
    readonly_fields = ("execution_link",)

    @admin.display(description="execution")
    def execution_link(self, obj: Timer):
        return admin_link(Execution, obj.execution_id)


@admin.register(Message)
class MessageAdmin(BigTableAdmin):
    list_display = ("id", "execution_link", "created_at", "consumed_by")
    list_filter = (("consumed_by", admin.EmptyFieldListFilter),)
    uuid_search_fields = ("execution_id", "consumed_by")
    changelist_defer = ("payload",)
    readonly_fields = ("execution_link",)

    @admin.display(description="execution")
    def execution_link(self, obj: Message):
        return admin_link(Execution, obj.execution_id)


@admin.register(BreakerState)
class BreakerStateAdmin(ReadOnlyAdmin):
    list_display = ("key", "state", "namespace", "process", "failures", "requests", "opened_until", "updated_at")
    list_filter = ("state", "namespace")
    list_select_related = ("namespace",)
    search_fields = ("key", "process")
    ordering = ("key", "process")
