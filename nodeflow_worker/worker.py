"""The worker: run registered functions for the tasks of their queues.

    worker = Worker("http://127.0.0.1:8000", api_key, concurrency=8)

    @worker.task("charge")
    def charge(task):
        return {"id": payments.charge(task.input["amount"], idempotency_key=task.idempotency_key)}

    worker.run()

Each registered task type has its own poller thread and at most
``concurrency`` tasks in flight: a poll asks for as many tasks as there are
free slots, and a slot is freed once the task's result is reported. Every
running task is heartbeaten automatically (``heartbeats``); results are sent
by one reporter thread, batched when several finish together (``reporter``).
``stop()`` (or SIGTERM/SIGINT in ``run()``) stops polling, lets the tasks in
flight finish and report, and returns; a second signal exits at once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from queue import SimpleQueue
from typing import Any

import httpx

from nodeflow_worker.backoff import Backoff, is_transient
from nodeflow_worker.client import Client, LeasedTask
from nodeflow_worker.errors import LeaseLost, TaskError, WorkerError
from nodeflow_worker.heartbeats import Heartbeats
from nodeflow_worker.reporter import Eager, Report, Reporter
from nodeflow_worker.task import Task

log = logging.getLogger("nodeflow_worker")

TaskFunction = Callable[[Task], Any]

DEFAULT_CONCURRENCY = 4
# How long one poll waits for work. A stop waits for the poll in progress to
# come back (an abandoned poll could still lease tasks, which would then sit
# out their lease), so this bounds how long an idle worker takes to stop.
DEFAULT_POLL_WAIT_S = 5.0
MAX_POLL_COUNT = 100
# Failed polls are retried with backoff up to this delay (a restarting server
# is back in seconds; a poll is cheap).
POLL_RETRY_MAX_S = 5.0
# A task that arrives once stopping has begun is handed back at once
# (IN_PROGRESS with this callback delay: back to the queue, same attempt).
GIVE_BACK_AFTER_S = 0.001
MAX_TRACEBACK_CHARS = 4000
TASK_TYPE = re.compile(r"[A-Za-z0-9_.-]{1,128}")


@dataclass
class _Queue:
    name: str
    fn: TaskFunction
    concurrency: int
    in_flight: int = 0
    thread: threading.Thread | None = None


class _Runners:
    """The threads that run tasks: one is started when a task finds none
    idle, and kept for the next (starting a thread per task cost more than
    a quick task itself). There are never more than tasks in flight at
    once, so never more than the worker's slots. Daemon threads, so a
    second signal still exits at once, whatever a task is doing."""

    def __init__(self) -> None:
        self._work: SimpleQueue[tuple[Callable[..., None], tuple]] = SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._started = 0

    def run(self, fn: Callable[..., None], *args: Any) -> None:
        with self._lock:
            start = not self._idle
            if start:
                self._started += 1
            else:
                self._idle -= 1  # that thread takes this task (or another queued one: the counts match)
        self._work.put((fn, args))
        if start:
            threading.Thread(target=self._loop, name=f"nodeflow-task-{self._started}", daemon=True).start()

    def _loop(self) -> None:
        while True:
            fn, args = self._work.get()
            try:
                fn(*args)
            except Exception:  # a bug here must not take the thread (and the task's slot count) with it
                log.exception("running a task failed")
            with self._lock:
                self._idle += 1


class Worker:
    """Polls the queues of its registered functions and runs their tasks."""

    def __init__(
        self,
        base_url: str = "",
        api_key: str = "",
        namespace: str = "default",
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        worker_id: str | None = None,
        poll_wait_s: float = DEFAULT_POLL_WAIT_S,
        max_heartbeat_interval_s: float = 30.0,
        batch_results: bool = True,
        report_retry_s: float = 60.0,
        eager_dispatch: bool = True,
        client: Client | None = None,
    ) -> None:
        if client is None and not (base_url and api_key):
            raise ValueError("give base_url and api_key, or a client")
        _check_concurrency(concurrency)
        if not 0 <= poll_wait_s <= 30:
            raise ValueError("poll_wait_s must be between 0 and 30 seconds")
        self._owns_client = client is None
        self.client = client or Client(base_url, api_key, namespace)
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.poll_wait_s = poll_wait_s
        self._queues: dict[str, _Queue] = {}
        self._heartbeats = Heartbeats(self.client, max_interval_s=max_heartbeat_interval_s)
        # Eager dispatch: a final result leases the next task of its type in the same request.
        eager = Eager(self.worker_id, self._wants_more, self._begin_leased) if eager_dispatch else None
        self._reporter = Reporter(self.client, batch=batch_results, retry_for_s=report_retry_s, eager=eager)
        self._runners = _Runners()
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._drain_lock = threading.Lock()
        self._started = False
        self._fatal: BaseException | None = None

    # --- registration ------------------------------------------------------
    def task(self, task_type: str, *, concurrency: int | None = None) -> Callable[[TaskFunction], TaskFunction]:
        """Decorator: run the function for every task of ``task_type``."""
        return lambda fn: self.register(task_type, fn, concurrency=concurrency)

    def register(self, task_type: str, fn: TaskFunction, *, concurrency: int | None = None) -> TaskFunction:
        """Run ``fn(task)`` for every task of ``task_type``, at most
        ``concurrency`` (default: the worker's) at once. Its return value (a
        dict, or None) is the task's output; see ``run_function`` for errors."""
        if not TASK_TYPE.fullmatch(task_type):
            raise ValueError(f"{task_type!r} is not a task type name ([A-Za-z0-9_.-]{{1,128}})")
        if task_type in self._queues:
            raise ValueError(f"{task_type!r} is registered already")
        if self._started:
            raise RuntimeError("register functions before the worker starts")
        limit = self.concurrency if concurrency is None else concurrency
        self._queues[task_type] = _Queue(task_type, fn, _check_concurrency(limit))
        return fn

    @property
    def task_types(self) -> list[str]:
        return list(self._queues)

    @property
    def in_flight(self) -> int:
        """Tasks leased and not yet reported."""
        with self._cond:
            return sum(q.in_flight for q in self._queues.values())

    # --- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        """Start polling in background threads; returns at once."""
        if not self._queues:
            raise RuntimeError("no task type is registered")
        if self._started:
            raise RuntimeError("the worker has started already")
        self._started = True
        self._heartbeats.start()
        self._reporter.start()
        for queue in self._queues.values():
            queue.thread = threading.Thread(
                target=self._poll_loop, args=(queue,), name=f"nodeflow-poll-{queue.name}", daemon=True
            )
            queue.thread.start()
        queues = ", ".join(f"{q.name}×{q.concurrency}" for q in self._queues.values())
        log.info("worker %s polling %s", self.worker_id, queues)

    def stop(self, *, wait: bool = True, timeout: float | None = None) -> bool:
        """Stop polling; with ``wait``, let the tasks in flight finish and
        report, then return True (False if ``timeout`` passed first)."""
        self._request_stop()
        return self._drain(timeout) if wait else self._done.is_set()

    def run(self) -> None:
        """Start, then block until stopped. In the main thread, the first
        SIGTERM or SIGINT stops gracefully and a second exits at once
        (SystemExit). Raises WorkerError if the server refused the worker."""
        self.start()
        restore = self._install_signal_handlers()
        try:
            while not self._stopping.wait(0.5):
                pass
            self._drain(None)
        finally:
            restore()
        if self._fatal is not None:
            raise WorkerError(f"the worker stopped: {self._fatal}") from self._fatal

    def _request_stop(self) -> None:
        with self._cond:
            self._stopping.set()
            self._cond.notify_all()

    def _drain(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._drain_lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            return False
        try:
            if self._done.is_set() or not self._started:
                self._done.set()
                return True
            if not (self._join_pollers(deadline) and self._wait_idle(deadline)):
                return False
            self._heartbeats.close()
            self._reporter.close()
            if self._owns_client:
                self.client.close()
            self._done.set()
            log.info("worker %s stopped", self.worker_id)
            return True
        finally:
            self._drain_lock.release()

    def _join_pollers(self, deadline: float | None) -> bool:
        for queue in self._queues.values():
            while queue.thread is not None and queue.thread.is_alive():
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                queue.thread.join(timeout=0.2)  # short waits: signals are handled between them
        return True

    def _wait_idle(self, deadline: float | None) -> bool:
        with self._cond:
            while any(q.in_flight for q in self._queues.values()):
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                self._cond.wait(0.2)
        return True

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {signum: signal.signal(signum, self._on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

        return restore

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self._stopping.is_set():
            log.warning("second signal: exiting now, abandoning %d task(s) in flight", self.in_flight)
            raise SystemExit(128 + signum)
        log.info(
            "signal %d: stopping; finishing %d task(s) in flight (a second signal exits now)", signum, self.in_flight
        )
        self._request_stop()

    # --- polling -----------------------------------------------------------
    def _poll_loop(self, queue: _Queue) -> None:
        backoff = Backoff(max_s=POLL_RETRY_MAX_S)
        while True:
            count = self._free_slots(queue)
            if not count:
                return
            try:
                leased = self.client.poll(queue.name, worker_id=self.worker_id, count=count, wait_s=self.poll_wait_s)
            except Exception as exc:  # noqa: BLE001 - sorted below: retried or fatal
                if not is_transient(exc):
                    self._give_up(queue, exc)
                    return
                # Loud once per outage, quieter while it lasts.
                log.log(
                    logging.WARNING if backoff.tries == 0 else logging.INFO,
                    "polling %s failed (%s); trying again",
                    queue.name,
                    exc,
                )
                backoff.wait(self._stopping)
                continue
            backoff.reset()
            for item in leased:
                self._begin(queue, item)

    def _free_slots(self, queue: _Queue) -> int:
        """Wait for a free slot; how many are free (0: stopping)."""
        with self._cond:
            while queue.in_flight >= queue.concurrency and not self._stopping.is_set():
                self._cond.wait()
            return 0 if self._stopping.is_set() else min(queue.concurrency - queue.in_flight, MAX_POLL_COUNT)

    def _give_up(self, queue: _Queue, exc: BaseException) -> None:
        detail = exc.response.text[:300] if isinstance(exc, httpx.HTTPStatusError) else ""
        log.error("polling %s: the server refused the worker (%s) %s; stopping", queue.name, exc, detail)
        self._fatal = exc
        self._request_stop()

    # --- running -----------------------------------------------------------
    def _begin(self, queue: _Queue, leased: LeasedTask, *, slot_held: bool = False) -> None:
        if not slot_held:
            with self._cond:
                queue.in_flight += 1
        task = Task(leased, self)
        if self._stopping.is_set():
            log.info("%r arrived while stopping; handing it back", task)
            self._reporter.submit(
                Report(task, "IN_PROGRESS", callback_after_s=GIVE_BACK_AFTER_S, done=lambda: self._release(queue))
            )
            return
        self._heartbeats.add(task)
        self._runners.run(self._execute, queue, task)

    def _wants_more(self, task_type: str) -> bool:
        return task_type in self._queues and not self._stopping.is_set()

    def _begin_leased(self, task_type: str, leased: list[LeasedTask]) -> None:
        """Tasks results leased (eager dispatch): each takes over the slot of
        a result that leased it, which is still held."""
        for item in leased:
            self._begin(self._queues[task_type], item, slot_held=True)

    def _execute(self, queue: _Queue, task: Task) -> None:
        try:
            report = run_function(queue.fn, task)
        finally:
            self._heartbeats.remove(task)
        if task.lease_lost.is_set():
            log.warning(
                "%r: dropping its %s result: the task is no longer ours (%s)", task, report.status, task.lost_reason
            )
            self._release(queue)
            return
        report.done = lambda: self._release(queue)
        self._reporter.submit(report)

    def _release(self, queue: _Queue) -> None:
        with self._cond:
            queue.in_flight -= 1
            self._cond.notify_all()


def run_function(fn: TaskFunction, task: Task) -> Report:
    """Call ``fn(task)`` and turn what happens into the result to report:
    a return value → COMPLETED with it as output; ``TerminalError`` →
    FAILED_WITH_TERMINAL_ERROR; ``TaskError`` or any other exception → FAILED
    (retried by the server's policy), its traceback in the result's logs."""
    try:
        value = fn(task)
    except LeaseLost:
        return Report(task, "FAILED", reason="lease lost")  # dropped: the lease is gone
    except TaskError as exc:
        log.warning("%r failed: %s", task, exc.reason)
        status = "FAILED_WITH_TERMINAL_ERROR" if exc.terminal else "FAILED"
        output = {**exc.output, "error": {"code": exc.code, "message": exc.message}}
        return _checked(Report(task, status, output=output, reason=exc.reason, logs=task.logs))
    except BaseException as exc:
        log.warning("%r failed", task, exc_info=True)
        task.log(traceback.format_exc()[-MAX_TRACEBACK_CHARS:])
        reason = f"{type(exc).__name__}: {exc}"
        return Report(
            task,
            "FAILED",
            output={"error": {"type": type(exc).__name__, "message": str(exc)}},
            reason=reason,
            logs=task.logs,
        )
    return _checked(Report(task, "COMPLETED", output=as_output(value), logs=task.logs))


def as_output(value: Any) -> dict:
    """The task's outputData: a dict as is, None as {}, anything else as {"result": value}."""
    if value is None:
        return {}
    return value if isinstance(value, dict) else {"result": value}


def _checked(report: Report) -> Report:
    """A result whose output cannot be sent fails the attempt instead."""
    try:
        json.dumps(report.output)
    except (TypeError, ValueError) as exc:
        return Report(report.task, "FAILED", reason=f"output is not JSON-serializable: {exc}", logs=report.logs)
    return report


def _check_concurrency(concurrency: int) -> int:
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError("concurrency must be a whole number ≥ 1")
    return concurrency
