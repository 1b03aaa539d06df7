"""What walking a task or a task list comes to, and where it is walked.

Every handler returns an ``Outcome``: DONE (go on to the next task, with
this output), RUNNING (something is still open: stop here for now), FAILED
(the enclosing block fails, with this reason) or ENDED (a TERMINATE: the
execution ends as it says).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from executions.decider.decision import Ending

DONE, RUNNING, FAILED, ENDED = "DONE", "RUNNING", "FAILED", "ENDED"


@dataclass
class Outcome:
    kind: str
    reason: str = ""
    failed: tuple[str, ...] = ()
    output: dict = field(default_factory=dict)
    joins: dict = field(default_factory=dict)
    ending: Ending | None = None
    timed_out: bool = False


DONE_EMPTY = Outcome(DONE)
RUNNING_OUTCOME = Outcome(RUNNING)


@dataclass(frozen=True)
class Scope:
    """Where a task list is being evaluated: the path prefix of its rows, and
    inside a dynamic fork, the item and its index."""

    prefix: str
    item: Any = None
    index: int | None = None
