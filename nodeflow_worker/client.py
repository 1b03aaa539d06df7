"""HTTP client for the worker API (SPEC §7): poll, heartbeat, result, results."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx


class StaleLease(Exception):
    """409: the lease is no longer this worker's (expired, re-delivered, canceled)."""


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

    @classmethod
    def from_json(cls, body: dict) -> LeasedTask:
        return cls(
            task_id=body["taskId"], execution_id=body["executionId"], task_type=body["taskType"],
            input=body["inputData"], attempt=body["attempt"], idempotency_key=body["idempotencyKey"],
            lease_token=body["leaseToken"], raw=body,
        )


class Client:
    """One connection pool to one server, for one namespace and API key."""

    def __init__(self, base_url: str, api_key: str, namespace: str = "default", *, timeout_s: float = 40.0) -> None:
        self.namespace = namespace
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"), headers={"x-api-key": api_key}, timeout=timeout_s,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        )

    def _url(self, path: str) -> str:
        return f"/v1/ns/{self.namespace}/{path}"

    def _post(self, path: str, body: Any) -> httpx.Response:
        response = self.http.post(self._url(path), json=body)
        if response.status_code == 409:
            raise StaleLease(response.json().get("message", "stale lease"))
        response.raise_for_status()
        return response

    def poll(self, task_type: str, *, worker_id: str = "", count: int = 1, wait_s: float = 0) -> list[LeasedTask]:
        body = {"workerId": worker_id, "count": count, "waitSeconds": wait_s}
        return [LeasedTask.from_json(item) for item in self._post(f"tasks/poll/{task_type}", body).json()]

    def heartbeat(self, task: LeasedTask, progress: Any = None) -> None:
        self._post(f"tasks/{task.task_id}/heartbeat", {"leaseToken": task.lease_token, "progress": progress})

    def complete(self, task: LeasedTask, output: dict | None = None) -> dict:
        return self.result(task, "COMPLETED", output=output)

    def fail(self, task: LeasedTask, reason: str, *, terminal: bool = False, output: dict | None = None) -> dict:
        status = "FAILED_WITH_TERMINAL_ERROR" if terminal else "FAILED"
        return self.result(task, status, output=output, reason=reason)

    def result(self, task: LeasedTask, status: str, *, output: dict | None = None, reason: str = "") -> dict:
        body = {"leaseToken": task.lease_token, "status": status, "outputData": output or {}, "reasonForIncompletion": reason}
        return self._post(f"tasks/{task.task_id}/result", body).json()

    def results(self, items: list[tuple[LeasedTask, str, dict]]) -> list[dict]:
        """Report many at once: [(task, status, output)] → one answer each."""
        body = {"results": [
            {"taskId": task.task_id, "leaseToken": task.lease_token, "status": status, "outputData": output}
            for task, status, output in items
        ]}
        return self._post("tasks/results", body).json()["results"]

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
