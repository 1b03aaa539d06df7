"""Shared by the wake-up tests (test_one_wakeup, test_sync_match): a
namespace with one queue and a one-task workflow "one" on it, and a bounded
wait for a condition another thread makes true."""

from __future__ import annotations

import time
from collections.abc import Callable

from metadata.taskdefs import upsert_task_definition
from metadata.workflows import register_workflow
from nodeflow.keys import ensure_namespace
from nodeflow.models import Namespace


def one_task_namespace(queue: str) -> Namespace:
    """The default namespace, with ``queue``'s definition and workflow "one" (one task of it)."""
    ns = ensure_namespace(name="default")
    upsert_task_definition(namespace=ns, values={"name": queue})
    register_workflow(namespace=ns, body={"name": "one", "tasks": [{"name": queue, "taskReferenceName": "t"}]})
    return ns


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    give_up = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < give_up, "timed out"
        time.sleep(0.005)
