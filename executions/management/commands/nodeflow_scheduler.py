"""``manage.py nodeflow_scheduler``: fire due schedules (any number of copies)."""
from executions.roles.scheduler import SchedulerRole
from executions.roles.command import RoleCommand


class Command(RoleCommand):
    help = "Fire due schedules: each firing starts an execution, subject to every control on starts."
    role_class = SchedulerRole
