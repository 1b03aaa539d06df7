"""WEBHOOK: a signed outbound JSON POST of ``payload`` to ``url``.

Headers sent (besides ``Content-Type: application/json`` and any ``headers``):

- ``X-NodeFlow-Timestamp``: Unix seconds when it was signed;
- ``X-NodeFlow-Signature``: ``sha256=`` + hex HMAC-SHA256, keyed with the
  secret, over ``"<timestamp>.<body>"`` (the exact bytes of the body);
- ``X-NodeFlow-Idempotency-Key``: the same for every attempt and re-delivery
  of the task, so the receiver can drop duplicates (delivery is at least once).

A receiver recomputes the HMAC over the timestamp header, a dot and the raw
body, compares in constant time, and refuses old timestamps (replays).

``secretName`` names the key among the secrets of the task's own namespace
(``nodeflow.secrets``: set with ``PUT /v1/ns/{ns}/secrets/{name}``, or by
the operator as ``NODE_FLOW_WEBHOOK_SECRETS["<namespace>/<name>"]`` or
``NODE_FLOW_SECRET_<NAMESPACE>__<NAME>``). A name that resolves to nothing
is a terminal failure. Output ``{"response": …}``;
failures are classified as HTTP's.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from executions.system_tasks.base import (
    Context,
    Outcome,
    SystemTask,
    TerminalError,
    completed,
    optional,
    require,
    seconds,
)
from executions.system_tasks.http import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_READ_TIMEOUT_S, Request, call, parse_url
from executions.system_tasks.registry import register
from nodeflow import clock, secrets

SIGNATURE_HEADER = "X-NodeFlow-Signature"
TIMESTAMP_HEADER = "X-NodeFlow-Timestamp"
IDEMPOTENCY_HEADER = "X-NodeFlow-Idempotency-Key"


def resolve_secret(ctx: Context, name: str) -> str:
    """The task's own namespace's secret ``name`` (nodeflow.secrets): a
    tenant can never sign with another's key."""
    value = secrets.resolve(namespace=ctx.namespace, name=name)
    if value is None:
        variable = secrets.environment_variable(namespace=ctx.namespace, name=name)
        raise TerminalError(
            f"secret '{name}' is not configured in namespace '{ctx.namespace}' "
            f"(PUT /v1/ns/{ctx.namespace}/secrets/{name}, or {variable})"
        )
    return value


def sign(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def build_request(ctx: Context) -> Request:
    inputs = ctx.input
    url = parse_url(require(inputs, "url", str, "inputParameters"), "inputParameters.url")
    secret = resolve_secret(ctx, require(inputs, "secretName", str, "inputParameters"))
    body = json.dumps(inputs.get("payload", {}), separators=(",", ":"), ensure_ascii=False).encode()
    timestamp = str(int(clock.now().timestamp()))
    headers = {str(k): str(v) for k, v in optional(inputs, "headers", dict, "inputParameters", {}).items()}
    headers.update(
        {
            "Content-Type": "application/json",
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(secret, timestamp, body),
            IDEMPOTENCY_HEADER: ctx.idempotency_key,
        }
    )
    return Request(
        "POST",
        url,
        headers,
        body,
        seconds(inputs, "connectTimeout", "inputParameters", DEFAULT_CONNECT_TIMEOUT_S),
        seconds(inputs, "readTimeout", "inputParameters", DEFAULT_READ_TIMEOUT_S),
    )


@register
class Webhook(SystemTask):
    type = "WEBHOOK"

    def execute(self, ctx: Context) -> Outcome:
        return completed({"response": call(build_request(ctx), ctx)})

    def breaker_key(self, ctx: Context) -> str:
        url = parse_url(require(ctx.input, "url", str, "inputParameters"), "inputParameters.url")
        return url.host.lower()
