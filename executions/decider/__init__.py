"""The decider: (snapshot, now) → decision. Pure.

It walks the workflow definition against the task rows of the execution and
says what happens next: which tasks to schedule, which operators complete
(operators are evaluated here, never dispatched), which rows to retry,
cancel or absorb, which children to start, and whether the execution ends.
It reads no clock (``snapshot.now``), no database, no settings and no
randomness but the ``rand`` it is given, and it never changes its input; the
executor (``executions.executor``) applies the decision under the
execution's row lock. It imports without Django.

- ``snapshot``: what it reads (``Snapshot``, ``Row``, ``Child``);
  ``decision``: what it returns (``Decision``, ``TimerSpec``, ``StartChild``,
  ``Ending``).
- ``walk``: the walk over the definition, failures, retries, cancellation.
- ``operators``: the one mapping from task type to its handler, one module
  each: ``switch``, ``fork_join``, ``dynamic_fork``, ``join``, ``do_while``,
  ``sub_workflow``, ``terminate``, ``set_variable``, ``wait``, ``human``,
  ``messages`` (PULL_WORKFLOW_MESSAGES) and ``webhook`` (WAIT_FOR_WEBHOOK).

Paths name logical tasks: ``charge``; ``fan[3].charge`` (item 3 of a dynamic
fork); ``loop[2].step`` (iteration 2 of a DO_WHILE); ``sub.inner`` (a task of
the child started by SUB_WORKFLOW ``sub``). Static fork branches and switch
cases add nothing: reference names are unique in a definition.
"""

from executions.decider.walk import NOT_RETRIED, PAST_DEADLINE, deadline_reason, decide, task_timers

__all__ = ["NOT_RETRIED", "PAST_DEADLINE", "deadline_reason", "decide", "task_timers"]
