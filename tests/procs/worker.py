"""A worker process for multi-process tests: polls the given queues and
completes each task with ``{"value": input.value + 1}``. Survives the server
going away (it retries); runs until killed.

    python tests/procs/worker.py URL KEY queue [queue …]
"""
from __future__ import annotations

import sys
import time

import httpx

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))

from nodeflow_worker import Client, StaleLease  # noqa: E402


def main(url: str, key: str, queues: list[str]) -> None:
    client = Client(url, key, timeout_s=10)
    while True:
        for queue in queues:
            try:
                for task in client.poll(queue, worker_id=f"w{__import__('os').getpid()}", count=5, wait_s=0.2):
                    value = task.input.get("value") or 0
                    try:
                        client.complete(task, {"value": value + 1})
                    except StaleLease:
                        pass  # re-delivered or canceled meanwhile: someone else owns it
            except (httpx.HTTPError, ValueError):
                time.sleep(0.2)  # the server is restarting


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
