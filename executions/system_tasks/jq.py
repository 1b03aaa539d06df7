"""JSON_JQ_TRANSFORM: a jq program (``queryExpression``) over the task input
(every inputParameter, as Conductor does: ``.key1 + .key2``); output
``{"result": <first value or null>, "resultList": [<every value>]}``.

A program that does not compile, or fails on the input, is terminal. At most
MAX_RESULTS values are collected and the attempt's deadline is checked
between values; one value that takes long to compute cannot be interrupted
(the jq binding has no time limit), see docs/system-tasks.md.
"""

from __future__ import annotations

import time

import jq

from executions.system_tasks.base import Context, Outcome, SystemTask, TerminalError, completed, require
from executions.system_tasks.registry import register

MAX_RESULTS = 10_000


def transform(query: str, value: dict, deadline: float) -> list:
    try:
        program = jq.compile(query)
    except ValueError as exc:
        raise TerminalError(f"queryExpression does not compile: {exc}") from exc
    results = []
    try:
        for item in program.input_value(value):
            results.append(item)
            if len(results) > MAX_RESULTS or time.monotonic() > deadline:
                raise TerminalError(f"queryExpression produced more than {MAX_RESULTS} values or ran out of time")
    except ValueError as exc:
        raise TerminalError(f"queryExpression failed: {exc}") from exc
    return results


@register
class JsonJqTransform(SystemTask):
    type = "JSON_JQ_TRANSFORM"

    def execute(self, ctx: Context) -> Outcome:
        query = require(ctx.input, "queryExpression", str, "inputParameters")
        results = transform(query, ctx.input, ctx.deadline)
        return completed({"result": results[0] if results else None, "resultList": results})
