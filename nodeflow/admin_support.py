"""What every app's admin shares: read-only model admins whose changes go
through services, per-row action reports, and changelists that stay cheap
on big tables.

The admin is an edge like the API: it parses, calls one service per row and
renders what the service said. A refusal (a Conflict from retrying a running
execution, say) becomes an error message on the page, never a 500.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html

from nodeflow.errors import ApiError

log = logging.getLogger(__name__)

# Past this many rows a changelist says "10001" instead of counting on: an
# exact COUNT(*) of a big table is a full scan on every page view.
COUNT_CAP = 10_000


class CappedCountPaginator(Paginator):
    @cached_property
    def count(self) -> int:
        return self.object_list[: COUNT_CAP + 1].count()


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows are shown, never added, edited or deleted through forms: state
    changes go through actions that call the services."""

    show_full_result_count = False  # the unfiltered count is a second full count

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class BigTableAdmin(ReadOnlyAdmin):
    """A changelist over a table that grows without bound: capped counts,
    big JSON columns left out of the list, newest first by primary key
    (UUIDv7 ids are time-ordered, so the primary-key index serves it)."""

    paginator = CappedCountPaginator
    list_per_page = 50
    ordering = ("-pk",)
    # Columns never shown on the changelist (payloads can be megabytes).
    changelist_defer: tuple[str, ...] = ()
    # Columns holding a UUID that the search box matches exactly.
    uuid_search_fields: tuple[str, ...] = ()

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        rows = super().get_queryset(request)
        match = request.resolver_match
        if self.changelist_defer and match is not None and match.url_name.endswith("_changelist"):
            rows = rows.defer(*self.changelist_defer)
        return rows

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str):
        """A UUID is looked up exactly in ``uuid_search_fields`` (a text
        search of a UUID column would be a scan, and a malformed UUID an
        error); anything else goes to the text search fields."""
        term = search_term.strip()
        try:
            value = uuid.UUID(term)
        except ValueError:
            return super().get_search_results(request, queryset, search_term)
        if not self.uuid_search_fields:
            return super().get_search_results(request, queryset, search_term)
        match = Q()
        for name in self.uuid_search_fields:
            match |= Q(**{name: value})
        return queryset.filter(match), False


def has_operate_permission(request: HttpRequest, model: type[Model]) -> bool:
    """Actions change state: they need the model's change permission, which
    the read-only admins otherwise never use."""
    meta = model._meta
    return request.user.has_perm(f"{meta.app_label}.change_{meta.model_name}")


def report_each(
    request: HttpRequest, items: Iterable[Any], *, call: Callable[[Any], str], label: Callable[[Any], str] = str
) -> None:
    """Call ``call(item)`` for each item and report each outcome as a message:
    success with what ``call`` returned, or the service's refusal."""
    for item in items:
        name = label(item)
        try:
            outcome = call(item)
        except ApiError as exc:
            messages.error(request, f"{name}: {exc.message}")
        except Exception:
            log.exception("admin action on %s failed", name)
            messages.error(request, f"{name}: failed unexpectedly (the server log has the details)")
        else:
            messages.success(request, f"{name}: {outcome}")


def short_id(pk: Any):
    """An id as a changelist shows it: its first 8 characters on one line,
    the whole id on hover (a UUID in full wraps onto several lines)."""
    if pk is None:
        return "-"
    return format_html('<span title="{}" style="white-space: nowrap">{}…</span>', pk, str(pk)[:8])


def admin_link(model: type[Model], pk: Any, text: str | None = None):
    """A link to a row's admin page, from its id alone (no query)."""
    if pk is None:
        return "-"
    meta = model._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[pk])
    return format_html('<a href="{}">{}</a>', url, text or pk)


def changelist_link(model: type[Model], text: str, **filters: Any):
    meta = model._meta
    query = "&".join(f"{key}={value}" for key, value in filters.items())
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
    return format_html('<a href="{}?{}">{}</a>', url, query, text)
