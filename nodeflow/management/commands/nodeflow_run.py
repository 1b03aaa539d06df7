"""``manage.py nodeflow_run --addr 127.0.0.1:8000``: the embedded default.

One process serves the API (a threaded WSGI server, so long-polls do not
block each other) and runs every background role in its own thread. The
first SIGTERM/SIGINT stops it cleanly (the roles finish their tick, then
the server shuts down); a second exits at once. Production runs the roles as separate processes
(see docs/deployment.md).
"""

from __future__ import annotations

import logging
import threading

from django.core.management.base import BaseCommand, CommandError
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler, get_internal_wsgi_application

from executions.roles.all_in_one import all_in_one_roles
from executions.roles.loop import stop_on_signals

log = logging.getLogger("nodeflow.run")


def parse_addr(addr: str) -> tuple[str, int, bool]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise CommandError(f"--addr must be host:port, not {addr!r}")
    ipv6 = host.startswith("[")
    return host.strip("[]"), int(port), ipv6


class Command(BaseCommand):
    help = "Run the API and every role in one process (the embedded default)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--addr", default="127.0.0.1:8000", help="host:port to listen on")
        parser.add_argument("--no-roles", action="store_true", help="serve the API only")

    def handle(self, *args, addr: str, no_roles: bool, **options) -> None:
        host, port, ipv6 = parse_addr(addr)
        stop = threading.Event()
        stop_on_signals(stop.set)  # a second signal exits at once
        server = ThreadedWSGIServer((host, port), WSGIRequestHandler, ipv6=ipv6)
        server.daemon_threads = True
        server.set_app(get_internal_wsgi_application())
        threads = [threading.Thread(target=server.serve_forever, name="api", daemon=True)]
        roles = [] if no_roles else all_in_one_roles(stop)
        threads += [threading.Thread(target=role.run, name=role.name, daemon=True) for role in roles]
        for thread in threads:
            thread.start()
        self.stdout.write(
            f"Node Flow listening on http://{addr}/ (roles: {', '.join(r.name for r in roles) or 'none'})"
        )
        stop.wait()
        log.info("stopping")
        for role in roles:
            role.request_stop()
        server.shutdown()
        for thread in threads[1:]:
            thread.join(timeout=10)
        server.server_close()
