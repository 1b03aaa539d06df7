"""``${...}`` expressions in inputParameters and outputParameters.

Grammar: ``${root.key.key[0].key}`` — a dotted path with array indexes
(``['key']`` is a key too, as JSONPath writes it, and ``..key`` its deep
scan: every value of ``key`` at any depth, as a list). The
roots are ``workflow`` (``workflow.input…``, ``workflow.variables…``,
``workflow.executionId`` and friends), a task reference name
(``ref.output…``, ``ref.input…``, ``ref.status``), and inside a dynamic fork
template ``item`` and ``index``. A string that is exactly one expression
resolves to the value itself (any JSON type); expressions inside a longer
string are interpolated as text. ``$${`` escapes a literal ``${``.

This module is pure: parsing for validation, resolving for the engine.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

_EXPR = re.compile(r"(?<!\$)\$\{([^{}]*)\}")
# An escape or an expression, found in one pass so that a resolved value's own
# "$${" is never un-escaped.
_ESCAPE_OR_EXPR = re.compile(r"\$\$\{|(?<!\$)\$\{([^{}]*)\}")
_TOKEN = re.compile(
    r"\.{2,3}([A-Za-z_][A-Za-z0-9_\-]*)"  # ..key: JSONPath's deep scan (every value of key, at any depth)
    r"|\.?([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d+)\]|\[\s*'([^'\]]*)'\s*\]|\[\s*\"([^\"\]]*)\"\s*\]"
)

WORKFLOW_FIELDS = frozenset(
    {
        "input",
        "variables",
        "output",
        "executionId",
        "workflowId",
        "correlationId",
        "name",
        "version",
        "parentExecutionId",
        # Conductor's names: the definition's name, and the creation time in epoch milliseconds.
        "workflowType",
        "createTime",
    }
)
TASK_FIELDS = frozenset({"input", "output", "status", "taskId", "reasonForIncompletion", "attempt"})
LOOP_ROOTS = frozenset({"item", "index"})
# Conductor's ${CPEWF_TASK_ID}: the id of the task whose input it is in.
TASK_ID_ROOT = "CPEWF_TASK_ID"

Path = tuple[str | int, ...]


class ExpressionError(ValueError):
    pass


class DeepScan(str):
    """A path step ``..key``: every value of ``key`` under the current value,
    at any depth, in document order (a list)."""


def parse_path(text: str) -> Path:
    """``a.b[0].c`` → ("a", "b", 0, "c"); raises ExpressionError."""
    text = text.strip()
    if not text:
        raise ExpressionError("empty expression ${}")
    parts: list[str | int] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or (position == 0 and match.group(0).startswith(".")):
            raise ExpressionError(f"cannot parse '${{{text}}}' at character {position + 1}")
        if position > 0 and match.group(2) is not None and not match.group(0).startswith("."):
            raise ExpressionError(f"cannot parse '${{{text}}}' at character {position + 1}")
        if match.group(1) is not None:
            if len(parts) < 2:  # after a root and its field (``t.output..x``); ``a..b`` is a typo
                raise ExpressionError(f"cannot parse '${{{text}}}' at character {position + 1}")
            parts.append(DeepScan(match.group(1)))
        elif match.group(2) is not None:
            parts.append(match.group(2))
        elif match.group(3) is not None:
            parts.append(int(match.group(3)))
        else:  # ['key'] or ["key"], as JSONPath writes a key
            parts.append(match.group(4) if match.group(4) is not None else match.group(5))
        position = match.end()
    if not isinstance(parts[0], str):
        raise ExpressionError(f"'${{{text}}}' must start with a name")
    return tuple(parts)


def iter_strings(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every string inside a JSON value, with its path (``a.b[2]``)."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from iter_strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from iter_strings(item, f"{where}[{index}]")


def paths_in(text: str) -> list[Path]:
    """The parsed path of each expression in one string."""
    paths = [parse_path(match.group(1)) for match in _EXPR.finditer(text)]
    if _EXPR.sub("", text).replace("$${", "").count("${"):
        raise ExpressionError(f"unterminated or nested expression in '{text}'")
    return paths


def check_reference(path: Path, *, refs: frozenset[str], in_template: bool) -> None:
    """Raise ExpressionError unless ``path`` names something that can exist."""
    root = path[0]
    if root == TASK_ID_ROOT:
        if len(path) != 1:
            raise ExpressionError(f"'${{{TASK_ID_ROOT}}}' is the task's own id and has no fields")
        return
    if root == "workflow":
        if len(path) < 2 or path[1] not in WORKFLOW_FIELDS:
            raise ExpressionError(f"'workflow' is followed by one of {', '.join(sorted(WORKFLOW_FIELDS))}")
    elif root in LOOP_ROOTS:
        if not in_template:
            raise ExpressionError(f"'${{{root}}}' exists only inside a FORK_JOIN_DYNAMIC forkTask")
    elif root in refs:
        if len(path) < 2 or path[1] not in TASK_FIELDS:
            raise ExpressionError(f"'{root}' is followed by one of {', '.join(sorted(TASK_FIELDS))}")
    else:
        raise ExpressionError(f"'{root}' is not a task reference name in this workflow")


# --- resolution (used by the engine) ----------------------------------------

_MISSING = object()


def lookup(context: Mapping[str, Any], path: Path) -> Any:
    """Walk ``path`` through ``context``; a missing step gives None."""
    current: Any = context
    for part in path:
        if isinstance(part, DeepScan):
            current = list(_deep(current, str(part)))
            continue
        if isinstance(part, int):
            current = current[part] if isinstance(current, list) and -len(current) <= part < len(current) else _MISSING
        else:
            current = current.get(part, _MISSING) if isinstance(current, Mapping) else _MISSING
        if current is _MISSING:
            return None
    return current


def _deep(value: Any, key: str) -> Iterator[Any]:
    if isinstance(value, Mapping):
        for name, item in value.items():
            if name == key:
                yield item
            yield from _deep(item, key)
    elif isinstance(value, list):
        for item in value:
            yield from _deep(item, key)


def case_key(value: Any) -> str:
    """The SWITCH case a value selects: strings as they are, anything else as
    JSON (``true``, ``3``, ``null``), so YAML's ``true:`` and a JSON ``true``
    pick the same case."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"))


def _substitute(match: re.Match, context: Mapping[str, Any]) -> str:
    if match.group(0) == "$${":
        return "${"
    return _render(lookup(context, parse_path(match.group(1))))


def resolve(value: Any, context: Mapping[str, Any]) -> Any:
    """Replace every expression in a JSON value with what it names."""
    if isinstance(value, str):
        whole = _EXPR.fullmatch(value)
        if whole:
            return lookup(context, parse_path(whole.group(1)))
        if "${" not in value:
            return value
        return _ESCAPE_OR_EXPR.sub(lambda match: _substitute(match, context), value)
    if isinstance(value, dict):
        return {key: resolve(item, context) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve(item, context) for item in value]
    return value
