"""The benchmark's worker process: the worker SDK (``nodeflow_worker.Worker``)
running a no-op function, in a process of its own as each peer's worker is.

It stays up for the whole benchmark (its imports warm) and is told what to
do on its stdin, one command a line, answering ``ok`` on its stdout:

    start URL TASK_TYPE SLOTS   a Worker polls TASK_TYPE with SLOTS slots
                                (its defaults otherwise: batched results,
                                eager dispatch, 5 s long-polls, or
                                BENCH_POLL_WAIT_S), on a new connection pool
    stop                        the Worker stops: no more polls, the tasks in
                                flight finish and report (waits for the long
                                poll in progress, up to 5 s)
    quit                        exit

Workload A's drain starts its tasks while the worker is stopped and
releases them with ``start``, as Celery's bench does with ``add_consumer``.
The API key comes in the environment (``NODE_FLOW_BENCH_KEY``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import IO

from nodeflow_worker import Client, Task, Worker

KEY_ENV = "NODE_FLOW_BENCH_KEY"


def noop(task: Task) -> None:
    return None


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    key = os.environ[KEY_ENV]
    # The SDK's default; shorter only to make a smoke run's stops quicker.
    poll_wait_s = float(os.environ.get("BENCH_POLL_WAIT_S", "5"))
    worker: Worker | None = None
    started = 0
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "start" and len(words) == 4 and worker is None:
            url, task_type, slots = words[1], words[2], int(words[3])
            started += 1
            worker = Worker(
                client=Client(url, key), concurrency=slots, worker_id=f"bench-worker-{started}", poll_wait_s=poll_wait_s
            )
            worker.register(task_type, noop)
            worker.start()
        elif words[0] == "stop" and worker is not None:
            worker.stop(wait=True, timeout=60)
            worker.client.close()
            worker = None
        elif words[0] == "quit":
            break
        else:
            print(f"error: cannot {line.strip()!r} now", flush=True)
            continue
        print("ok", flush=True)
    if worker is not None:
        worker.stop(wait=True, timeout=60)


class WorkerProcess:
    """The benchmark's handle on its worker process."""

    def __init__(self, *, api_key: str, root: Path, python: str, log_path: Path) -> None:
        self.log_path = log_path
        self._log: IO[str] = open(log_path, "a")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            [python, "-m", "tools.bench_worker"],
            cwd=root,
            env={**os.environ, KEY_ENV: api_key, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            start_new_session=True,
        )
        self.running = False

    def _command(self, line: str) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().strip()
        if answer != "ok":
            raise RuntimeError(f"the bench worker answered {answer!r} to {line!r}; its log: {self.log_path}")

    def start(self, url: str, task_type: str, slots: int) -> None:
        """A Worker polls ``task_type``; returns once it is started (its
        first poll is on its way)."""
        self._command(f"start {url} {task_type} {slots}")
        self.running = True

    def stop(self) -> None:
        """The Worker stops polling and its tasks in flight report."""
        if self.running:
            self._command("stop")
            self.running = False

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError, RuntimeError):
                self.stop()
                assert self.process.stdin is not None
                self.process.stdin.write("quit\n")
                self.process.stdin.flush()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


if __name__ == "__main__":
    main()
