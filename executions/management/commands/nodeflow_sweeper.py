"""``manage.py nodeflow_sweeper``: fire timers and expire leases (any number of copies)."""

from executions.roles.command import RoleCommand
from executions.roles.sweeper import SweeperRole


class Command(RoleCommand):
    help = "Fire due timers and handle expired leases."
    role_class = SweeperRole
