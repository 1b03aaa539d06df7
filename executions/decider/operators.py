"""The one mapping from task type to the code that walks it.

``start`` runs when the walk first reaches an operator (it makes the
operator's row); ``progress`` on every later walk over that row; ``begin``
when a waiting task (or a SUB_WORKFLOW) is due to start; ``concrete``, when
set, gives the task to walk in its place, resolved at run time (a DYNAMIC
task's SIMPLE task, a SUB_WORKFLOW's name given as an expression). A type
without an entry is dispatched (SIMPLE and the system tasks): the walk
schedules it and waits for its result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from executions.decider import (
    do_while,
    dynamic,
    dynamic_tasks_fork,
    exclusive_join,
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
    concrete: Callable | None = None


HANDLERS: dict[str, Handler] = {
    "SWITCH": Handler(start=switch.start, progress=switch.progress),
    "FORK_JOIN": Handler(start=fork_join.start, progress=fork_join.progress),
    # The native form (forkTask over items) is dynamic_fork's; dynamic_tasks_fork hands it over.
    "FORK_JOIN_DYNAMIC": Handler(start=dynamic_tasks_fork.start, progress=dynamic_tasks_fork.progress),
    "JOIN": Handler(start=join.start),
    "DO_WHILE": Handler(start=do_while.start, progress=do_while.progress),
    "SUB_WORKFLOW": Handler(
        progress=sub_workflow.progress, begin=sub_workflow.begin, concrete=dynamic.sub_workflow_concrete
    ),
    "TERMINATE": Handler(start=terminate.start),
    "SET_VARIABLE": Handler(start=set_variable.start),
    "WAIT": Handler(begin=wait.begin),
    "HUMAN": Handler(begin=human.begin),
    "WAIT_FOR_WEBHOOK": Handler(begin=webhook.begin),
    "PULL_WORKFLOW_MESSAGES": Handler(progress=messages.progress, begin=messages.begin),
    "EXCLUSIVE_JOIN": Handler(start=exclusive_join.start),
    "DYNAMIC": Handler(start=dynamic.dynamic_start, concrete=dynamic.dynamic_concrete),
}
NO_HANDLER = Handler()


def handler_of(task_type: str) -> Handler:
    return HANDLERS.get(task_type, NO_HANDLER)
