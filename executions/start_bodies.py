"""Start bodies that are plainly valid, validated without DRF (the same
fast path as ``executions.result_bodies``, for ``POST …/executions``).

A start spent about a fifth of its CPU in ``StartExecutionSerializer``. For
a body with known keys, each value of exactly the expected JSON type and
inside its range, ``plain_start`` returns what the serializer would; for
anything else it returns None and the serializer decides, so every refusal
is still DRF's own 400. tests/test_start_bodies.py checks the two agree on
generated bodies.
"""

from __future__ import annotations

from typing import Any

from executions.result_bodies import _UNSAFE
from executions.serializers import MAX_PRIORITY
from nodeflow.fields import is_name

KEYS = frozenset({"name", "version", "input", "correlationId", "idempotencyKey", "priority"})
MAX_KEY = 256  # correlationId and idempotencyKey


def plain_start(body: Any) -> dict | None:
    """The validated form of a plainly valid start body, else None."""
    if type(body) is not dict or "name" not in body or not KEYS.issuperset(body):
        return None
    name = body["name"]
    if type(name) is not str or not is_name(name):
        return None
    data: dict[str, Any] = {"name": name}
    if "version" in body:
        version = body["version"]
        if version is not None and (type(version) is not int or version < 1):
            return None
        data["version"] = version
    value = body.get("input", {})
    if type(value) is not dict:
        return None
    data["input"] = value
    for key in ("correlationId", "idempotencyKey"):
        if key in body:
            text = body[key]
            if text is not None and not _plain_text(text):
                return None
            data[key] = text
    priority = body.get("priority", 0)
    if type(priority) is not int or not 0 <= priority <= MAX_PRIORITY:
        return None
    data["priority"] = priority
    return data


def _plain_text(value: Any) -> bool:
    """A string DRF's CharField keeps as it is: not blank, not padded, short
    enough, with no NUL or lone surrogate."""
    return type(value) is str and 0 < len(value) <= MAX_KEY and value == value.strip() and not _UNSAFE.search(value)
