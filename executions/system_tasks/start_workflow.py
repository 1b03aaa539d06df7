"""START_WORKFLOW (Conductor's): starts another workflow and completes at
once with its id, without waiting for it (fire and forget). Output
``{"workflowId"}``.

``inputParameters.startWorkflow``: ``{"name", "version"?, "input"?,
"correlationId"?, "idempotencyKey"?}``. The start goes through the one
start path (``lifecycle.start_execution``), so every control on starts
holds: a namespace quota or ``maxConcurrentExecutions`` that refuses it
fails the attempt retryably (its retry policy tries again, after the
quota's ``retryAfterSeconds``), an unknown workflow terminally. The start's
idempotency key defaults to the task's, so a hook that runs twice (the
runner died before it reported) starts one workflow, not two.
"""

from __future__ import annotations

from executions import lifecycle
from executions.system_tasks.base import (
    Context,
    Outcome,
    RetryableError,
    SystemTask,
    TerminalError,
    completed,
    optional,
    require,
)
from executions.system_tasks.registry import register
from nodeflow import transactions
from nodeflow.errors import ApiError, NotFound
from nodeflow.fields import is_name
from nodeflow.models import Namespace

WHERE = "inputParameters.startWorkflow"


@register
class StartWorkflow(SystemTask):
    type = "START_WORKFLOW"

    def execute(self, ctx: Context) -> Outcome:
        request = require(ctx.input, "startWorkflow", dict, "inputParameters")
        name = require(request, "name", str, WHERE)
        if not is_name(name):
            raise TerminalError(f"{WHERE}.name: {name!r} is not a workflow name")
        version = optional(request, "version", int, WHERE, None)
        workflow_input = optional(request, "input", dict, WHERE, {})
        correlation_id = optional(request, "correlationId", str, WHERE, None)
        key = optional(request, "idempotencyKey", str, WHERE, None) or f"start-workflow:{ctx.idempotency_key}"
        namespace = Namespace.objects.get(name=ctx.namespace)
        try:
            with transactions.outermost():
                execution, _ = lifecycle.start_execution(
                    namespace=namespace,
                    name=name,
                    version=version,
                    input=workflow_input,
                    correlation_id=correlation_id,
                    idempotency_key=key,
                )
        except NotFound as exc:
            raise TerminalError(f"START_WORKFLOW: {exc.message}") from exc
        except ApiError as exc:
            body = exc.body()
            raise RetryableError(
                f"START_WORKFLOW refused: {exc.message}", retry_after_s=body.get("retryAfterSeconds")
            ) from exc
        return completed({"workflowId": str(execution.id)})
