"""Which roles run where. ``nodeflow_run`` starts ``all_in_one_roles``."""
from __future__ import annotations

import threading

from nodeflow.loop import Role


def all_in_one_roles(stop: threading.Event) -> list[Role]:
    """Every background role, sharing one stop event."""
    from executions.roles.decider import DeciderRole
    from executions.roles.sweeper import SweeperRole

    return [DeciderRole(stop), SweeperRole(stop)]
