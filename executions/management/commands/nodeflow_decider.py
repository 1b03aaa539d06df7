"""``manage.py nodeflow_decider``: run the decider role (any number of copies)."""

from executions.roles.command import RoleCommand
from executions.roles.decider import DeciderRole


class Command(RoleCommand):
    help = "Drain the decide queue."
    role_class = DeciderRole
