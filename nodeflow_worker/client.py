"""HTTP client for the worker API (SPEC §7): poll, heartbeat, result, results.

Thin on purpose: one call is one request, errors are raised as they come
(``StaleLease`` for 409, ``httpx.HTTPStatusError`` for other error answers,
``httpx.TransportError`` when the server cannot be reached). Retrying is the
caller's choice; ``nodeflow_worker.Worker`` retries what is transient.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from nodeflow_worker.transport import KeptAliveTransport, origin_of

# The server's limits on a result (executions/serializers.py).
MAX_REASON_CHARS = 10_000
MAX_LOG_ENTRIES = 100
USER_AGENT = b"nodeflow-worker"


class StaleLease(Exception):
    """409: the lease is no longer this worker's (expired, re-delivered, canceled)."""

    def __init__(self, message: str, task_status: str | None = None) -> None:
        super().__init__(message)
        self.task_status = task_status


def parse_time(value: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value) if value else None


@dataclass
class LeasedTask:
    task_id: str
    execution_id: str
    task_type: str
    input: dict
    attempt: int
    idempotency_key: str
    lease_token: str
    raw: dict
    reference_task_name: str = ""
    lease_expires_at: dt.datetime | None = None

    @classmethod
    def from_json(cls, body: dict) -> LeasedTask:
        return cls(
            task_id=body["taskId"],
            execution_id=body["executionId"],
            task_type=body["taskType"],
            input=body["inputData"],
            attempt=body["attempt"],
            idempotency_key=body["idempotencyKey"],
            lease_token=body["leaseToken"],
            raw=body,
            reference_task_name=body.get("referenceTaskName", ""),
            lease_expires_at=parse_time(body.get("leaseExpiresAt")),
        )


def result_body(
    task: LeasedTask,
    status: str,
    *,
    output: dict | None = None,
    reason: str = "",
    logs: list | None = None,
    callback_after_s: float = 0.0,
) -> dict:
    """One result as the API takes it, clipped to the server's limits."""
    body: dict[str, Any] = {
        "leaseToken": task.lease_token,
        "status": status,
        "outputData": output or {},
        "reasonForIncompletion": reason[:MAX_REASON_CHARS],
    }
    if logs:
        body["logs"] = logs[-MAX_LOG_ENTRIES:]
    if callback_after_s:
        body["callbackAfterSeconds"] = callback_after_s
    return body


class Client:
    """Connections to one server, for one namespace and API key. Safe to
    share between threads.

    Its own calls (polls, heartbeats, results, starts) are sent by the
    SDK's transport directly, without httpx's client: on a kept-alive
    connection a request is then mostly the server's time, and a worker's
    sequential steps wait for each one (docs/worker-sdk.md). ``http`` is an
    httpx client on the same connections, for any other route.

    Long polls have a pool of their own (``polls``), so a poller goes on
    using the connection it polled on, and so the same server process,
    instead of whichever connection results and heartbeats left idle: on
    PostgreSQL every server process that holds a parked poll listens for
    wake-ups, and each notice costs every listener a transaction."""

    def __init__(self, base_url: str, api_key: str, namespace: str = "default", *, timeout_s: float = 40.0) -> None:
        self.namespace = namespace
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._transport = KeptAliveTransport()
        self.http = httpx.Client(
            base_url=self.base_url, headers={"x-api-key": api_key}, timeout=timeout_s, transport=self._transport
        )
        self.polls = KeptAliveTransport()
        base = httpx.URL(f"{self.base_url}/v1/ns/{namespace}/")
        self._origin = origin_of(base)  # refuses a URL that is not http(s) now, not at each call
        self._base = base
        self._prefix = base.raw_path.decode("ascii")
        self._headers = [
            (b"Host", base.netloc),
            (b"Accept", b"application/json"),
            (b"User-Agent", USER_AGENT),
            (b"x-api-key", api_key.encode("ascii")),
            (b"Content-Type", b"application/json"),
        ]

    def _send(self, path: str, body: Any, *, transport: KeptAliveTransport | None = None) -> Any:
        """POST ``body`` as JSON to the namespace's ``path``; the answer's
        JSON. An answer other than 2xx raises httpx's ``HTTPStatusError``
        and a failure to exchange httpx's transport errors, as httpx's
        client would."""
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        target = self._prefix + quote(path, safe="/")
        try:
            answer = (transport or self._transport).exchange(
                self._origin,
                "POST",
                target,
                [*self._headers, (b"Content-Length", str(len(data)).encode("ascii"))],
                data,
                connect_s=self.timeout_s,
                read_s=self.timeout_s,
            )
        except httpx.RequestError as exc:
            exc.request = self._request(target, data)
            raise
        if not 200 <= answer.status < 300:
            httpx.Response(
                answer.status,
                headers=answer.headers,
                content=answer.body,
                request=self._request(target, data),
                extensions={"reason_phrase": answer.reason.encode("ascii", "replace")},
            ).raise_for_status()
        return json.loads(answer.body)

    def _request(self, target: str, data: bytes) -> httpx.Request:
        """The request ``_send`` made, as httpx's errors carry it."""
        url = self._base.copy_with(raw_path=target.encode("ascii"))
        return httpx.Request("POST", url, headers=[h for h in self._headers if h[0] != b"Host"], content=data)

    def _post(self, path: str, body: Any, *, transport: KeptAliveTransport | None = None) -> Any:
        """``_send`` to a worker route, where 409 means the lease is gone."""
        try:
            return self._send(path, body, transport=transport)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code != 409:
                raise
            answer = _json_or_empty(exc.response)
            raise StaleLease(answer.get("message", "stale lease"), answer.get("taskStatus")) from None

    def poll(self, task_type: str, *, worker_id: str = "", count: int = 1, wait_s: float = 0) -> list[LeasedTask]:
        body: dict[str, Any] = {"count": count, "waitSeconds": wait_s}
        if worker_id:  # the server refuses an empty id; without one the poll names no worker
            body["workerId"] = worker_id
        answer = self._post(f"tasks/poll/{task_type}", body, transport=self.polls)
        return [LeasedTask.from_json(item) for item in answer]

    def heartbeat(self, task: LeasedTask, progress: Any = None) -> dict:
        """Extend the lease; the answer carries the new ``leaseExpiresAt``."""
        return self._post(f"tasks/{task.task_id}/heartbeat", {"leaseToken": task.lease_token, "progress": progress})

    def complete(self, task: LeasedTask, output: dict | None = None) -> dict:
        return self.result(task, "COMPLETED", output=output)

    def fail(self, task: LeasedTask, reason: str, *, terminal: bool = False, output: dict | None = None) -> dict:
        status = "FAILED_WITH_TERMINAL_ERROR" if terminal else "FAILED"
        return self.result(task, status, output=output, reason=reason)

    def result(
        self,
        task: LeasedTask,
        status: str,
        *,
        output: dict | None = None,
        reason: str = "",
        logs: list | None = None,
        callback_after_s: float = 0.0,
        next: dict | None = None,
    ) -> dict:
        """Report one result. ``next`` (``{"workerId", "count", "taskType"}``):
        lease the next tasks in the same request (eager dispatch); the answer's
        ``next`` lists them, as a poll would."""
        body = result_body(task, status, output=output, reason=reason, logs=logs, callback_after_s=callback_after_s)
        if next is not None:
            body["next"] = next
        return self._post(f"tasks/{task.task_id}/result", body)

    def results(self, items: list[tuple[LeasedTask, str, dict]]) -> list[dict]:
        """Report many at once: [(task, status, output)] → one answer each."""
        return self.post_results(
            [{"taskId": task.task_id, **result_body(task, status, output=output)} for task, status, output in items]
        )

    def post_results(self, bodies: list[dict]) -> list[dict]:
        """The batch route with ready-made bodies (``result_body`` plus ``taskId``), up to 100."""
        return self._post("tasks/results", {"results": bodies})["results"]

    def post_results_and_lease(self, bodies: list[dict], next: dict) -> tuple[list[dict], list[LeasedTask]]:
        """``post_results``, leasing the next tasks in the same request (eager dispatch)."""
        answer = self._post("tasks/results", {"results": bodies, "next": next})
        return answer["results"], [LeasedTask.from_json(item) for item in answer.get("next", [])]

    # Conveniences for scripts and tests.
    def start(self, name: str, input: dict | None = None, **fields: Any) -> dict:
        return self._send("executions", {"name": name, "input": input or {}, **fields})

    def execution(self, execution_id: str) -> dict:
        response = self.http.get(self._base.join(f"executions/{quote(execution_id, safe='')}"))
        response.raise_for_status()
        return response.json()

    def close(self) -> None:
        self.http.close()
        self.polls.close()


def _json_or_empty(response: httpx.Response) -> dict:
    try:
        answer = response.json()
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}
