"""INLINE: JavaScript in the V8 sandbox of ``executions.javascript`` (no
I/O), with ``$`` bound to the task input; output ``{"result": <value>}``.

``expression`` is the script (an expression, or statements whose completion
value is the result); ``evaluatorType`` must be "javascript" (the default).
Limits: NODE_FLOW_INLINE_TIMEOUT_SECONDS and NODE_FLOW_INLINE_MAX_MEMORY_MB.
Every failure is terminal: a script that throws, or runs out of time or
memory, does so again on the same input.
"""

from __future__ import annotations

from django.conf import settings

from executions import javascript
from executions.system_tasks.base import Context, Outcome, SystemTask, TerminalError, completed, optional, require
from executions.system_tasks.registry import register


def run_script(code: str, value: dict) -> object:
    try:
        return javascript.evaluate(code, value, javascript.task_limits(settings))
    except javascript.ScriptError as exc:
        raise TerminalError(f"INLINE script failed: {exc}") from exc


@register
class Inline(SystemTask):
    type = "INLINE"

    def execute(self, ctx: Context) -> Outcome:
        if optional(ctx.input, "evaluatorType", str, "inputParameters", "javascript") != "javascript":
            raise TerminalError('inputParameters.evaluatorType must be "javascript"')
        code = require(ctx.input, "expression", str, "inputParameters")
        return completed({"result": run_script(code, ctx.input)})
