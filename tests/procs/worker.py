"""A worker process for multi-process tests: polls the given queues and
completes each task with ``{"value": input.value + 1}``. Survives the server
going away (it retries); runs until killed. Its worker id is ``w<pid>``.

Planned faults, read from the task's input so that the outcome is
computable from the input alone:

- ``failAttempts: k``: attempts 1..k are reported FAILED (retryable);
- ``hangAttempts: k``: attempts 1..k are never answered (the lease runs out).

    python tests/procs/worker.py URL KEY queue [queue …]
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import httpx

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))

from nodeflow_worker import Client, LeasedTask, StaleLease


def answer(client: Client, task: LeasedTask) -> None:
    if task.attempt <= int(task.input.get("hangAttempts") or 0):
        return
    if task.attempt <= int(task.input.get("failAttempts") or 0):
        client.fail(task, f"planned failure of attempt {task.attempt}")
        return
    client.complete(task, {"value": (task.input.get("value") or 0) + 1})


def main(url: str, key: str, queues: list[str]) -> None:
    client = Client(url, key, timeout_s=10)
    worker_id = f"w{os.getpid()}"
    while True:
        for queue in queues:
            try:
                for task in client.poll(queue, worker_id=worker_id, count=5, wait_s=0.2):
                    with contextlib.suppress(StaleLease):  # re-delivered or canceled meanwhile: someone else owns it
                        answer(client, task)
            except (httpx.HTTPError, ValueError):
                time.sleep(0.2)  # the server is restarting


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
