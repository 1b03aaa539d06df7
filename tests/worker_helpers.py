"""Helpers for the worker SDK's tests that talk to a stand-in server."""

from __future__ import annotations

from nodeflow_worker import LeasedTask


def leased_task(task_id: str) -> LeasedTask:
    """A leased task as a poll would answer it, for reporting its result."""
    return LeasedTask(
        task_id=task_id,
        execution_id="e",
        task_type="q",
        input={},
        attempt=1,
        idempotency_key="k",
        lease_token="lease",
        raw={},
    )
