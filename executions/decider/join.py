"""JOIN: completes with the outputs of the fork before it (``joinOn`` picks
which references; a reference the fork did not produce is looked up by name)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executions.decider.outcomes import DONE, Outcome, Scope

if TYPE_CHECKING:
    from executions.decider.walk import Walk


def start(walk: Walk, task: dict, path: str, scope: Scope, inputs: dict, previous: Outcome) -> Outcome:
    wanted = task.get("joinOn") or []
    joined = previous.joins
    if wanted:
        joined = {key: out for key, out in joined.items() if ref_of(key) in wanted}
        for ref in wanted:
            if not any(ref_of(key) == ref for key in joined):
                row = walk.find(ref, scope.prefix)
                if row is not None:
                    joined[ref] = row.output
    walk.operator_row(task, path, inputs, "COMPLETED", output=joined)
    return Outcome(DONE, output=joined)


def ref_of(key: str) -> str:
    """``fan[3].charge`` → ``charge``; ``charge`` → ``charge``."""
    return key.rsplit(".", 1)[-1]
