"""The server's error model as exceptions (SPEC §2, nodeflow/errors.py).

Every refusal is ``{"error": CODE, "message": "..."}`` plus the fields its
kind names (``field`` for a validation error, ``control``/``limit``/
``current`` for a control's refusal, ``quota``/``retryAfterSeconds`` for a
quota's). ``NodeFlowError`` carries that body whole (``.body``), with the
common parts as attributes; the subclass says which kind it is, chosen by
the status and then the code, so ``except NotFound`` reads as it should.
"""

from __future__ import annotations

from typing import Any


class NodeFlowError(Exception):
    """Whatever went wrong talking to the server. A refusal has ``status``
    (the HTTP status), ``code`` (the body's ``error``), ``message``,
    ``field`` (the offending field, for a validation error) and ``body``
    (the error body as the server sent it, every field kept)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        body: dict[str, Any] | None = None,
        method: str = "",
        url: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.body: dict[str, Any] = body or {}
        self.method = method
        self.url = url
        self.headers = headers or {}

    @property
    def field(self) -> str | None:
        return self.body.get("field")

    def __str__(self) -> str:
        where = f" ({self.method} {self.url})" if self.method else ""
        status = f"{self.status} {self.code}: " if self.status else ""
        return f"{status}{self.message}{where}"


class ConnectionFailed(NodeFlowError):
    """The server could not be reached, or did not answer in time. Nothing
    is known about whether the request took effect."""


class WaitTimeout(NodeFlowError):
    """``Client.wait`` gave up: the execution had not ended in time.
    ``execution`` is the last one read."""

    def __init__(self, message: str, *, execution: Any = None) -> None:
        super().__init__(message)
        self.execution = execution


class Invalid(NodeFlowError):
    """400: the request was refused as it stands (a field out of range, an
    unknown field, malformed JSON or YAML). ``field`` names the first
    offending field; ``errors`` lists every one the server reported."""

    @property
    def errors(self) -> list[dict[str, Any]]:
        return list(self.body.get("errors") or [])


class Unauthenticated(NodeFlowError):
    """401: no API key, or one the server does not know (or revoked)."""


class Forbidden(NodeFlowError):
    """403: the key's role or namespace does not allow this."""


class NotFound(NodeFlowError):
    """404: no such execution, task, definition, route…"""


class Conflict(NodeFlowError):
    """409: the resource is not in a state that allows this (terminating an
    ended execution, a stale lease, a message to an ended execution)."""


class PayloadTooLarge(NodeFlowError):
    """413: the body is larger than the server's NODE_FLOW_MAX_BODY_BYTES."""


class TooManyRequests(NodeFlowError):
    """429: refused by an execution control or a quota; nothing changed.
    ``retry_after_s`` is the server's hint when it gave one."""

    @property
    def retry_after_s(self) -> float | None:
        value = self.body.get("retryAfterSeconds", self.headers.get("retry-after"))
        try:
            return float(value) if value is not None else None
        except (TypeError, ValueError):
            return None


class LimitExceeded(TooManyRequests):
    """429 LIMIT_EXCEEDED: an execution control (``control``: e.g.
    maxConcurrentExecutions) with its ``limit`` and ``current``."""

    @property
    def control(self) -> str | None:
        return self.body.get("control")


class QuotaExceeded(TooManyRequests):
    """429 QUOTA_EXCEEDED: a namespace quota (``quota``, ``limit``, ``current``)."""

    @property
    def quota(self) -> str | None:
        return self.body.get("quota")


class ServerError(NodeFlowError):
    """5xx: the server failed (500) or could not serve now."""


class Unavailable(ServerError):
    """503: the database is unavailable; nothing was changed, try again."""


_BY_STATUS: dict[int, type[NodeFlowError]] = {
    400: Invalid,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    415: Invalid,
    429: TooManyRequests,
    503: Unavailable,
}
_BY_CODE: dict[str, type[NodeFlowError]] = {"LIMIT_EXCEEDED": LimitExceeded, "QUOTA_EXCEEDED": QuotaExceeded}


def error_class(status: int, code: str | None) -> type[NodeFlowError]:
    """The exception class for an error answer: the code when it is more
    precise than the status, then the status, then its class (4xx, 5xx)."""
    if code in _BY_CODE:
        return _BY_CODE[code]
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServerError if status >= 500 else NodeFlowError


def from_answer(
    status: int, body: Any, *, method: str = "", url: str = "", headers: dict[str, str] | None = None, text: str = ""
) -> NodeFlowError:
    """The exception for an error answer. A body that is not the error
    model (a proxy's HTML page) is kept as ``{"message": text}``."""
    if not isinstance(body, dict):
        body = {"message": text.strip()[:2000] or f"HTTP {status}"}
    code = body.get("error") if isinstance(body.get("error"), str) else None
    message = str(body.get("message") or code or f"HTTP {status}")
    cls = error_class(status, code)
    return cls(message, status=status, code=code, body=body, method=method, url=url, headers=headers)
