"""HTTP client for the worker API (SPEC §7): poll, heartbeat, result, results.

Thin on purpose: one call is one request, errors are raised as they come
(``StaleLease`` for 409, ``httpx.HTTPStatusError`` for other error answers,
``httpx.TransportError`` when the server cannot be reached). Retrying is the
caller's choice; ``nodeflow_worker.Worker`` retries what is transient.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from typing import Any

import httpx

from nodeflow_worker.transport import KeptAliveTransport

# The server's limits on a result (executions/serializers.py).
MAX_REASON_CHARS = 10_000
MAX_LOG_ENTRIES = 100


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

    Long polls have a pool of their own (``polls``), so a poller goes on
    using the connection it polled on, and so the same server process,
    instead of whichever connection results and heartbeats left idle: on
    PostgreSQL every server process that holds a parked poll listens for
    wake-ups, and each notice costs every listener a transaction."""

    def __init__(self, base_url: str, api_key: str, namespace: str = "default", *, timeout_s: float = 40.0) -> None:
        self.namespace = namespace
        self.base_url = base_url.rstrip("/")
        self.http = _pool(base_url, api_key, timeout_s)
        self.polls = _pool(base_url, api_key, timeout_s)

    def _url(self, path: str) -> httpx.URL:
        return absolute_url(f"{self.base_url}/v1/ns/{self.namespace}/{path}")

    def _post(self, path: str, body: Any, *, http: httpx.Client | None = None) -> httpx.Response:
        response = (http or self.http).post(self._url(path), json=body)
        if response.status_code == 409:
            answer = _json_or_empty(response)
            raise StaleLease(answer.get("message", "stale lease"), answer.get("taskStatus"))
        response.raise_for_status()
        return response

    def poll(self, task_type: str, *, worker_id: str = "", count: int = 1, wait_s: float = 0) -> list[LeasedTask]:
        body: dict[str, Any] = {"count": count, "waitSeconds": wait_s}
        if worker_id:  # the server refuses an empty id; without one the poll names no worker
            body["workerId"] = worker_id
        answer = self._post(f"tasks/poll/{task_type}", body, http=self.polls)
        return [LeasedTask.from_json(item) for item in answer.json()]

    def heartbeat(self, task: LeasedTask, progress: Any = None) -> dict:
        """Extend the lease; the answer carries the new ``leaseExpiresAt``."""
        return self._post(
            f"tasks/{task.task_id}/heartbeat", {"leaseToken": task.lease_token, "progress": progress}
        ).json()

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
        return self._post(f"tasks/{task.task_id}/result", body).json()

    def results(self, items: list[tuple[LeasedTask, str, dict]]) -> list[dict]:
        """Report many at once: [(task, status, output)] → one answer each."""
        return self.post_results(
            [{"taskId": task.task_id, **result_body(task, status, output=output)} for task, status, output in items]
        )

    def post_results(self, bodies: list[dict]) -> list[dict]:
        """The batch route with ready-made bodies (``result_body`` plus ``taskId``), up to 100."""
        return self._post("tasks/results", {"results": bodies}).json()["results"]

    def post_results_and_lease(self, bodies: list[dict], next: dict) -> tuple[list[dict], list[LeasedTask]]:
        """``post_results``, leasing the next tasks in the same request (eager dispatch)."""
        answer = self._post("tasks/results", {"results": bodies, "next": next}).json()
        return answer["results"], [LeasedTask.from_json(item) for item in answer.get("next", [])]

    # Conveniences for scripts and tests.
    def start(self, name: str, input: dict | None = None, **fields: Any) -> dict:
        response = self.http.post(self._url("executions"), json={"name": name, "input": input or {}, **fields})
        response.raise_for_status()
        return response.json()

    def execution(self, execution_id: str) -> dict:
        response = self.http.get(self._url(f"executions/{execution_id}"))
        response.raise_for_status()
        return response.json()

    def close(self) -> None:
        self.http.close()
        self.polls.close()


@functools.lru_cache(maxsize=1024)
def absolute_url(url: str) -> httpx.URL:
    """``url`` parsed once. httpx parses a relative URL twice on every
    request (itself, then joined to the client's base): about a quarter of
    its CPU per request, and a worker asks the same few URLs again and
    again (its polls, its results), so they are parsed once and kept; a
    URL naming a task (a heartbeat) only pushes out the oldest."""
    return httpx.URL(url)


def _pool(base_url: str, api_key: str, timeout_s: float) -> httpx.Client:
    return httpx.Client(
        base_url=base_url.rstrip("/"), headers={"x-api-key": api_key}, timeout=timeout_s, transport=KeptAliveTransport()
    )


def _json_or_empty(response: httpx.Response) -> dict:
    try:
        answer = response.json()
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}
