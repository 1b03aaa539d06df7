"""Which roles run where. ``nodeflow_run`` starts ``all_in_one_roles`` in
threads of its own process; production runs each role as a process of its
own (its command), any number of copies."""

from __future__ import annotations

import threading

from executions.roles.loop import Role


def all_in_one_roles(stop: threading.Event) -> list[Role]:
    """Every background role, sharing one stop event. System tasks run here
    unless Celery workers run them (CELERY_BROKER_URL is set)."""
    from django.conf import settings

    from executions.roles.decider import DeciderRole
    from executions.roles.scheduler import SchedulerRole
    from executions.roles.sweeper import SweeperRole
    from executions.roles.systemtasks import SystemTaskRole

    roles: list[Role] = [DeciderRole(stop), SweeperRole(stop), SchedulerRole(stop)]
    if not settings.CELERY_BROKER_URL:
        roles.append(SystemTaskRole(stop))
    return roles
