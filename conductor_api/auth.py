"""``X-Authorization: <token>``, what Conductor clients send after the
token exchange (conductor_api/tokens.py). The principal is the key's, with its
namespace and role, so every route checks scopes exactly as with ``x-api-key``."""

from __future__ import annotations

from rest_framework import authentication, exceptions

from conductor_api import tokens
from nodeflow import throttling
from nodeflow.auth import Principal, client_address
from nodeflow.errors import ApiError

TOKEN_HEADER = "X-Authorization"


class InvalidToken(ApiError):
    """401 with the code conductor-python reads to renew its token."""

    status_code = 401
    error = "INVALID_TOKEN"


class ExpiredToken(InvalidToken):
    error = "EXPIRED_TOKEN"


class TokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        token = request.headers.get(TOKEN_HEADER)
        if token is None:
            return None
        client = client_address(request)
        wait = throttling.wait_s(client)
        if wait is not None:
            raise exceptions.Throttled(
                wait=max(1.0, wait),
                detail="too many failed authentications from this address (NODE_FLOW_AUTH_FAILURES_PER_MINUTE)",
            )
        try:
            key = tokens.verify(token.strip())
        except tokens.TokenExpired as exc:
            throttling.failed(client)
            raise ExpiredToken("the token expired; exchange the key for a new one at …/api/token") from exc
        except tokens.TokenInvalid as exc:
            throttling.failed(client)
            raise InvalidToken("invalid token, or its key was revoked") from exc
        return Principal(role=key.role, namespace=key.namespace, label=f"token of key {key.prefix}", key_id=key.id), key

    def authenticate_header(self, request) -> str:
        return TOKEN_HEADER
