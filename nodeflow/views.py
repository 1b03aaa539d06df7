"""Shared view bases and the service endpoints (health)."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.utils.functional import cached_property
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from nodeflow import plain_json
from nodeflow.errors import InvalidField, NotFound, PayloadTooLarge
from nodeflow.keys import find_namespace
from nodeflow.models import Namespace
from nodeflow.wsgi_bodies import content_length


class NamespacedView(APIView):
    """A view under ``/v1/ns/{ns}/``. Subclasses set ``scopes`` (method → Scope);
    the permission check runs before ``namespace`` is ever looked up, so a key
    for another namespace learns nothing about this one."""

    scopes: dict = {}
    # Methods whose plainly JSON requests skip DRF's request machinery (nodeflow.plain_json).
    plain_json_methods: frozenset[str] = frozenset()

    def dispatch(self, request, *args, **kwargs):
        if request.method in self.plain_json_methods and plain_json.is_plain(request, self, kwargs):
            return plain_json.dispatch(self, request, args, kwargs, _checks)
        return super().dispatch(request, *args, **kwargs)

    def initial(self, request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)
        _checks(request, kwargs)

    def query(self, serializer_class) -> dict:
        """The request's query parameters, validated by ``serializer_class``
        (a 400 naming the field otherwise)."""
        query = serializer_class(data=self.request.query_params.dict())
        query.is_valid(raise_exception=True)
        return query.validated_data

    @cached_property
    def namespace(self) -> Namespace:
        name = self.kwargs["ns"]
        found = find_namespace(name)
        if found is None:
            raise NotFound(f"namespace '{name}' does not exist")
        return found


# URL parameter → the field name errors use.
PATH_FIELDS = {"ns": "namespace", "task_type": "taskType", "execution_id": "executionId", "task_id": "taskId"}


def _checks(request, kwargs: dict) -> None:
    """What every namespaced request is checked for once DRF's checks passed."""
    _refuse_large_body(request)
    _refuse_nul_in_path(kwargs)


def _refuse_nul_in_path(kwargs: dict) -> None:
    """No name or id holds a NUL, and PostgreSQL refuses one in any query."""
    for key, value in kwargs.items():
        if isinstance(value, str) and "\x00" in value:
            raise InvalidField(PATH_FIELDS.get(key, key), "must not contain NUL characters")


def _refuse_large_body(request) -> None:
    """413 before anything reads the body. Django's DATA_UPLOAD_MAX_MEMORY_SIZE
    leaves out the file parts of a multipart body; this counts every byte."""
    limit = settings.NODE_FLOW_MAX_BODY_BYTES
    if content_length(request.META) > limit:
        raise PayloadTooLarge(f"the request body is larger than the limit of {limit} bytes (NODE_FLOW_MAX_BODY_BYTES)")


HEALTH = inline_serializer(
    "Health",
    {
        "status": serializers.ChoiceField(choices=["ok", "unavailable"]),
        "database": serializers.CharField(help_text='"ok", or why the database cannot be reached'),
    },
)


class HealthView(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    @extend_schema(summary="Liveness and database check", responses={200: HEALTH, 503: HEALTH})
    def get(self, request):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return Response({"status": "ok", "database": "ok"})
        except Exception as exc:  # noqa: BLE001 - health reports, never raises
            return Response({"status": "unavailable", "database": str(exc)}, status=503)
