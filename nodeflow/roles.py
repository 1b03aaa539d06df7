"""Which roles run where. ``nodeflow_run`` starts ``all_in_one_roles``."""
from __future__ import annotations

import threading

from nodeflow.loop import Role


def all_in_one_roles(stop: threading.Event) -> list[Role]:
    """Every background role, sharing one stop event. (The decider, sweeper
    and system-task roles join this list as they are built.)"""
    return []
