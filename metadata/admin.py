"""Admin views of definitions. Definitions change through the API (which
validates them); the admin shows them and can delete them."""
from django.contrib import admin

from metadata.models import TaskDefinition, WorkflowDefinition, WorkflowSnapshot, WorkflowVersion


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(TaskDefinition)
class TaskDefinitionAdmin(ReadOnlyAdmin):
    list_display = ("name", "namespace", "retry_count", "retry_logic", "concurrent_exec_limit", "rate_limit_per_frequency", "updated_at")
    list_filter = ("namespace", "retry_logic", "timeout_policy")
    search_fields = ("name",)


class VersionInline(admin.TabularInline):
    model = WorkflowVersion
    fields = ("version", "created_at", "published_at", "snapshot")
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(WorkflowDefinition)
class WorkflowDefinitionAdmin(ReadOnlyAdmin):
    list_display = ("name", "namespace", "published_version", "latest_version", "updated_at")
    list_filter = ("namespace",)
    search_fields = ("name",)
    inlines = [VersionInline]


@admin.register(WorkflowSnapshot)
class WorkflowSnapshotAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "version", "namespace", "created_at")
    list_filter = ("namespace",)
    search_fields = ("name",)
