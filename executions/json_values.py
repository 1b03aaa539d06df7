"""What a JSON value that comes in must be: nested at most so many levels
deep, text (no lone surrogates, no NUL), and finite numbers (``1e400``
parses as infinity, which no JSON column and no JSON answer can hold).

Pure: no settings. ``nodeflow.nesting`` holds the depth to NODE_FLOW_MAX_JSON_DEPTH.
"""

from __future__ import annotations

import json
import math
from typing import Any


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` has a list or object more than ``limit`` levels deep
    (a scalar is depth 0, ``[1]`` depth 1). Iterative, a level at a time:
    safe on any input."""
    level = [value]
    for _ in range(limit):  # each pass: the items one level further in
        below: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                below.extend(item.values())
            elif isinstance(item, list):
                below.extend(item)
        if not below:
            return False
        level = below
    return any(isinstance(item, (dict, list)) for item in level)


def is_storable(value: Any) -> bool:
    """Whether every string in ``value`` (keys too) is text a database column
    and a response body can hold: no unpaired UTF-16 surrogate (JSON's
    ``"\\ud800"``) and no NUL (PostgreSQL's jsonb refuses ``"\\u0000"``)."""
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    except ValueError:
        return False  # a non-finite number (or a loop, which parsing cannot make)
    except TypeError:
        return True  # not JSON at all (a YAML date): the validation that follows names it
    return not _holds_nul(value)


def non_finite_at(value: Any, root: str = "") -> str | None:
    """The path (``input.amounts[2]``) of the first number in ``value`` that
    is not finite (infinity, NaN), or None. Iterative: safe on any input."""
    stack: list[tuple[Any, str]] = [(value, root)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path or "(the body)"
        if isinstance(item, dict):
            stack.extend((child, f"{path}.{key}" if path else str(key)) for key, child in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{index}]") for index, child in reversed(list(enumerate(item))))
    return None


def _holds_nul(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
