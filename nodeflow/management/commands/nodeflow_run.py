"""``manage.py nodeflow_run --addr 127.0.0.1:8000``: the embedded default.

One process serves the API and runs every background role in its own
thread. The API is served by waitress, a production WSGI server: a bounded
pool of ``--threads`` request threads (each keeps its database connection
between requests: CONN_MAX_AGE is 60 here unless set), HTTP keep-alive
answered without the 40 ms Nagle/delayed-ACK stall Django's development
server had on every kept-alive request (TCP_NODELAY; headers and body in
one write), and long-polls that hold one thread each while they wait.

On PostgreSQL a task made ready wakes the long-polls through the host
(``executions.host_wake``; NODE_FLOW_HOST_WAKE is on here unless set), not
by a ``NOTIFY`` that this process's listening session and its system-task
role's would each read in a transaction of its own: the one process is on
one host by definition.

The first SIGTERM/SIGINT stops it cleanly (the roles finish their tick,
requests in flight are answered, then it exits); a second exits at once.
Production runs the roles as separate processes (docs/deployment.md).
"""

from __future__ import annotations

import logging
import os
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.core.servers.basehttp import get_internal_wsgi_application
from django.db import connections
from waitress.server import create_server

from executions.roles.all_in_one import all_in_one_roles
from executions.roles.loop import stop_on_signals

log = logging.getLogger("nodeflow.run")

# Request threads: every long-poll parked in a wait holds one.
DEFAULT_THREADS = 16
# A request thread keeps its database connection this long (CONN_MAX_AGE unset).
KEEP_CONNECTIONS_S = 60
# How long a stop waits for requests in flight (a parked long-poll is woken by nothing).
DRAIN_S = 5.0


def parse_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise CommandError(f"--addr must be host:port, not {addr!r}")
    return host.strip("[]"), int(port)


def keep_connections(conn_max_age_set: bool) -> None:
    """Request threads are a bounded pool here, so each may keep its
    database connection instead of connecting per request."""
    if not conn_max_age_set:
        connections.settings["default"]["CONN_MAX_AGE"] = KEEP_CONNECTIONS_S


def wake_through_host(host_wake_set: bool) -> None:
    """Its long-polls are woken through the host (``executions.host_wake``)
    unless NODE_FLOW_HOST_WAKE says otherwise: set it to false where other
    server processes of the database run on other hosts (docs/deployment.md)."""
    if not host_wake_set:
        settings.NODE_FLOW_HOST_WAKE = True


class Command(BaseCommand):
    help = "Run the API and every role in one process (the embedded default)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--addr", default="127.0.0.1:8000", help="host:port to listen on")
        parser.add_argument(
            "--threads", type=int, default=DEFAULT_THREADS, help="request threads (long-polls hold one)"
        )
        parser.add_argument("--no-roles", action="store_true", help="serve the API only")

    def handle(self, *args, addr: str, threads: int, no_roles: bool, **options) -> None:
        host, port = parse_addr(addr)
        if threads < 1:
            raise CommandError("--threads must be at least 1")
        keep_connections("CONN_MAX_AGE" in os.environ)
        wake_through_host("NODE_FLOW_HOST_WAKE" in os.environ)
        stop = threading.Event()
        stop_on_signals(stop.set)  # a second signal exits at once
        server = create_server(
            get_internal_wsgi_application(),
            host=host,
            port=port,
            threads=threads,
            ident="nodeflow",
            clear_untrusted_proxy_headers=True,
        )
        roles = [] if no_roles else all_in_one_roles(stop)
        workers = [threading.Thread(target=server.run, name="api", daemon=True)]
        workers += [threading.Thread(target=role.run, name=role.name, daemon=True) for role in roles]
        for worker in workers:
            worker.start()
        names = ", ".join(role.name for role in roles) or "none"
        self.stdout.write(f"Node Flow listening on http://{addr}/ (roles: {names}; {threads} request threads)")
        stop.wait()
        log.info("stopping")
        for role in roles:
            role.request_stop()
        for worker in workers[1:]:
            worker.join(timeout=10)
        server.task_dispatcher.shutdown(timeout=DRAIN_S)
        server.close()
