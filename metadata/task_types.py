"""The task types Node Flow knows, by kind, and the fields each carries.

Kinds decide where a task runs: WORKER tasks go to a queue polled by the
user's workers; OPERATORS are evaluated inside the decider; SYSTEM tasks run
in the system-task role; WAITING tasks wait for time or an outside event and
are never dispatched (only ``timeoutSeconds`` is armed on them).
"""

from __future__ import annotations

WORKER = frozenset({"SIMPLE"})
OPERATORS = frozenset(
    {
        "SWITCH",
        "FORK_JOIN",
        "JOIN",
        "FORK_JOIN_DYNAMIC",
        "DO_WHILE",
        "SUB_WORKFLOW",
        "TERMINATE",
        "SET_VARIABLE",
        # Conductor's (docs/conductor.md): a join of whichever branch ran, and
        # a task whose name (its queue and definition) an input gives at run time.
        "EXCLUSIVE_JOIN",
        "DYNAMIC",
    }
)
SYSTEM = frozenset({"HTTP", "HTTP_POLL", "WEBHOOK", "GRPC", "INLINE", "JSON_JQ_TRANSFORM", "START_WORKFLOW"})
WAITING = frozenset({"WAIT", "WAIT_FOR_WEBHOOK", "HUMAN", "PULL_WORKFLOW_MESSAGES"})
ALL_TYPES = WORKER | OPERATORS | SYSTEM | WAITING

# Fields every workflow task entry may carry.
COMMON_FIELDS = frozenset({"name", "taskReferenceName", "type", "inputParameters", "optional", "description"})

# Structural fields that sit on the task itself, by type (SPEC §5 table).
TYPE_FIELDS: dict[str, frozenset[str]] = {
    "SWITCH": frozenset({"evaluatorType", "expression", "decisionCases", "defaultCase"}),
    "FORK_JOIN": frozenset({"forkTasks", "maxConcurrency"}),
    "JOIN": frozenset({"joinOn"}),
    "FORK_JOIN_DYNAMIC": frozenset(
        {"forkTask", "maxConcurrency", "dynamicForkTasksParam", "dynamicForkTasksInputParamName"}
    ),
    "DO_WHILE": frozenset({"loopCondition", "loopOver", "maxIterations", "items"}),
    "SUB_WORKFLOW": frozenset({"subWorkflowParam"}),
    "EXCLUSIVE_JOIN": frozenset({"joinOn", "defaultExclusiveJoinTask"}),
    "DYNAMIC": frozenset({"dynamicTaskNameParam"}),
}

# inputParameters a type cannot run without (each may be an expression).
REQUIRED_INPUTS: dict[str, tuple[str, ...]] = {
    "HTTP": ("http_request",),
    "HTTP_POLL": ("http_request", "terminationCondition"),
    "WEBHOOK": ("url",),
    "GRPC": ("grpc_request",),
    "INLINE": ("expression",),
    "JSON_JQ_TRANSFORM": ("queryExpression",),
    "WAIT_FOR_WEBHOOK": ("matches",),
    "START_WORKFLOW": ("startWorkflow",),
}

SWITCH_EVALUATORS = ("value-param", "javascript")
TERMINATION_STATUSES = ("COMPLETED", "FAILED", "TERMINATED")
DEFAULT_DYNAMIC_FORK_CONCURRENCY = 4
MAX_FORK_CONCURRENCY = 16
MAX_LOOP_ITERATIONS = 1000
MAX_NESTING_DEPTH = 16
MAX_CALL_DEPTH = 4


def kind_of(task_type: str) -> str:
    for kind, members in (("worker", WORKER), ("operator", OPERATORS), ("system", SYSTEM), ("waiting", WAITING)):
        if task_type in members:
            return kind
    raise KeyError(task_type)
