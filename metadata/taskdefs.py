"""Task-definition services: upsert, patch, delete."""
from __future__ import annotations

from django.db import IntegrityError, transaction

from metadata.models import TaskDefinition
from nodeflow import clock
from nodeflow.errors import NotFound
from nodeflow.models import Namespace


def get_task_definition(*, namespace: Namespace, name: str) -> TaskDefinition:
    found = TaskDefinition.objects.filter(namespace=namespace, name=name).first()
    if found is None:
        raise NotFound(f"task definition '{name}' does not exist")
    return found


def upsert_task_definition(*, namespace: Namespace, values: dict) -> tuple[TaskDefinition, bool]:
    """Create the definition, or replace every field of the existing one.
    ``values`` are validated column values, defaults filled in."""
    name = values["name"]
    fields = {key: value for key, value in values.items() if key != "name"}
    fields["updated_at"] = clock.now()
    for _ in range(2):  # a concurrent create of the same name: retry as a replace
        try:
            with transaction.atomic():
                updated = TaskDefinition.objects.filter(namespace=namespace, name=name).update(**fields)
                if updated:
                    return get_task_definition(namespace=namespace, name=name), False
                return TaskDefinition.objects.create(namespace=namespace, name=name, **fields), True
        except IntegrityError:
            continue
    raise IntegrityError(f"could not upsert task definition {name}")


def patch_task_definition(*, namespace: Namespace, name: str, values: dict) -> TaskDefinition:
    """Change only the given fields (the name cannot change)."""
    values = {key: value for key, value in values.items() if key != "name"}
    with transaction.atomic():
        updated = TaskDefinition.objects.filter(namespace=namespace, name=name).update(
            **values, updated_at=clock.now()
        )
        if not updated:
            raise NotFound(f"task definition '{name}' does not exist")
        return get_task_definition(namespace=namespace, name=name)


def delete_task_definition(*, namespace: Namespace, name: str) -> None:
    deleted, _ = TaskDefinition.objects.filter(namespace=namespace, name=name).delete()
    if not deleted:
        raise NotFound(f"task definition '{name}' does not exist")
