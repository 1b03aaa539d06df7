"""One error model for the whole API.

Every error body is ``{"error": CODE, "message": "..."}`` plus the fields its
kind names (``field`` for validation errors, ``control``/``limit``/``current``
for refusals). No input produces a 500: unexpected exceptions are logged and
answered in the same shape.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

log = logging.getLogger(__name__)


class ApiError(exceptions.APIException):
    """An error with a code and extra body fields. Subclass per kind."""

    status_code = status.HTTP_400_BAD_REQUEST
    error = "BAD_REQUEST"
    default_detail = "bad request"

    def __init__(self, message: str | None = None, **fields: Any) -> None:
        super().__init__(message or self.default_detail)
        self.message = message or str(self.default_detail)
        self.fields = fields

    def body(self) -> dict[str, Any]:
        return {"error": self.error, "message": self.message, **self.fields}


class InvalidField(ApiError):
    """400 naming the offending field (a dotted/indexed path)."""

    error = "VALIDATION_ERROR"

    def __init__(self, field: str, message: str, **fields: Any) -> None:
        super().__init__(f"{field}: {message}", field=field, **fields)


class NotFound(ApiError):
    status_code = status.HTTP_404_NOT_FOUND
    error = "NOT_FOUND"
    default_detail = "not found"


class Conflict(ApiError):
    status_code = status.HTTP_409_CONFLICT
    error = "CONFLICT"
    default_detail = "conflict"


class LimitExceeded(ApiError):
    """429 from an execution control; ``control`` names which one."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    error = "LIMIT_EXCEEDED"


class QuotaExceeded(ApiError):
    """429 from a namespace quota: ``quota``, ``limit``, ``current``,
    ``retryAfterSeconds`` (also sent as a Retry-After header)."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    error = "QUOTA_EXCEEDED"


class PayloadTooLarge(ApiError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    error = "PAYLOAD_TOO_LARGE"


class Unavailable(ApiError):
    """The database could not be reached (restarting, refusing connections,
    SQLite's lock held past its busy timeout). Nothing was committed, so the
    same request may be sent again; ``Retry-After`` says when."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    error = "UNAVAILABLE"


_DRF_CODES: dict[type, str] = {
    exceptions.ParseError: "MALFORMED_REQUEST",
    exceptions.NotAuthenticated: "UNAUTHENTICATED",
    exceptions.AuthenticationFailed: "UNAUTHENTICATED",
    exceptions.PermissionDenied: "FORBIDDEN",
    exceptions.NotFound: "NOT_FOUND",
    exceptions.MethodNotAllowed: "METHOD_NOT_ALLOWED",
    exceptions.NotAcceptable: "NOT_ACCEPTABLE",
    exceptions.UnsupportedMediaType: "UNSUPPORTED_MEDIA_TYPE",
    exceptions.Throttled: "THROTTLED",
}


def _child_path(prefix: str, key: Any) -> str:
    # ListField reports item errors as {index: ...}; render them as ``[index]``
    # like list positions everywhere else (``semaphores[1]``, not ``semaphores.1``).
    if key == "non_field_errors":
        return prefix
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else str(key)


def flatten_errors(detail: Any, prefix: str = "") -> list[tuple[str, str]]:
    """DRF's nested error detail → [(field path, message)], e.g. ``tasks[1].name``."""
    if isinstance(detail, dict):
        out: list[tuple[str, str]] = []
        for key, value in detail.items():
            out.extend(flatten_errors(value, _child_path(prefix, key)))
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            return [(prefix, str(item)) for item in detail]
        out = []
        for index, item in enumerate(detail):
            if item:
                out.extend(flatten_errors(item, f"{prefix}[{index}]"))
        return out
    return [(prefix, str(detail))]


def validation_body(detail: Any) -> dict[str, Any]:
    errors = flatten_errors(detail) or [("", "invalid input")]
    field, message = errors[0]
    return {
        "error": "VALIDATION_ERROR",
        "message": f"{field}: {message}" if field else message,
        "field": field or None,
        "errors": [{"field": f or None, "message": m} for f, m in errors],
    }


def _drf_body(exc: exceptions.APIException) -> dict[str, Any]:
    if isinstance(exc, exceptions.ValidationError):
        return validation_body(exc.detail)
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "ERROR")
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if isinstance(exc, exceptions.ParseError):
        message = f"the request body could not be parsed: {message}"
    return {"error": code, "message": str(message)}


def _where(context: dict) -> str:
    """The request a log line is about: method, path and view (not the
    view object's repr, which names only a memory address)."""
    request, view = context.get("request"), context.get("view")
    method, path = getattr(request, "method", "?"), getattr(request, "path", "?")
    return f"{method} {path} ({type(view).__name__})"


def exception_handler(exc: Exception, context: dict) -> Response:
    """DRF's EXCEPTION_HANDLER: every error in the one model."""
    headers: dict[str, str] = {}
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "not found")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or "forbidden")
    elif isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge("the request body is larger than the limit (NODE_FLOW_MAX_BODY_BYTES)")
    elif isinstance(exc, RecursionError):
        # The JSON and YAML parsers recurse per nesting level, so a deeply
        # nested body exhausts the stack: the input's fault, not the server's.
        log.warning("request nested too deeply: %s", _where(context))
        exc = exceptions.ParseError("the body is nested too deeply")
    elif isinstance(exc, (OperationalError, InterfaceError)):
        # A lost or refused connection is the database's state, not a bug:
        # the transaction rolled back, and the next request reconnects.
        log.warning("database unavailable: %s: %s", _where(context), exc)
        exc = Unavailable("the database is unavailable; nothing was changed, try again", retryAfterSeconds=1)

    if isinstance(exc, ApiError):
        body, code = exc.body(), exc.status_code
        if "retryAfterSeconds" in exc.fields:
            headers["Retry-After"] = str(max(1, int(-(-float(exc.fields["retryAfterSeconds"]) // 1))))
    elif isinstance(exc, exceptions.APIException):
        body, code = _drf_body(exc), exc.status_code
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
    else:
        log.exception("unhandled error in %s", context.get("view"))
        body, code = {"error": "INTERNAL", "message": "internal error; the server log has details"}, 500
    return Response(body, status=code, headers=headers)


# Django-level handlers, for requests that never reach a DRF view.
def handler404(request, exception=None) -> JsonResponse:
    return JsonResponse({"error": "NOT_FOUND", "message": f"no route for {request.path}"}, status=404)


def handler500(request) -> JsonResponse:
    return JsonResponse({"error": "INTERNAL", "message": "internal error; the server log has details"}, status=500)


def handler400(request, exception=None) -> JsonResponse:
    return JsonResponse({"error": "BAD_REQUEST", "message": str(exception) or "bad request"}, status=400)
