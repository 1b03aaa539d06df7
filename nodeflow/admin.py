"""Admin for namespaces and API keys. Keys are created and revoked through
``nodeflow.keys``, never by writing rows directly."""
from django.contrib import admin, messages

from nodeflow.keys import create_api_key, revoke_api_key
from nodeflow.models import ApiKey, Namespace


@admin.register(Namespace)
class NamespaceAdmin(admin.ModelAdmin):
    list_display = ("name", "created_at")
    search_fields = ("name",)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("id", "prefix", "role", "namespace", "name", "created_at", "revoked_at")
    list_filter = ("role", "namespace", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("name", "prefix", "namespace__name")
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        return ("namespace", "role", "name") if obj is None else ("namespace", "role", "name", "prefix", "created_at", "revoked_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("namespace", "role", "prefix", "created_at", "revoked_at")

    def save_model(self, request, obj, form, change) -> None:
        if change:
            ApiKey.objects.filter(pk=obj.pk).update(name=obj.name)
            return
        namespace = obj.namespace.name if obj.namespace_id else None
        key, raw = create_api_key(role=obj.role, namespace=namespace, name=obj.name)
        obj.pk, obj.prefix, obj.key_hash, obj.created_at = key.pk, key.prefix, key.key_hash, key.created_at
        obj._state.adding = False
        messages.warning(request, f"New API key (shown once, copy it now): {raw}")

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset) -> None:
        revoked = sum(revoke_api_key(key_id=pk) for pk in queryset.values_list("pk", flat=True))
        messages.success(request, f"Revoked {revoked} key(s).")
