"""Node Flow's Python client for applications, and its command line
(``python -m nodeflow_client``). Needs httpx only, not Django (PyYAML, if
importable, splits YAML files holding several definitions).

``Client`` registers definitions, starts, reads, waits for, terminates,
retries and lists executions, signals them (messages, webhooks, HUMAN
tasks) and reads the controls; answers are dataclasses (``models``),
refusals ``NodeFlowError``s carrying the server's error body (``errors``).
See docs/client.md.
"""

from nodeflow_client.client import Client, start_body
from nodeflow_client.errors import (
    Conflict,
    ConnectionFailed,
    Forbidden,
    Invalid,
    LimitExceeded,
    NodeFlowError,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    ServerError,
    TooManyRequests,
    Unauthenticated,
    Unavailable,
    WaitTimeout,
)
from nodeflow_client.models import (
    BlockedBy,
    Breaker,
    Execution,
    LeasedTask,
    Page,
    Queue,
    QueueWorker,
    Quotas,
    Schedule,
    Semaphore,
    StartAnswer,
    Task,
    TaskDefinition,
    WebhookDelivery,
    WorkflowDefinition,
    WorkflowVersion,
)

__all__ = [
    "BlockedBy",
    "Breaker",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "Execution",
    "Forbidden",
    "Invalid",
    "LeasedTask",
    "LimitExceeded",
    "NodeFlowError",
    "NotFound",
    "Page",
    "PayloadTooLarge",
    "Queue",
    "QueueWorker",
    "QuotaExceeded",
    "Quotas",
    "Schedule",
    "Semaphore",
    "ServerError",
    "StartAnswer",
    "Task",
    "TaskDefinition",
    "TooManyRequests",
    "Unauthenticated",
    "Unavailable",
    "WaitTimeout",
    "WebhookDelivery",
    "WorkflowDefinition",
    "WorkflowVersion",
    "start_body",
]
