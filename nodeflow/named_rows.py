"""Rows named within a namespace (semaphores, secrets): create or replace."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import models

from nodeflow.models import Namespace


def put(
    model: type[models.Model], *, namespace: Namespace, name: str, values: dict[str, Any], now: dt.datetime
) -> bool:
    """Set ``values`` on the row ``name`` of ``namespace``, creating it if
    there is none (an upsert, so two concurrent first PUTs make one row);
    True when it was created. Call inside the caller's transaction."""
    updated = model.objects.filter(namespace=namespace, name=name).update(**values, updated_at=now)
    if not updated:
        model.objects.bulk_create(
            [model(namespace=namespace, name=name, created_at=now, updated_at=now, **values)],
            update_conflicts=True,
            unique_fields=["namespace", "name"],
            update_fields=[*values, "updated_at"],
        )
    return not updated
