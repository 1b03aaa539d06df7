"""Real processes for multi-process tests: the stack of ``tools/stack.py``
(the API, deciders, sweepers, each started, SIGKILLed and restarted by
name), plus the suite's worker processes (``tests/procs/worker.py``)."""

from __future__ import annotations

from tools import stack
from tools.stack import PYTHON, ROOT, free_port, inherited_env, live_database_url

__all__ = ["PYTHON", "ROOT", "Stack", "free_port", "inherited_env", "live_database_url"]


class Stack(stack.Stack):
    def add_worker(self, name: str, key: str, *queues: str, url: str | None = None) -> None:
        """A ``tests/procs/worker.py`` process serving ``queues`` (planned faults read from each task's input)."""
        self.add(name, [PYTHON, str(ROOT / "tests" / "procs" / "worker.py"), url or self.url, key, *queues])
