"""Reporting results: one thread sends them in the order they finish.

Results that finish together go in one request to the batch route (up to
100); a lone result uses the single route. Transient failures are retried
with backoff for up to ``retry_for_s``; after that the result is given up and
the server re-delivers the task when its lease runs out. A 409 (lease lost,
task canceled) drops the result: the server has already moved on.

With ``Eager``, a final result also asks for the next tasks of its type,
one for each slot it frees (eager dispatch): the server leases them in the
result's own transaction, and each takes over the slot of a result that
leased it (that result's ``done`` is not called: the slot stays held), so
the worker never holds more leases than slots. A sequential flow's step is one request, not a result
and then a poll.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from nodeflow_worker.backoff import Backoff, is_transient
from nodeflow_worker.client import Client, LeasedTask, StaleLease, result_body
from nodeflow_worker.task import Task

log = logging.getLogger("nodeflow_worker")

MAX_BATCH = 100


@dataclass
class Report:
    task: Task
    status: str
    output: dict = field(default_factory=dict)
    reason: str = ""
    logs: list = field(default_factory=list)
    callback_after_s: float = 0.0
    done: Callable[[], None] = lambda: None  # called once, when sent or given up
    slot_passed: bool = False  # its slot went to a task its result leased (eager dispatch): no ``done``

    def body(self) -> dict:
        return result_body(
            self.task.leased,
            self.status,
            output=self.output,
            reason=self.reason,
            logs=self.logs,
            callback_after_s=self.callback_after_s,
        )


@dataclass(frozen=True)
class Eager:
    """Eager dispatch: who asks (``worker_id``), whether more tasks of a type
    are wanted now (not while stopping), and where leased ones go."""

    worker_id: str
    wanted: Callable[[str], bool]
    begin: Callable[[str, list[LeasedTask]], None]  # each task in a slot already held


class Reporter:
    def __init__(
        self, client: Client, *, batch: bool = True, retry_for_s: float = 60.0, eager: Eager | None = None
    ) -> None:
        self.client = client
        self.batch = batch
        self.retry_for_s = retry_for_s
        self.eager = eager
        self._queue: queue.Queue[Report | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="nodeflow-reporter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, report: Report) -> None:
        self._queue.put(report)

    def close(self) -> None:
        """Send what is queued, then stop."""
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout=self.retry_for_s + 5)

    def _loop(self) -> None:
        closing = False
        while not closing:
            first = self._queue.get()
            if first is None:
                return
            reports = [first]
            while self.batch and len(reports) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    closing = True
                    break
                reports.append(item)
            self._send_all(reports)

    def _send_all(self, reports: list[Report]) -> None:
        try:
            if len(reports) == 1:
                self._send_one(reports[0])
            else:
                self._send_batch(reports)
        finally:
            for report in reports:
                if not report.slot_passed:
                    report.done()

    def _next_for(self, reports: list[Report]) -> dict | None:
        """What to ask with these results: one next task per slot their
        final results free, when they are all of one type that is wanted."""
        types = {report.task.leased.task_type for report in reports}
        final = [report for report in reports if report.status != "IN_PROGRESS"]
        if self.eager is None or not final or len(types) != 1:
            return None
        (task_type,) = types
        if not self.eager.wanted(task_type):
            return None
        return {"workerId": self.eager.worker_id, "count": min(len(final), MAX_BATCH), "taskType": task_type}

    def _hand_over(self, ask: dict | None, leased: list[LeasedTask], reports: list[Report]) -> None:
        """Give each leased task the slot of one final result of ``reports``."""
        if self.eager is None or ask is None or not leased:
            return
        final = [report for report in reports if report.status != "IN_PROGRESS"]
        for report in final[: len(leased)]:
            report.slot_passed = True
        self.eager.begin(ask["taskType"], leased[: len(final)])

    def _send_one(self, report: Report) -> None:
        ask = self._next_for([report])
        try:
            answer = self._with_retries(
                lambda: self.client.result(
                    report.task.leased,
                    report.status,
                    output=report.output,
                    reason=report.reason,
                    logs=report.logs,
                    callback_after_s=report.callback_after_s,
                    next=ask,
                )
            )
            self._hand_over(ask, [LeasedTask.from_json(item) for item in answer.get("next", [])], [report])
        except StaleLease as exc:
            log.warning("%r: result dropped (%s)", report.task, exc)
        except httpx.HTTPStatusError as exc:
            self._refused(report, exc)
        except Exception as exc:  # noqa: BLE001 - given up; the lease runs out and the task is re-delivered
            log.error("%r: could not report %s (%s); the server will re-deliver it", report.task, report.status, exc)
        else:
            log.debug("%r: reported %s", report.task, report.status)

    def _send_batch(self, reports: list[Report]) -> None:
        bodies = [{"taskId": report.task.task_id, **report.body()} for report in reports]
        ask = self._next_for(reports)
        try:
            if ask is None:
                answers = self._with_retries(lambda: self.client.post_results(bodies))
            else:
                answers, leased = self._with_retries(lambda: self.client.post_results_and_lease(bodies, ask))
                self._hand_over(ask, leased, reports)
        except httpx.HTTPStatusError as exc:
            # One malformed item refuses the whole batch: send each on its own.
            log.info("batch of %d refused (%s); reporting one by one", len(reports), exc)
            for report in reports:
                self._send_one(report)
            return
        except Exception as exc:  # noqa: BLE001 - as in _send_one
            log.error("could not report %d results (%s); the server will re-deliver them", len(reports), exc)
            return
        for report, answer in zip(reports, answers, strict=False):
            if answer.get("status") != 200:
                log.warning("%r: result dropped (%s)", report.task, answer.get("message") or answer.get("error"))

    def _refused(self, report: Report, exc: httpx.HTTPStatusError) -> None:
        """The server refused the result itself (e.g. output too large): fail
        the attempt with the server's reason, without the refused output and
        logs, rather than leave it to time out."""
        message = f"the server refused the result: {exc.response.text[:500]}"
        log.error("%r: %s", report.task, message)
        if exc.response.status_code != 400 or report.status == "IN_PROGRESS":
            return
        status = "FAILED" if report.status == "COMPLETED" else report.status
        try:
            self._with_retries(lambda: self.client.result(report.task.leased, status, reason=message))
        except Exception as again:  # noqa: BLE001 - nothing more to try
            log.error("%r: could not report the refusal either (%s)", report.task, again)

    def _with_retries(self, send: Callable[[], object]):
        backoff = Backoff(max_s=5.0)
        give_up_at = time.monotonic() + self.retry_for_s
        while True:
            try:
                return send()
            except Exception as exc:
                if not is_transient(exc) or time.monotonic() >= give_up_at:
                    raise
                log.info("reporting failed (%s); trying again", exc)
                time.sleep(min(backoff.next_delay(), max(give_up_at - time.monotonic(), 0)))
