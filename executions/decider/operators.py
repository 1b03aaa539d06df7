"""The one mapping from task type to the code that walks it.

``start`` runs when the walk first reaches an operator (it makes the
operator's row); ``progress`` on every later walk over that row; ``begin``
when a waiting task (or a SUB_WORKFLOW) is due to start. A type without an
entry is dispatched (SIMPLE and the system tasks): the walk schedules it and
waits for its result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from executions.decider import (
    do_while,
    dynamic_fork,
    fork_join,
    human,
    join,
    messages,
    set_variable,
    sub_workflow,
    switch,
    terminate,
    wait,
    webhook,
)


@dataclass(frozen=True)
class Handler:
    start: Callable | None = None
    progress: Callable | None = None
    begin: Callable | None = None


HANDLERS: dict[str, Handler] = {
    "SWITCH": Handler(start=switch.start, progress=switch.progress),
    "FORK_JOIN": Handler(start=fork_join.start, progress=fork_join.progress),
    "FORK_JOIN_DYNAMIC": Handler(start=dynamic_fork.start, progress=dynamic_fork.progress),
    "JOIN": Handler(start=join.start),
    "DO_WHILE": Handler(start=do_while.start, progress=do_while.progress),
    "SUB_WORKFLOW": Handler(progress=sub_workflow.progress, begin=sub_workflow.begin),
    "TERMINATE": Handler(start=terminate.start),
    "SET_VARIABLE": Handler(start=set_variable.start),
    "WAIT": Handler(begin=wait.begin),
    "HUMAN": Handler(begin=human.begin),
    "WAIT_FOR_WEBHOOK": Handler(begin=webhook.begin),
    "PULL_WORKFLOW_MESSAGES": Handler(progress=messages.progress, begin=messages.begin),
}
NO_HANDLER = Handler()


def handler_of(task_type: str) -> Handler:
    return HANDLERS.get(task_type, NO_HANDLER)
