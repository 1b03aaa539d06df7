"""``manage.py nodeflow_scheduler``: fire due schedules (any number of copies)."""

from executions.roles.command import RoleCommand
from executions.roles.scheduler import SchedulerRole


class Command(RoleCommand):
    help = "Fire due schedules: each firing starts an execution, subject to every control on starts."
    role_class = SchedulerRole
