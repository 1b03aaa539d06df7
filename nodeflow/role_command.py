"""The management-command shell around a role: signals and ``--once``.

First SIGTERM/SIGINT: finish the current tick and stop. Second: exit at once.
"""
from __future__ import annotations

import os
import signal

from django.core.management.base import BaseCommand

from nodeflow.loop import Role
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

        def on_signal(signum, frame) -> None:
            if role.stop.is_set():
                os._exit(1)  # second signal: do not wait for the tick
            role.request_stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        ready_server_process()
        role.run()
