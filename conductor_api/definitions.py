"""Definitions registered through the Conductor-compatible routes, with
Node Flow's own services (metadata.taskdefs, metadata.workflows) and their
validation. Conductor has no drafts: a workflow version registered here is
published at once, and registering the body of the published version again
registers nothing (a deploy script run twice adds no version)."""

from __future__ import annotations

from django.db import transaction
from rest_framework import serializers

from metadata import taskdef_bodies, taskdefs, workflows
from metadata.models import WorkflowVersion
from nodeflow.models import Namespace


def as_list(body: object) -> tuple[list, bool]:
    """A body that is a list of definitions or one definition: (items, was a list)."""
    return (body, True) if isinstance(body, list) else ([body], False)


def _prefixed(index: int | None, exc: serializers.ValidationError) -> serializers.ValidationError:
    return exc if index is None else serializers.ValidationError({index: exc.detail})


def register_task_definitions(*, namespace: Namespace, body: object) -> int:
    """Create or replace each task definition of ``body``; all or none."""
    items, listed = as_list(body)
    if listed and not items:
        raise serializers.ValidationError({"non_field_errors": ["give at least one task definition"]})
    validated = []
    for index, item in enumerate(items):
        try:
            values, extras = taskdef_bodies.validated(item)
        except serializers.ValidationError as exc:
            raise _prefixed(index if listed else None, exc) from exc
        validated.append({**values, "conductor": extras})
    with transaction.atomic():
        for values in validated:
            taskdefs.upsert_task_definition(namespace=namespace, values=values)
    return len(validated)


def register_workflows(*, namespace: Namespace, body: object) -> list[WorkflowVersion]:
    """Register and publish each workflow definition of ``body``; all or none."""
    items, listed = as_list(body)
    if listed and not items:
        raise serializers.ValidationError({"non_field_errors": ["give at least one workflow definition"]})
    with transaction.atomic():
        return [_register_published(namespace, item) for item in items]


class _Unchanged(Exception):
    """The body registered is the published version's: undo the registration."""


def _register_published(namespace: Namespace, body: object) -> WorkflowVersion:
    """Register ``body`` (register_workflow: its validation, its translation)
    and publish it, unless it is what the published version holds."""
    try:
        with transaction.atomic():
            row = workflows.register_workflow(namespace=namespace, body=body)
            name = row.definition.name
            if row.definition.published_version == row.version:
                return row  # the first version, published by registering it
            current = workflows.get_version(namespace=namespace, name=name)
            if current.body == row.body:
                raise _Unchanged(current)
            return workflows.publish_workflow(namespace=namespace, name=name, version=row.version)
    except _Unchanged as unchanged:
        return unchanged.args[0]
