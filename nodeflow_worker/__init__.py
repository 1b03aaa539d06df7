"""Node Flow's Python worker SDK. Needs httpx only, not Django.

``Worker`` runs registered functions for the tasks of their queues (long
polls, a concurrency limit, automatic heartbeats, results and errors, a
graceful stop); ``Client`` is the thin HTTP client under it. See
docs/worker-sdk.md.
"""

from nodeflow_worker.client import Client, LeasedTask, StaleLease
from nodeflow_worker.errors import LeaseLost, NonRetryableError, TaskError, TerminalError, WorkerError
from nodeflow_worker.task import Task
from nodeflow_worker.worker import Worker

__all__ = [
    "Client",
    "LeaseLost",
    "LeasedTask",
    "NonRetryableError",
    "StaleLease",
    "Task",
    "TaskError",
    "TerminalError",
    "Worker",
    "WorkerError",
]
