"""Wake-ups: "a task is ready in this queue", "an execution wants deciding".

On PostgreSQL a wake-up is a ``NOTIFY`` sent in the transaction that made the
work (delivered when it commits, dropped if it rolls back); each process has
one listener thread that relays notifications to its waiting long-polls. On
SQLite, and within one process, the hub is woken directly after commit; other
processes fall back to re-checking at a short interval. Wake-ups are hints:
the database is always re-read, so a lost one only costs latency.

The system-task role listens on a channel of its own: "a system task is
ready" (``SYSTEM_KEY``) and "a slot or permits that system tasks wait for
were freed" (``system_freed``), which also names what was freed, for the
hooks that act on it (which gates to try first; Celery messages).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Protocol

from django.db import connection, transaction

from nodeflow import transactions

log = logging.getLogger(__name__)

# One channel per kind of listener, so a process hears only what it waits
# for: every notification a listening session receives costs it a (read-only)
# transaction in PostgreSQL.
TASKS_CHANNEL = "nodeflow_tasks"
SYSTEM_CHANNEL = "nodeflow_system"
DECIDE_KEY = "decide"
SYSTEM_KEY = "system"
# A system_freed notification: this prefix, then JSON [namespace id, name, semaphores].
FREED_PREFIX = "freed:"


class Waiter(Protocol):
    """What the hub wakes: a ``threading.Event``, or a hook that acts on ``set``."""

    def set(self) -> None: ...


class Hub:
    """In-process waiters by key; ``wake`` sets every event waiting on a key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[Hashable, set[Waiter]] = {}

    def register(self, key: Hashable) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._waiters.setdefault(key, set()).add(event)
        return event

    def attach(self, key: Hashable, event: Waiter) -> None:
        """Have ``wake(key)`` set a long-lived event (a role's wake-up)."""
        with self._lock:
            self._waiters.setdefault(key, set()).add(event)

    def unregister(self, key: Hashable, event: Waiter) -> None:
        with self._lock:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[key]

    def wake(self, key: Hashable) -> None:
        with self._lock:
            waiters = list(self._waiters.get(key, ()))
        for event in waiters:
            event.set()

    def has_waiters(self) -> bool:
        with self._lock:
            return bool(self._waiters)


hub = Hub()


def queue_key(namespace_id: int, queue: str) -> str:
    return f"q:{namespace_id}:{queue}"


def _send(channel: str, key: str) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [channel, key])
    transaction.on_commit(lambda: _deliver(key))


FreedHook = Callable[[int, str | None, tuple[str, ...]], None]
_freed_hooks: list[FreedHook] = []


def on_system_freed(hook: FreedHook) -> None:
    """Call ``hook(namespace_id, name, semaphores)`` for every ``system_freed``
    this process hears: after its own commits, and relayed from other
    processes by the listener thread (where a hook must not use the
    database)."""
    if hook not in _freed_hooks:
        _freed_hooks.append(hook)


def remove_system_freed(hook: FreedHook) -> None:
    if hook in _freed_hooks:
        _freed_hooks.remove(hook)


def _deliver(key: str) -> None:
    """Wake the waiters of ``key``; a freed notice runs the freed hooks and
    wakes the system-task role."""
    if key.startswith(FREED_PREFIX):
        namespace_id, name, semaphores = json.loads(key[len(FREED_PREFIX) :])
        for hook in list(_freed_hooks):
            try:
                hook(namespace_id, name, tuple(semaphores))
            except Exception:
                log.warning("a system_freed hook failed", exc_info=True)
        key = SYSTEM_KEY
    hub.wake(key)


def task_ready(namespace_id: int, queue: str, kind: str) -> None:
    """Call inside the transaction that made a task dispatchable."""
    if kind == "system":
        _send(SYSTEM_CHANNEL, SYSTEM_KEY)
    else:
        _send(TASKS_CHANNEL, queue_key(namespace_id, queue))


def decider_wakeup() -> None:
    """Wakes decider roles in this process only (see executor.request_decision)."""
    transaction.on_commit(lambda: hub.wake(DECIDE_KEY))


def semaphore_key(namespace_id: int, name: str) -> str:
    return f"s:{namespace_id}:{name}"


def task_freed(namespace_id: int, queue: str, *, capped: bool, semaphores: tuple[str, ...]) -> None:
    """Call inside the transaction that took a worker or system task of the
    task definition ``queue`` out of IN_PROGRESS: pollers waiting for the
    slot (``capped``) or the permits it held try again the moment it commits
    (no fixed postpone). System tasks waiting are woken by ``system_freed``."""
    if capped:
        _send_once(queue_key(namespace_id, queue))
    for name in semaphores:
        _send_once(semaphore_key(namespace_id, name))


def semaphore_freed(namespace_id: int, name: str) -> None:
    """Permits were added or released by hand: wake every queue naming it,
    and the system tasks that may wait for it."""
    _send_once(semaphore_key(namespace_id, name))
    system_freed(namespace_id, None, (name,))


def system_freed(namespace_id: int, name: str | None, semaphores: tuple[str, ...]) -> None:
    """Call inside the transaction that freed a slot of the task definition
    ``name`` (None: none) or permits of ``semaphores``, when system tasks
    may wait for them: when it commits, the system-task role of every
    process tries again at once, and the freed hooks hear what was freed."""
    _send_once(FREED_PREFIX + json.dumps([namespace_id, name, sorted(semaphores)]), SYSTEM_CHANNEL)


def first_in_transaction(key: str) -> bool:
    """True the first time ``key`` is asked in this service transaction
    (``nodeflow.transactions``): for work done once per transaction
    whatever its size."""
    return transactions.first_in_transaction(key)


def _send_once(key: str, channel: str = TASKS_CHANNEL) -> None:
    """``_send``, at most once per key per transaction (a batch of results
    freeing many slots of one queue sends one)."""
    if first_in_transaction(key):
        _send(channel, key)


# --- the PostgreSQL listener ----------------------------------------------


class _Listener(threading.Thread):
    """One LISTEN connection per channel per process, relaying notifications
    to the hub."""

    RECONNECT_S = 1.0

    POLL_S = 0.5  # how soon a stop request is seen

    def __init__(self, channel: str) -> None:
        super().__init__(name=f"nodeflow-listener-{channel}", daemon=True)
        self.channel = channel
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._listen()
            except Exception:
                if self.stopping.is_set():
                    return
                log.warning("notification listener lost its connection; reconnecting", exc_info=True)
                time.sleep(self.RECONNECT_S)

    def _listen(self) -> None:
        import psycopg

        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        params.pop("server_side_binding", None)
        params.pop("prepare_threshold", None)
        with psycopg.connect(**params, autocommit=True) as conn:
            conn.execute(f"LISTEN {self.channel}")
            while not self.stopping.is_set():
                for note in conn.notifies(timeout=self.POLL_S):
                    _deliver(note.payload)


_listener_lock = threading.Lock()
_listeners: dict[str, _Listener] = {}


def ensure_listener(channel: str = TASKS_CHANNEL) -> bool:
    """Start this process's listener for ``channel`` (PostgreSQL only).
    True when one runs."""
    if connection.vendor != "postgresql":
        return False
    with _listener_lock:
        listener = _listeners.get(channel)
        if listener is None or not listener.is_alive():
            _listeners[channel] = listener = _Listener(channel)
            listener.start()
    return True


def stop_listeners() -> None:
    """Stop this process's listeners and close their connections (tests, shutdown)."""
    with _listener_lock:
        listeners = list(_listeners.values())
        _listeners.clear()
    for listener in listeners:
        listener.stopping.set()
    for listener in listeners:
        listener.join(timeout=5)
