"""Admin for namespaces and API keys. Namespaces are created through
``nodeflow.keys.ensure_namespace``; keys are created and revoked through
``nodeflow.keys``, never by writing rows directly. Neither is deleted here:
deleting a namespace would take every running execution with it, and a key
is revoked, not deleted, so that what it did stays attributable."""

from django.contrib import admin, messages

from nodeflow.admin_support import report_each
from nodeflow.keys import create_api_key, ensure_namespace, revoke_api_key
from nodeflow.models import ApiKey, Namespace, Secret


@admin.register(Namespace)
class NamespaceAdmin(admin.ModelAdmin):
    list_display = ("name", "created_at")
    search_fields = ("name",)
    show_full_result_count = False

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("name", "created_at")

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change) -> None:
        if change:
            return  # nothing is editable: a namespace's name is in every URL and key
        created = ensure_namespace(name=obj.name)
        obj.pk, obj.created_at = created.pk, created.created_at
        obj._state.adding = False


@admin.register(Secret)
class SecretAdmin(admin.ModelAdmin):
    """Which secrets each namespace has; never their values (set them
    through ``PUT /v1/ns/{ns}/secrets/{name}``)."""

    list_display = ("name", "namespace", "created_at", "updated_at")
    list_filter = ("namespace",)
    search_fields = ("name", "namespace__name")
    fields = readonly_fields = ("namespace", "name", "created_at", "updated_at")
    show_full_result_count = False

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # through the API, where an admin key is checked


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("id", "prefix", "role", "namespace", "name", "created_at", "revoked_at")
    list_filter = ("role", "namespace", ("revoked_at", admin.EmptyFieldListFilter))
    list_select_related = ("namespace",)
    search_fields = ("name", "prefix", "namespace__name")
    show_full_result_count = False
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        return (
            ("namespace", "role", "name")
            if obj is None
            else ("namespace", "role", "name", "prefix", "created_at", "revoked_at")
        )

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("namespace", "role", "prefix", "created_at", "revoked_at")

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change) -> None:
        if change:
            ApiKey.objects.filter(pk=obj.pk).update(name=obj.name)
            return
        namespace = obj.namespace.name if obj.namespace_id else None
        key, raw = create_api_key(role=obj.role, namespace=namespace, name=obj.name)
        obj.pk, obj.prefix, obj.key_hash, obj.created_at = key.pk, key.prefix, key.key_hash, key.created_at
        obj._state.adding = False
        messages.warning(request, f"New API key (shown once, copy it now): {raw}")

    @admin.action(description="Revoke the selected keys", permissions=["change"])
    def revoke(self, request, queryset) -> None:
        def revoke(pk: int) -> str:
            return "revoked" if revoke_api_key(key_id=pk) else "already revoked"

        report_each(request, queryset.values_list("pk", flat=True), call=revoke, label=lambda pk: f"key {pk}")
