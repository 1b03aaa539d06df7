"""Secrets, per namespace: set, list, delete, and resolve one by name.

A task can use only its own namespace's secrets: a WEBHOOK's ``secretName``
is looked up in the namespace the task runs in, so no tenant can have its
body signed with another's key. Values are written here and read only by
``resolve``; nothing shows them back. Operators may also provide secrets in
the environment, scoped the same way: ``NODE_FLOW_WEBHOOK_SECRETS`` keys
``"<namespace>/<name>"``, or ``NODE_FLOW_SECRET_<NAMESPACE>__<NAME>``
(upper case, other characters as ``_``); a secret set through the API wins.
"""

from __future__ import annotations

import os
import re

from django.conf import settings

from nodeflow import clock, named_rows, transactions
from nodeflow.errors import NotFound
from nodeflow.models import Namespace, Secret

MAX_VALUE_LENGTH = 4096


def set_secret(*, namespace: Namespace, name: str, value: str) -> tuple[Secret, bool]:
    """Create or replace the secret ``name``; (row, created)."""
    with transactions.outermost():
        created = named_rows.put(Secret, namespace=namespace, name=name, values={"value": value}, now=clock.now())
    return get_secret(namespace=namespace, name=name), created


def get_secret(*, namespace: Namespace, name: str) -> Secret:
    found = Secret.objects.filter(namespace=namespace, name=name).defer("value").first()
    if found is None:
        raise NotFound(f"secret '{name}' does not exist")
    return found


def list_secrets(*, namespace: Namespace) -> list[Secret]:
    return list(Secret.objects.filter(namespace=namespace).defer("value").order_by("name"))


def delete_secret(*, namespace: Namespace, name: str) -> None:
    deleted, _ = Secret.objects.filter(namespace=namespace, name=name).delete()
    if not deleted:
        raise NotFound(f"secret '{name}' does not exist")


def resolve(*, namespace: str, name: str) -> str | None:
    """The value of secret ``name`` of namespace ``namespace`` (by name), or None."""
    value = Secret.objects.filter(namespace__name=namespace, name=name).values_list("value", flat=True).first()
    if value:
        return value
    configured = settings.NODE_FLOW_WEBHOOK_SECRETS
    scoped = configured.get(f"{namespace}/{name}") if isinstance(configured, dict) else None
    if isinstance(scoped, str) and scoped:
        return scoped
    return os.environ.get(environment_variable(namespace=namespace, name=name)) or None


def environment_variable(*, namespace: str, name: str) -> str:
    """``NODE_FLOW_SECRET_<NAMESPACE>__<NAME>``: upper case, other characters as ``_``."""

    def part(text: str) -> str:
        return re.sub(r"[^A-Z0-9]", "_", text.upper())

    return f"NODE_FLOW_SECRET_{part(namespace)}__{part(name)}"
