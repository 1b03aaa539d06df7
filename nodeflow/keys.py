"""API-key services: create, revoke, list, and resolve a presented key."""
from __future__ import annotations

from django.db import transaction

from nodeflow import clock
from nodeflow.fields import is_name
from nodeflow.models import ApiKey, Namespace, Role, hash_key


def ensure_namespace(*, name: str) -> Namespace:
    # get_or_create skips model validators; a bad name would make a namespace
    # no /v1/ns/{ns}/ URL can reach.
    if not is_name(name):
        raise ValueError(f"namespace '{name}': use 1–128 characters from A–Z a–z 0–9 _ . -")
    namespace, _ = Namespace.objects.get_or_create(name=name)
    return namespace


@transaction.atomic
def create_api_key(*, role: str, namespace: str | None, name: str = "") -> tuple[ApiKey, str]:
    """Create a key; returns the row and the raw key (shown once, never stored)."""
    if role not in Role.values:
        raise ValueError(f"role must be one of {', '.join(Role.values)}")
    # `is not None`, not truthiness: an empty name (say, an unset shell
    # variable) must be refused, not silently become an every-namespace key.
    ns = ensure_namespace(name=namespace) if namespace is not None else None
    raw, prefix, digest = ApiKey.generate()
    key = ApiKey.objects.create(namespace=ns, role=role, name=name, prefix=prefix, key_hash=digest)
    return key, raw


def revoke_api_key(*, key_id: int) -> bool:
    """Revoke a key; False if it does not exist or was already revoked."""
    return ApiKey.objects.filter(pk=key_id, revoked_at__isnull=True).update(revoked_at=clock.now()) == 1


def resolve_api_key(raw: str) -> ApiKey | None:
    """The active key matching ``raw``, or None."""
    return (
        ApiKey.objects.select_related("namespace")
        .filter(key_hash=hash_key(raw), revoked_at__isnull=True)
        .first()
    )
