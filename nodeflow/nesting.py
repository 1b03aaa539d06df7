"""Every JSON value that comes in (request bodies, script results, JSON from
HTTP replies) is held to one depth, NODE_FLOW_MAX_JSON_DEPTH, well below the
recursion limit.

Parsing checks the depth only against the interpreter's recursion limit, and
much that runs later recurses too (rendering, expression resolution, copies),
often from a deeper stack. A value that parses can still end in a
RecursionError far from the request that brought it. The checks themselves
(depth, text, finite numbers) are ``executions.json_values``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from executions.json_values import nested_deeper_than


def max_depth() -> int:
    return settings.NODE_FLOW_MAX_JSON_DEPTH


def too_deep(value: Any) -> bool:
    return nested_deeper_than(value, max_depth())
