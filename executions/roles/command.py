"""The management-command shell around a role: ``--once``, and the one
stop path (``loop.stop_on_signals``: the first SIGTERM/SIGINT finishes the
current tick and stops, a second exits at once). Each role's command is
``executions/management/commands/nodeflow_<role>.py``.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from executions.roles.loop import Role, stop_on_signals
from nodeflow.process import ready_server_process


class RoleCommand(BaseCommand):
    role_class: type[Role]

    def add_arguments(self, parser) -> None:
        parser.add_argument("--once", action="store_true", help="do all due work, then exit (for tests and cron)")

    def handle(self, *args, once: bool, **options) -> None:
        role = self.role_class()
        if once:
            role.on_start()
            count = role.run_once()
            self.stdout.write(f"{role.name}: {count} unit(s) of work")
            return
        stop_on_signals(role.request_stop)
        ready_server_process()
        role.run()
