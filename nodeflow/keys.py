"""API-key and namespace services: create, revoke, and resolve what a request
names. Resolutions are cached in-process for ``CACHE_S`` seconds, so a
request costs no database round trip for its key or namespace; a key revoked
in another process stops working within that time (at once in this one).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

from django.db import transaction

from nodeflow import clock
from nodeflow.fields import is_name
from nodeflow.models import KEY_PREFIX, ApiKey, Namespace, Role, hash_key


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
    revoked = ApiKey.objects.filter(pk=key_id, revoked_at__isnull=True).update(revoked_at=clock.now()) == 1
    clear_caches()
    return revoked


CACHE_S = 5.0
# KEY_PREFIX, then secrets.token_urlsafe(32): 43 characters of base64url.
_KEY_SHAPE = re.compile(re.escape(KEY_PREFIX) + r"[A-Za-z0-9_-]{43}")
_lock = threading.Lock()
_keys: dict[str, tuple[float, ResolvedKey]] = {}
_namespaces: dict[str, tuple[float, Namespace]] = {}


@dataclass(frozen=True)
class ResolvedKey:
    id: int
    role: str
    namespace: str | None
    prefix: str


def clear_caches() -> None:
    with _lock:
        _keys.clear()
        _namespaces.clear()


def could_be_a_key(raw: str) -> bool:
    """Whether ``raw`` has the shape of every key ApiKey.generate makes."""
    return _KEY_SHAPE.fullmatch(raw) is not None


def resolve_api_key(raw: str) -> ResolvedKey | None:
    """The active key matching ``raw``, or None. A string that cannot be a
    key is refused without a query; unknown keys are not cached: a key just
    created in another process works at once."""
    if not could_be_a_key(raw):
        return None
    digest = hash_key(raw)
    hit = _keys.get(digest)
    if hit is not None and hit[0] > time.monotonic():
        return hit[1]
    row = ApiKey.objects.select_related("namespace").filter(key_hash=digest, revoked_at__isnull=True).first()
    if row is None:
        return None
    key = ResolvedKey(row.pk, row.role, row.namespace.name if row.namespace_id else None, row.prefix)
    with _lock:
        _keys[digest] = (time.monotonic() + CACHE_S, key)
    return key


def resolve_key_id(key_id: int, *, fingerprint: str) -> ResolvedKey | None:
    """The active key with id ``key_id`` whose hash begins with
    ``fingerprint`` (what a Conductor token names: conductor_api/tokens.py), or
    None. Cached like ``resolve_api_key``, so a revocation takes effect
    within ``CACHE_S`` in every process and at once in this one."""
    cache_key = f"id:{key_id}:{fingerprint}"
    hit = _keys.get(cache_key)
    if hit is not None and hit[0] > time.monotonic():
        return hit[1]
    row = ApiKey.objects.select_related("namespace").filter(pk=key_id, revoked_at__isnull=True).first()
    if row is None or not row.key_hash.startswith(fingerprint):
        return None
    key = ResolvedKey(row.pk, row.role, row.namespace.name if row.namespace_id else None, row.prefix)
    with _lock:
        _keys[cache_key] = (time.monotonic() + CACHE_S, key)
    return key


def find_namespace(name: str) -> Namespace | None:
    hit = _namespaces.get(name)
    if hit is not None and hit[0] > time.monotonic():
        return hit[1]
    found = Namespace.objects.filter(name=name).first()
    if found is not None:
        with _lock:
            _namespaces[name] = (time.monotonic() + CACHE_S, found)
    return found
