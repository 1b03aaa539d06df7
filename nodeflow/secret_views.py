"""``…/secrets``: a namespace's secrets (admin key). A value goes in and is
never shown back: every answer carries the name and the times only."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from nodeflow import secrets
from nodeflow.auth import Scope
from nodeflow.fields import StrictCharField, StrictSerializer, checked_name
from nodeflow.models import Secret
from nodeflow.views import NamespacedView


class SecretValueSerializer(StrictSerializer):
    value = StrictCharField(min_length=1, max_length=secrets.MAX_VALUE_LENGTH, trim_whitespace=False)


class SecretSerializer(serializers.Serializer):
    """What the API shows of a secret: its name, never its value (the
    admin shows when it was set)."""

    name = serializers.CharField()


def secret_view(row: Secret) -> dict:
    return {"name": row.name}


class SecretListView(NamespacedView):
    scopes = {"GET": Scope.SECRETS}

    @extend_schema(summary="The namespace's secrets (names only)", responses=SecretSerializer(many=True))
    def get(self, request, ns):
        return Response([secret_view(row) for row in secrets.list_secrets(namespace=self.namespace)])


class SecretDetailView(NamespacedView):
    scopes = {"GET": Scope.SECRETS, "PUT": Scope.SECRETS, "DELETE": Scope.SECRETS}

    @extend_schema(summary="One secret (its name and times; never its value)", responses=SecretSerializer)
    def get(self, request, ns, name):
        return Response(secret_view(secrets.get_secret(namespace=self.namespace, name=name)))

    @extend_schema(
        summary="Create or replace a secret",
        request=SecretValueSerializer,
        responses={200: SecretSerializer, 201: SecretSerializer},
    )
    def put(self, request, ns, name):
        checked_name(name)
        body = SecretValueSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row, created = secrets.set_secret(namespace=self.namespace, name=name, value=body.validated_data["value"])
        return Response(secret_view(row), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(summary="Delete a secret (tasks naming it then fail terminally)", responses={204: None})
    def delete(self, request, ns, name):
        secrets.delete_secret(namespace=self.namespace, name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)
