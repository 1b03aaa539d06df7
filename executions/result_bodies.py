"""Result bodies that are plainly valid, validated without DRF.

A batch of 100 results spent a fifth of its CPU in DRF's field-by-field
validation. Almost every body a worker sends is plainly valid: known keys,
each value of exactly the expected JSON type and inside its range. For such
a body ``plain_result`` returns what ``ResultSerializer`` (or
``BatchResultSerializer``) would; for anything else it returns None and the
serializer decides, so every refusal is still DRF's own 400.
tests/test_result_bodies.py checks the two agree on generated bodies.
"""

from __future__ import annotations

import math
import re
import uuid
from typing import Any

from executions.serializers import MAX_BATCH_RESULTS, MAX_POLL_COUNT, RESULT_STATUSES

STATUSES = frozenset(str(status) for status in RESULT_STATUSES)
KEYS = frozenset({"leaseToken", "status", "outputData", "reasonForIncompletion", "callbackAfterSeconds", "logs"})
NEXT_KEYS = frozenset({"workerId", "count", "taskType"})
MAX_NAME = 256  # NextSerializer's workerId and taskType
MAX_REASON = 10_000
MAX_CALLBACK_S = 31_536_000
MAX_LOGS = 100
# What a lease token looks like (secrets.token_urlsafe); anything else goes to DRF.
_TOKEN = re.compile(r"[A-Za-z0-9_\-]{1,64}")
# DRF refuses NUL and lone surrogates in strings.
_UNSAFE = re.compile("[\x00\ud800-\udfff]")


def plain_result(body: Any, *, with_task_id: bool = False) -> dict | None:
    """The validated form of a plainly valid result body, else None. A
    single result may carry ``next`` (eager dispatch); a batch item may not."""
    if type(body) is not dict or "status" not in body:
        return None
    if not KEYS.issuperset(body):
        allowed = KEYS | ({"taskId"} if with_task_id else {"next"})
        if not allowed.issuperset(body):
            return None
    status = body["status"]
    if type(status) is not str or status not in STATUSES:
        return None
    data: dict[str, Any] = {"status": status}
    checks = (_task_id if with_task_id else _next, _token, _output, _reason, _callback, _logs)
    for check in checks:
        if not check(body, data):
            return None
    return data


def plain_results(body: Any) -> dict | None:
    """``plain_result`` for the batch route's ``{"results": [...], "next"?}``."""
    if type(body) is not dict or "results" not in body or not {"results", "next"}.issuperset(body):
        return None
    items = body["results"]
    if type(items) is not list or not 0 < len(items) <= MAX_BATCH_RESULTS:
        return None
    validated = [plain_result(item, with_task_id=True) for item in items]
    if any(item is None for item in validated):
        return None
    data: dict[str, Any] = {"results": validated}
    return data if _next(body, data) else None


def _next(body: dict, data: dict) -> bool:
    """``next`` as NextSerializer validates it: names given exactly (no
    padding DRF would trim, not blank), a count in range."""
    if "next" not in body:
        return True
    value = body["next"]
    if type(value) is not dict or not NEXT_KEYS.issuperset(value):
        return False
    count = value.get("count", 1)
    if type(count) is not int or not 1 <= count <= MAX_POLL_COUNT:
        return False
    names = {key: value[key] for key in ("workerId", "taskType") if key in value}
    if not all(_plain_name(name) for name in names.values()):
        return False
    data["next"] = {"workerId": "", "count": count, **names}
    return True


def _plain_name(value: Any) -> bool:
    return type(value) is str and 0 < len(value) <= MAX_NAME and value == value.strip() and not _UNSAFE.search(value)


def _task_id(body: dict, data: dict) -> bool:
    value = body.get("taskId")
    if type(value) is not str:
        return False
    try:
        data["taskId"] = uuid.UUID(value)
    except ValueError:
        return False
    return True


def _token(body: dict, data: dict) -> bool:
    if "leaseToken" not in body:
        return True
    value = body["leaseToken"]
    if value is not None and (type(value) is not str or not _TOKEN.fullmatch(value)):
        return False
    data["leaseToken"] = value
    return True


def _output(body: dict, data: dict) -> bool:
    value = body.get("outputData", {})
    data["outputData"] = value
    return type(value) is dict


def _reason(body: dict, data: dict) -> bool:
    value = body.get("reasonForIncompletion", "")
    if type(value) is not str or len(value) > MAX_REASON or _UNSAFE.search(value):
        return False
    data["reasonForIncompletion"] = value.strip()
    return True


def _callback(body: dict, data: dict) -> bool:
    value = body.get("callbackAfterSeconds", 0)
    if type(value) not in (int, float):
        return False
    try:
        seconds = float(value)
    except OverflowError:
        return False
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_CALLBACK_S:
        return False
    data["callbackAfterSeconds"] = seconds
    return True


def _logs(body: dict, data: dict) -> bool:
    value = body.get("logs", [])
    if type(value) is not list or len(value) > MAX_LOGS or any(line is None for line in value):
        return False
    data["logs"] = list(value)
    return True
