"""Admin views of definitions. Definitions change through the API (which
validates them); the admin shows them and can delete task and workflow
definitions, through the same services as the API's DELETE."""

from collections.abc import Callable
from typing import ClassVar

from django.contrib import admin

from metadata import taskdefs, workflows
from metadata.models import TaskDefinition, WorkflowDefinition, WorkflowSnapshot, WorkflowVersion
from nodeflow.admin_support import ReadOnlyAdmin, report_each

__all__ = ["ReadOnlyAdmin"]  # imported from here by older code


class DeletesThroughService(ReadOnlyAdmin):
    """Deletion (the change page's button and the bulk action) calls
    ``delete(namespace=…, name=…)`` for each row and reports each outcome."""

    # The service: a staticmethod taking namespace= and name=, set by each subclass.
    delete: ClassVar[Callable[..., None]]

    def has_delete_permission(self, request, obj=None) -> bool:
        return admin.ModelAdmin.has_delete_permission(self, request, obj)

    def get_deleted_objects(self, objs, request):
        # The service deletes what hangs off the row (versions, holders);
        # those models are read-only here, which must not veto it.
        deleted, counts, _, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    def delete_model(self, request, obj) -> None:
        type(self).delete(namespace=obj.namespace, name=obj.name)

    def delete_queryset(self, request, queryset) -> None:
        rows = list(queryset.select_related("namespace"))
        report_each(
            request, rows, call=lambda row: self._delete(row), label=lambda row: f"{row.namespace.name}/{row.name}"
        )

    def _delete(self, row) -> str:
        type(self).delete(namespace=row.namespace, name=row.name)
        return "deleted"


@admin.register(TaskDefinition)
class TaskDefinitionAdmin(DeletesThroughService):
    list_display = (
        "name",
        "namespace",
        "retry_count",
        "retry_logic",
        "concurrent_exec_limit",
        "rate_limit_per_frequency",
        "updated_at",
    )
    list_filter = ("namespace", "retry_logic", "timeout_policy")
    list_select_related = ("namespace",)
    search_fields = ("name",)
    delete = staticmethod(taskdefs.delete_task_definition)


class VersionInline(admin.TabularInline):
    model = WorkflowVersion
    fields = ("version", "created_at", "published_at", "snapshot")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(WorkflowDefinition)
class WorkflowDefinitionAdmin(DeletesThroughService):
    list_display = ("name", "namespace", "published_version", "latest_version", "updated_at")
    list_filter = ("namespace",)
    list_select_related = ("namespace",)
    search_fields = ("name",)
    inlines = [VersionInline]
    delete = staticmethod(workflows.delete_workflow)


@admin.register(WorkflowVersion)
class WorkflowVersionAdmin(ReadOnlyAdmin):
    list_display = ("definition", "version", "namespace", "created_at", "published_at", "snapshot_id")
    list_filter = ("definition__namespace",)
    list_select_related = ("definition__namespace",)
    search_fields = ("definition__name",)

    @admin.display(description="namespace")
    def namespace(self, obj: WorkflowVersion) -> str:
        return obj.definition.namespace.name


@admin.register(WorkflowSnapshot)
class WorkflowSnapshotAdmin(ReadOnlyAdmin):
    """Snapshots are immutable and executions run from them: never deleted here."""

    list_display = ("id", "name", "version", "namespace", "created_at")
    list_filter = ("namespace",)
    list_select_related = ("namespace",)
    search_fields = ("name",)
    ordering = ("-pk",)
