"""HTTP: one request; output ``{"response": {"statusCode", "headers", "body"}}``.

Also the call HTTP_POLL and WEBHOOK make. Failure classification (SPEC §5):
4xx is terminal except 408 and 429; 5xx, 429, timeouts and connection errors
are retryable; a ``Retry-After`` on 429 or 503 becomes ``retryAfterSeconds``
in the output, which the decider takes as the least delay before the next
attempt (still capped by maxRetryDelaySeconds). Redirects are not followed
(a redirect could lead past the outbound policy): a 3xx is terminal.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from executions.json_values import is_storable
from executions.system_tasks import outbound
from executions.system_tasks.base import (
    Context,
    Outcome,
    RetryableError,
    SystemTask,
    TerminalError,
    completed,
    optional,
    require,
    seconds,
)
from executions.system_tasks.registry import register
from nodeflow import clock
from nodeflow.nesting import max_depth, too_deep

METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_READ_TIMEOUT_S = 30.0
# A response is stored in the task's output: larger bodies fail the task.
MAX_BODY_BYTES = 4 * 1024 * 1024
RETRY_AFTER_STATUSES = (429, 503)


@dataclass(frozen=True)
class Request:
    method: str
    url: httpx.URL
    headers: dict[str, str]
    content: bytes | None
    connect_timeout_s: float
    read_timeout_s: float

    @property
    def host(self) -> str:
        return self.url.host.lower()


def parse_request(spec: Any, where: str = "http_request") -> Request:
    """An ``http_request`` input, checked; TerminalError naming what is wrong."""
    if not isinstance(spec, dict):
        raise TerminalError(f"{where} is required and must be an object")
    url = parse_url(require(spec, "uri", str, where), f"{where}.uri")
    method = optional(spec, "method", str, where, "GET").upper()
    if method not in METHODS:
        raise TerminalError(f"{where}.method must be one of {', '.join(sorted(METHODS))}")
    headers = {str(k): str(v) for k, v in optional(spec, "headers", dict, where, {}).items()}
    content, content_type = encode_body(spec.get("body"))
    if content_type and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = content_type
    return Request(
        method,
        url,
        headers,
        content,
        seconds(spec, "connectTimeout", where, DEFAULT_CONNECT_TIMEOUT_S),
        seconds(spec, "readTimeout", where, DEFAULT_READ_TIMEOUT_S),
    )


def parse_url(value: str, where: str) -> httpx.URL:
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise TerminalError(f"{where} is not a valid URL: {exc}") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise TerminalError(f"{where} must be an http:// or https:// URL with a host")
    return url


def encode_body(body: Any) -> tuple[bytes | None, str | None]:
    """A string is sent as it is; anything else as JSON."""
    if body is None:
        return None, None
    if isinstance(body, str):
        return body.encode(), "text/plain; charset=utf-8"
    return json.dumps(body, separators=(",", ":")).encode(), "application/json"


def call(request: Request, ctx: Context) -> dict:
    """Send ``request``; the response (2xx) or the classified failure."""
    response = send(request, ctx)
    raise_for_status(response, request)
    return response


def send(request: Request, ctx: Context) -> dict:
    """Send ``request`` within the attempt's time; the response, whatever its
    status. Timeouts and connection errors raise RetryableError."""
    port = request.url.port or (443 if request.url.scheme == "https" else 80)
    # The name as the client would send it (IDNA 2008), checked, and the
    # connection made to the very address checked: Host and SNI carry the name.
    name = request.url.raw_host.decode("ascii")
    addresses = outbound.check(name, port)
    url = request.url.copy_with(host=str(addresses[0]))
    headers = {"Host": request.url.netloc.decode("ascii"), **request.headers}
    extensions = {"sni_hostname": name} if request.url.scheme == "https" else {}
    left = ctx.time_left()
    timeout = httpx.Timeout(
        connect=min(request.connect_timeout_s, left),
        read=min(request.read_timeout_s, left),
        write=min(request.read_timeout_s, left),
        pool=min(request.connect_timeout_s, left),
    )
    what = f"{request.method} {request.url}"
    try:
        # trust_env=False: proxy variables would route around the outbound policy.
        with (
            httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client,
            client.stream(
                request.method, url, headers=headers, content=request.content, extensions=extensions
            ) as reply,
        ):
            body = read_body(reply, ctx.deadline, what)
            return {"statusCode": reply.status_code, "headers": headers_of(reply), "body": decode(reply, body)}
    except httpx.TimeoutException as exc:
        raise RetryableError(f"timeout: {type(exc).__name__} on {what}", counts=True) from exc
    except httpx.LocalProtocolError as exc:
        raise TerminalError(f"invalid request {what}: {exc}", counts=None) from exc
    except httpx.TransportError as exc:
        raise RetryableError(f"connection error: {type(exc).__name__} on {what}: {exc}", counts=True) from exc
    except (ValueError, TypeError) as exc:  # e.g. a header value that is not ASCII
        raise TerminalError(f"invalid request {what}: {exc}") from exc


def read_body(reply: httpx.Response, deadline: float, what: str) -> bytes:
    """The body, within the attempt's deadline (the read timeout only bounds
    the gap between two chunks) and MAX_BODY_BYTES."""
    chunks, size = [], 0
    for chunk in reply.iter_bytes():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise TerminalError(f"the response to {what} is larger than {MAX_BODY_BYTES} bytes", counts=False)
        if time.monotonic() > deadline:
            raise RetryableError(f"timeout: the response to {what} took longer than the attempt may", counts=True)
        chunks.append(chunk)
    return b"".join(chunks)


def headers_of(reply: httpx.Response) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in reply.headers.multi_items():
        name = name.lower()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def decode(reply: httpx.Response, body: bytes) -> Any:
    """JSON bodies as JSON, anything else as text."""
    text = body.decode(reply.encoding or "utf-8", errors="replace")
    if "json" in reply.headers.get("content-type", "") and text.strip():
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return text
        if too_deep(value):
            raise TerminalError(
                f"the JSON response is nested deeper than {max_depth()} levels (NODE_FLOW_MAX_JSON_DEPTH)", counts=False
            )
        return value if is_storable(value) else text
    return text


def raise_for_status(response: dict, request: Request) -> None:
    code = response["statusCode"]
    if 200 <= code < 300:
        return
    reason = f"HTTP {code} from {request.method} {request.url}"
    output = {"response": response}
    if code == 429 or code >= 500:
        wait = (
            retry_after_s(response["headers"].get("retry-after"), clock.now()) if code in RETRY_AFTER_STATUSES else None
        )
        raise RetryableError(reason, output=output, counts=True, retry_after_s=wait)
    if code == 408:
        raise RetryableError(reason, output=output, counts=False)
    if 300 <= code < 400:
        reason += " (redirects are not followed)"
    raise TerminalError(reason, output=output, counts=False)


def retry_after_s(value: str | None, now: dt.datetime) -> float | None:
    """A Retry-After header in seconds: delta-seconds or an HTTP-date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max((when - now).total_seconds(), 0.0)


@register
class Http(SystemTask):
    type = "HTTP"

    def execute(self, ctx: Context) -> Outcome:
        return completed({"response": call(parse_request(ctx.input.get("http_request")), ctx)})

    def breaker_key(self, ctx: Context) -> str:
        return parse_request(ctx.input.get("http_request")).host
