"""The live controls of a task definition: concurrentExecLimit, the task
rate limit and semaphores, looked up by the definition's name. Every
dispatchable task names its definition (``Task.task_def_name``: the
workflow task's ``name``, whatever its type); a worker queue is named after
it, so a SIMPLE queue's controls are that definition's, and an HTTP task
naming the same definition shares them.

They are read at dequeue, under the definition's lock, so a change applies
to the very next lease. Two process-local memories make that cheap:
``is_controlled`` lets PostgreSQL skip the one-statement fast path for
queues known to have controls, and ``cached_controls`` (up to
``HINT_CACHE_S`` old) serves wake-ups and diagnostics, which are hints;
a task-definition change clears it in the process that made it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from metadata.models import TaskDefinition

HINT_CACHE_S = 1.0
_MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class Controls:
    concurrent_exec_limit: int = 0
    rate_limit: int = 0
    rate_window_s: float = 0.0
    semaphores: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.concurrent_exec_limit or self.rate_limited or self.semaphores)

    @property
    def rate_limited(self) -> bool:
        return self.rate_limit > 0 and self.rate_window_s > 0


NONE = Controls()


def read_controls(*, namespace_id: int, name: str) -> Controls:
    """The controls of the task definition ``name`` as committed now (one
    indexed lookup)."""
    row = (
        TaskDefinition.objects.filter(namespace_id=namespace_id, name=name)
        .values_list("concurrent_exec_limit", "rate_limit_per_frequency", "rate_limit_frequency_seconds", "semaphores")
        .first()
    )
    # A name without a task definition has no controls: remembered too, or
    # every result of such a task would read them again (gate.task_left).
    found = NONE
    if row is not None:
        cap, rate, window, semaphores = row
        found = Controls(cap or 0, rate or 0, float(window or 0), tuple(sorted(semaphores or ())))
    remember(namespace_id, name, found)
    return found


_lock = threading.Lock()
_cache: dict[tuple[int, str], tuple[float, Controls]] = {}


def remember(namespace_id: int, name: str, controls: Controls) -> None:
    with _lock:
        if len(_cache) > _MAX_ENTRIES:
            _cache.clear()
        _cache[(namespace_id, name)] = (time.monotonic(), controls)


def cached_controls(*, namespace_id: int, name: str) -> Controls:
    """At most ``HINT_CACHE_S`` old: for hints (wake-ups, the queue view)."""
    hit = _cache.get((namespace_id, name))
    if hit is not None and time.monotonic() - hit[0] < HINT_CACHE_S:
        return hit[1]
    return read_controls(namespace_id=namespace_id, name=name)


def is_controlled(namespace_id: int, name: str) -> bool:
    """Whether this process last saw controls on the definition (any age):
    only chooses which dequeue path to try first, never what it allows."""
    hit = _cache.get((namespace_id, name))
    return hit is not None and hit[1].any


_forget_hooks: list[Callable[[], None]] = []


def on_forget(hook: Callable[[], None]) -> None:
    """Have ``forget`` clear another memory drawn from controls (the
    system-task groups a gate held back, executions.dispatch)."""
    if hook not in _forget_hooks:
        _forget_hooks.append(hook)


def forget() -> None:
    """Forget every control seen (a task definition changed, or tests)."""
    with _lock:
        _cache.clear()
    for hook in list(_forget_hooks):
        hook()
