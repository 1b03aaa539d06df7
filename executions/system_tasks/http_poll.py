"""HTTP_POLL: the request of HTTP, repeated every ``pollingInterval`` seconds
until ``terminationCondition`` (JavaScript, ``$.response`` is the latest
response, ``$.pollCount`` how many were made) is truthy.

Between polls nothing waits: each poll that answers "not yet" reports
IN_PROGRESS with ``callbackAfterSeconds = pollingInterval``, so the same
attempt goes back to the queue and is offered again when the interval has
passed (to this or any other runner). A failed poll is classified as HTTP's
and fails the attempt; a condition that throws is terminal.
Output: ``{"response": <the last response>, "pollCount": n}``.
"""

from __future__ import annotations

from django.conf import settings

from executions import javascript
from executions.system_tasks.base import Context, Outcome, SystemTask, TerminalError, completed, in_progress, require
from executions.system_tasks.http import call, parse_request
from executions.system_tasks.registry import register

DEFAULT_POLLING_INTERVAL_S = 60.0


@register
class HttpPoll(SystemTask):
    type = "HTTP_POLL"

    def execute(self, ctx: Context) -> Outcome:
        interval = polling_interval(ctx.input)
        condition = require(ctx.input, "terminationCondition", str, "inputParameters")
        response = call(parse_request(ctx.input.get("http_request")), ctx)
        output = {"response": response, "pollCount": int(ctx.output.get("pollCount") or 0) + 1}
        if done(condition, output):
            return completed(output)
        return in_progress(output, after_s=interval)

    def breaker_key(self, ctx: Context) -> str:
        return parse_request(ctx.input.get("http_request")).host


def polling_interval(inputs: dict) -> float:
    value = inputs.get("pollingInterval", DEFAULT_POLLING_INTERVAL_S)
    if isinstance(value, str) and value.replace(".", "", 1).isdigit():
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise TerminalError("inputParameters.pollingInterval must be a positive number of seconds")
    return float(value)


def done(condition: str, output: dict) -> bool:
    try:
        value = javascript.evaluate(condition, output, javascript.task_limits(settings))
    except javascript.ScriptError as exc:
        raise TerminalError(f"terminationCondition failed: {exc}", output=output) from exc
    return javascript.truthy(value)
