"""Conductor's error shape on the Conductor-compatible routes.

The body is Conductor's ``ErrorResponse`` (``status``, ``message``,
``instance``, ``retryable``, ``validationErrors: [{path, message}]``) plus
Node Flow's own fields (``error``, ``field``, a refusal's ``control``, …), so
a Conductor client reads what it expects and nothing Node Flow says is lost.
The status codes are Node Flow's (nodeflow/errors.py): 4xx naming the field,
never a 500 for bad input.
"""

from __future__ import annotations

import socket
from typing import Any

from rest_framework.response import Response

from nodeflow.errors import exception_handler as nodeflow_handler

INSTANCE = socket.gethostname()
# Sent again unchanged, these may succeed: throttled, a control's refusal, the database down.
RETRYABLE = frozenset({429, 503})


def conductor_body(status: int, body: dict[str, Any]) -> dict[str, Any]:
    errors = body.get("errors") or ([{"field": body["field"], "message": body["message"]}] if body.get("field") else [])
    rest = {key: value for key, value in body.items() if key != "errors"}
    return {
        "status": status,
        "message": body.get("message", ""),
        "instance": INSTANCE,
        "retryable": status in RETRYABLE,
        "validationErrors": [{"path": e.get("field") or "", "message": e.get("message", "")} for e in errors],
        **rest,
    }


def exception_handler(exc: Exception, context: dict) -> Response:
    response = nodeflow_handler(exc, context)
    if isinstance(response.data, dict):
        response.data = conductor_body(response.status_code, response.data)
    return response
