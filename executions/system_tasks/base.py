"""The system-task contract: the hooks a type implements, what it returns,
and how it fails.

The runner (``executions.system_tasks.runner``) leases one attempt of a
system task, calls one hook with a ``Context`` (plain data: no ORM rows, no
database) and reports what the hook returned through
``executions.results.report_result`` with the lease token. Hooks:

- ``start(ctx)``: the first delivery of an attempt. Runs once per attempt,
  unless the runner dies before it reports (then the attempt is offered again
  and ``execute`` runs): a hook must tolerate running twice, and sends
  ``ctx.idempotency_key`` wherever the protocol allows.
- ``execute(ctx)``: every later delivery of the same attempt, e.g. the next
  poll of HTTP_POLL after it answered "not yet" (``in_progress``); ``ctx.output``
  is what the previous delivery reported. By default the same as ``start``.
- ``cancel(ctx)``: the attempt was canceled while the hook ran (its report
  got 409 on a CANCELED task): undo or release what it started. Best effort;
  by default nothing.
- ``breaker_key(ctx)``: the circuit breaker this call goes through (a host, a
  gRPC service), or None for types that leave no process.

A hook returns an ``Outcome`` (``completed`` or ``in_progress``) or raises
``TaskFailure``: terminal (the same input will fail again) or retryable (the
task's retry policy decides), and whether the failure says the dependency is
unhealthy (``counts``: what circuit breakers count).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

COMPLETED, IN_PROGRESS = "COMPLETED", "IN_PROGRESS"
FAILED, FAILED_TERMINAL = "FAILED", "FAILED_WITH_TERMINAL_ERROR"
MIN_CALLBACK_S = 0.001


@dataclass(frozen=True)
class Context:
    task_id: str
    type: str
    namespace: str
    input: dict
    output: dict
    attempt: int
    idempotency_key: str
    # time.monotonic() by which the hook must have answered: NODE_FLOW_SYSTEM_TASK_CALL_SECONDS
    # from the start, or sooner before the attempt's startToCloseTimeout (runner.call_seconds).
    # Its lease is short and renewed meanwhile, so this is not the lease's end.
    deadline: float = field(default_factory=lambda: time.monotonic() + 60.0)

    def time_left(self) -> float:
        """Seconds until ``deadline``; never below a small floor, so a call
        still gets to fail with a timeout of its own."""
        return max(self.deadline - time.monotonic(), 0.05)


@dataclass(frozen=True)
class Outcome:
    status: str  # COMPLETED or IN_PROGRESS
    output: dict
    callback_after_s: float = 0.0


def completed(output: dict) -> Outcome:
    return Outcome(COMPLETED, output)


def in_progress(output: dict, *, after_s: float) -> Outcome:
    """Not done: offer the same attempt again in ``after_s`` seconds (the
    runner does not sleep; the task goes back to the queue)."""
    # 0 would mean "still running here" to results.report_result and keep the lease.
    return Outcome(IN_PROGRESS, output, callback_after_s=max(after_s, MIN_CALLBACK_S))


class TaskFailure(Exception):
    """The attempt failed. ``counts`` is what circuit breakers see: True for a
    failure of the dependency (timeout, connection error, 5xx, 429), False
    when it answered (a 4xx), None when no call was made (bad input, refused
    by the outbound policy)."""

    terminal = False

    def __init__(
        self, reason: str, *, output: dict | None = None, counts: bool | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.output = dict(output or {})
        self.counts = counts
        if retry_after_s is not None:
            # The decider waits at least this long before the next attempt
            # (still capped by maxRetryDelaySeconds).
            self.output["retryAfterSeconds"] = retry_after_s

    @property
    def status(self) -> str:
        return FAILED_TERMINAL if self.terminal else FAILED


class RetryableError(TaskFailure):
    terminal = False


class TerminalError(TaskFailure):
    terminal = True


class SystemTask:
    """Base of every system task type; see the module docstring for the hooks."""

    type = ""

    def start(self, ctx: Context) -> Outcome:
        return self.execute(ctx)

    def execute(self, ctx: Context) -> Outcome:
        raise NotImplementedError

    def cancel(self, ctx: Context) -> None:
        """Nothing to undo by default."""

    def breaker_key(self, ctx: Context) -> str | None:
        return None


# --- input helpers --------------------------------------------------------


def require(container: dict, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``container[name]`` of type ``kind``, or a terminal failure naming it."""
    value = container.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise TerminalError(f"{where}.{name} is required and must be {_kind_name(kind)}")
    return value


def optional(container: dict, name: str, kind: type | tuple[type, ...], where: str, default: Any) -> Any:
    if container.get(name) is None:
        return default
    return require(container, name, kind, where)


def seconds(container: dict, name: str, where: str, default: float) -> float:
    value = optional(container, name, (int, float), where, default)
    if value <= 0:
        raise TerminalError(f"{where}.{name} must be a positive number of seconds")
    return float(value)


def _as_tuple(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind) -> str:
    names = {dict: "an object", str: "a string", int: "a number", float: "a number", list: "a list", bool: "a boolean"}
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in _as_tuple(kind)))
