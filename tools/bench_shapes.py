"""The two shapes the benchmark runs Node Flow in, both on PostgreSQL:

- **production**: the API on granian (WSGI, 3 processes × 8 threads) and
  each role a process of its own (decider, sweeper, scheduler, system
  tasks), as docs/deployment.md runs them on one host; kept database
  connections (``CONN_MAX_AGE=600``) and host-local wake-ups
  (``NODE_FLOW_HOST_WAKE``);
- **make run**: one ``manage.py nodeflow_run`` process, the API on waitress
  and every role in a thread, with its own defaults (as ``make run``
  starts it: no ``CONN_MAX_AGE`` or ``NODE_FLOW_HOST_WAKE`` from outside).
"""

from __future__ import annotations

from dataclasses import dataclass

from tools.stack import PYTHON, Stack

SERVER_WORKERS = 3
# Enough for the 16 unbatched pollers; each thread keeps a database
# connection, and a shared PostgreSQL has a connection limit.
SERVER_THREADS = 8
ROLES = [
    ("decider", "nodeflow_decider"),
    ("sweeper", "nodeflow_sweeper"),
    ("scheduler", "nodeflow_scheduler"),
    ("systemtasks", "nodeflow_systemtasks"),
]


def start_production(stack: Stack, *, keep_alive: bool = True) -> None:
    """granian on the stack's port and every role; returns once the API
    answers. ``keep_alive=False`` for the throughput phases: a kept-alive
    connection stays with the server process that accepted it for its
    life, so a few busy clients' connections can all land on one process
    (one GIL) while the others idle. Without keep-alive each request's
    connection goes to whichever process accepts it first, a free one, as
    it would through a proxy that opens a connection per request."""
    stack.add_granian("api", stack.port, workers=SERVER_WORKERS, threads=SERVER_THREADS, keep_alive=keep_alive)
    for name, command in ROLES:
        stack.add_role(name, command)
    stack.wait_for_api()


def start_make_run(stack: Stack) -> None:
    """One ``nodeflow_run`` process: the API and every role."""
    stack.add("nodeflow_run", [PYTHON, "manage.py", "nodeflow_run", "--addr", f"127.0.0.1:{stack.port}"])
    stack.wait_for_api()


@dataclass
class Shape:
    name: str  # "production" or "makeRun", the key of its figures
    label: str  # as the table shows it
    stack: Stack

    def cpu_groups(self) -> dict[str, list[int]]:
        """Its processes for ``bench_cpu.CpuMeter``: the API server (with its
        workers; in ``make run`` the roles too) and the roles' processes."""
        if self.name == "production":
            return {"server": [self.stack.pid("api")], "roles": [self.stack.pid(name) for name, _ in ROLES]}
        return {"server": [self.stack.pid("nodeflow_run")]}

    def start(self, *, keep_alive: bool = True) -> None:
        if self.name == "production":
            start_production(self.stack, keep_alive=keep_alive)
        else:
            start_make_run(self.stack)


def production(database_url: str) -> Shape:
    return Shape(
        "production",
        "Node Flow, production (granian + roles)",
        Stack(database_url, env={"CONN_MAX_AGE": "600", "NODE_FLOW_HOST_WAKE": "true"}),
    )


def make_run(database_url: str) -> Shape:
    stack = Stack(database_url)
    for name in ("CONN_MAX_AGE", "NODE_FLOW_HOST_WAKE"):  # nodeflow_run's own defaults, as `make run` gets them
        stack.env.pop(name, None)
    return Shape("makeRun", "Node Flow, make run (nodeflow_run)", stack)
