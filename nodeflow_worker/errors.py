"""Exceptions a task function raises to choose how its failure is reported.

Any exception fails the attempt (``FAILED``): the server retries it under the
task definition's retry policy. ``TaskError`` does the same but lets the
function name an error code, which leads ``reasonForIncompletion`` (so a
definition's ``nonRetryableErrors`` can match it) and carry output.
``TerminalError`` ends the task ``FAILED_WITH_TERMINAL_ERROR``: never retried.
"""

from __future__ import annotations


class TaskError(Exception):
    """A failure the function describes: ``code`` and ``message`` become
    ``reasonForIncompletion`` ("code: message") and ``outputData.error``."""

    terminal = False

    def __init__(self, message: str, *, code: str = "", output: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.output = output or {}

    @property
    def reason(self) -> str:
        return f"{self.code}: {self.message}" if self.code else self.message


class TerminalError(TaskError):
    """Do not retry: the task ends FAILED_WITH_TERMINAL_ERROR whatever attempts remain."""

    terminal = True


NonRetryableError = TerminalError


class LeaseLost(Exception):
    """The task is no longer this worker's (409: its lease expired and it was
    re-delivered, or it was canceled). Its result would be refused, so it is
    dropped. Raised by ``Task.heartbeat``; ``Task.lease_lost`` is set too."""


class WorkerError(Exception):
    """The worker cannot go on (e.g. its API key is refused); raised by ``Worker.run``."""
