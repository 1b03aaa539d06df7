"""A task definition's body, both ways, for every route that takes one
(Node Flow's own and the Conductor-compatible ones): a body validated into
column values and the Conductor fields to keep, and a row answered as
every native field plus the Conductor fields it was given."""

from __future__ import annotations

from rest_framework import serializers

from metadata import conductor
from metadata.models import TaskDefinition
from metadata.serializers import TaskDefinitionSerializer


def answer(row: TaskDefinition) -> dict:
    """Every native field, and the Conductor fields the definition was given."""
    return conductor.taskdef_view(TaskDefinitionSerializer(row).data, row.conductor or {})


def validated(data: object, *, instance: TaskDefinition | None = None) -> tuple[dict, dict]:
    """(validated column values, the Conductor fields to keep); with
    ``instance``, a partial update of it. A refusal names the field as the
    body named it (``responseTimeoutSeconds``, not the native name it maps
    onto)."""
    native, extras = conductor.translate_taskdef(data)
    serializer = TaskDefinitionSerializer(instance, data=native, partial=instance is not None)
    if not serializer.is_valid():
        given = {conductor.TASKDEF_ALIASES[alias]: alias for alias in extras.get("aliases", [])}
        errors = serializer.errors
        raise serializers.ValidationError({given.get(key, key): value for key, value in errors.items()})
    return dict(serializer.validated_data), extras
