"""Task-definition services: upsert, patch, delete; and the policies the
decider copies onto tasks it schedules.

Policies are cached per process for ``POLICY_CACHE_S``: a change is seen at
once by the process that made it and within that time by every other one.
"""

from __future__ import annotations

import threading
import time

from django.db import IntegrityError, transaction

from metadata.models import TaskDefinition
from metadata.serializers import POLICY_COLUMNS
from nodeflow import clock, transactions
from nodeflow.errors import NotFound
from nodeflow.models import Namespace
from quotas import controls


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
    _changed()
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


def _changed() -> None:
    # Now, and again after commit: a read between the two would cache the
    # old values again. The controls' hint cache (quotas.controls) too.
    for forget in (forget_policies, controls.forget):
        forget()
        transaction.on_commit(forget)


def patch_task_definition(*, namespace: Namespace, name: str, values: dict) -> TaskDefinition:
    """Change only the given fields (the name cannot change)."""
    values = {key: value for key, value in values.items() if key != "name"}
    _changed()
    with transactions.outermost():
        updated = TaskDefinition.objects.filter(namespace=namespace, name=name).update(**values, updated_at=clock.now())
        if not updated:
            raise NotFound(f"task definition '{name}' does not exist")
        return get_task_definition(namespace=namespace, name=name)


def delete_task_definition(*, namespace: Namespace, name: str) -> None:
    _changed()
    deleted, _ = TaskDefinition.objects.filter(namespace=namespace, name=name).delete()
    if not deleted:
        raise NotFound(f"task definition '{name}' does not exist")


POLICY_CACHE_S = 1.0
_policy_lock = threading.Lock()
_policies: dict[int, tuple[float, dict[str, dict]]] = {}


def forget_policies() -> None:
    with _policy_lock:
        _policies.clear()


def policies(namespace_id: int) -> dict[str, dict]:
    """Every task definition's retry and timeout policy in a namespace, by name
    (camelCase fields, as copied onto tasks)."""
    hit = _policies.get(namespace_id)
    if hit is not None and hit[0] > time.monotonic():
        return hit[1]
    rows = TaskDefinition.objects.filter(namespace_id=namespace_id).values("name", *POLICY_COLUMNS.values())
    found = {row["name"]: {camel: row[column] for camel, column in POLICY_COLUMNS.items()} for row in rows}
    with _policy_lock:
        _policies[namespace_id] = (time.monotonic() + POLICY_CACHE_S, found)
    return found
