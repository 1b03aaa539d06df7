"""The token exchange of the Conductor-compatible API (``POST …/api/token``).

A Node Flow API key is a Conductor key pair: ``keyId`` is the key's id (the
first column of ``manage.py nodeflow_apikey list``, what ``revoke`` takes)
and ``keySecret`` is the raw key itself. The exchange checks the secret
against the stored hash, as ``x-api-key`` does, and answers a token: the key
id, the first characters of the key's hash and when it was issued, signed
with ``SECRET_KEY``; it expires ``TOKEN_TTL_S`` later. Nothing about it is
stored. Each request that carries the token looks the key up by id again
(``nodeflow.keys.resolve_key_id``, cached for the same few seconds as
keys), so a revoked key's tokens stop working as soon as the key does.
"""

from __future__ import annotations

from django.core import signing

from nodeflow import clock
from nodeflow.keys import ResolvedKey, resolve_api_key, resolve_key_id
from nodeflow.models import hash_key

# conductor-python renews its token every 45 minutes (auth_token_ttl_min),
# and again at once when told EXPIRED_TOKEN.
TOKEN_TTL_S = 3600
FINGERPRINT_CHARS = 16
_SALT = "nodeflow.conductor.token"


class TokenExpired(Exception):
    pass


class TokenInvalid(Exception):
    pass


def exchange(*, key_id: str, key_secret: str) -> tuple[ResolvedKey, str] | None:
    """The key ``key_secret`` is, if its id is ``key_id``, with a new token for it."""
    key = resolve_api_key(key_secret)
    if key is None or str(key.id) != key_id.strip():
        return None
    issued_s = int(clock.now().timestamp())
    payload = f"{key.id}.{hash_key(key_secret)[:FINGERPRINT_CHARS]}.{issued_s}"
    return key, signing.Signer(salt=_SALT).sign(payload)


def verify(token: str) -> ResolvedKey:
    """The active key ``token`` names; TokenExpired or TokenInvalid otherwise."""
    try:
        payload = signing.Signer(salt=_SALT).unsign(token)
    except signing.BadSignature as exc:
        raise TokenInvalid from exc
    key_id, fingerprint, issued_s = [*payload.split("."), "", "", ""][:3]
    if not key_id.isdigit() or len(fingerprint) != FINGERPRINT_CHARS or not issued_s.isdigit():
        raise TokenInvalid
    # Aged by nodeflow.clock, as every deadline is (tests move it).
    if clock.now().timestamp() - int(issued_s) > TOKEN_TTL_S:
        raise TokenExpired
    key = resolve_key_id(int(key_id), fingerprint=fingerprint)
    if key is None:  # revoked, or deleted
        raise TokenInvalid
    return key
