"""WAIT: waits for a duration (``duration``: "30s", "2m", "30 seconds") or
until an instant (``until``), on a durable WAIT timer; a bad value fails it.
With neither it waits, as a HUMAN task does, to be completed through the API
(``results.complete_by_api``)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from executions.decider.decision import TimerSpec
from executions.decider.outcomes import DONE, DONE_EMPTY, RUNNING_OUTCOME, Outcome, Scope
from executions.decider.snapshot import Row
from metadata import durations

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def begin(walk: Walk, task: dict, row: Row, scope: Scope) -> Outcome:
    if "until" not in row.input and "duration" not in row.input:
        return RUNNING_OUTCOME  # no time given: waits to be completed through the API
    try:
        if "until" in row.input:
            due = durations.parse_instant(row.input["until"])
        else:
            due = walk.now + dt.timedelta(seconds=durations.parse_duration(row.input.get("duration")))
    except ValueError as exc:
        walk.finish(row, "FAILED_WITH_TERMINAL_ERROR", reason=f"WAIT: {exc}")
        return walk.failed(task, row, scope, DONE_EMPTY)
    if due <= walk.now:
        walk.finish(row, "COMPLETED")
        return Outcome(DONE)
    walk.decision.timers.append(TimerSpec("WAIT", due, row.id))
    return RUNNING_OUTCOME
