"""Wake-ups: "a task is ready in this queue", "an execution wants deciding".

On PostgreSQL a wake-up is a ``NOTIFY`` sent in the transaction that made the
work (delivered when it commits, dropped if it rolls back); each process has
one listener thread that relays notifications to its waiting long-polls. On
SQLite, and within one process, the hub is woken directly after commit; other
processes fall back to re-checking at a short interval. Wake-ups are hints:
the database is always re-read, so a lost one only costs latency.

A task made ready wakes one parked long-poll, not every one (``Parked``):
the ready notice carries how many tasks it made ready, and wakes that many
pollers at most, the longest parked first. On PostgreSQL every process
keeps the same list of the parked pollers of every process, from the
stream of notices itself: a poll that parks says so in its own (empty)
lease statement, one that leaves after leasing without being woken says so
in that lease, and every process sees the notices in the one commit order,
so all of them pick the same pollers for a ready notice and only the
picked ones' processes wake them. No wake-up is spent on a poller another
process woke for the same task; a woken poller whose lease still finds
nothing (a fresh poll took the task first) parks again. On SQLite, and for
pollers of one process, the list is the process's own.

The system-task role listens on a channel of its own: "a system task is
ready" (``SYSTEM_KEY``) and "a slot or permits that system tasks wait for
were freed" (``system_freed``), which also names what was freed, for the
hooks that act on it (which gates to try first; Celery messages).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.db import connection, transaction

from executions import host_wake
from nodeflow import transactions

log = logging.getLogger(__name__)

# One channel per kind of listener, so a process relays only what it waits
# for. That does not spare the database: PostgreSQL signals every session
# listening in the database at each commit that sends notifications,
# whatever their channel, and each reads them in a (read-only) transaction
# of its own (docs/performance.md, session 29). Hence a process listens to
# the task channel only while it has pollers, and a transaction's notices
# go in one statement with its commit.
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
    wakes the system-task role; a ready, park or leave notice goes to
    ``parked``."""
    if key[:2] in _PARKED_NOTICES:
        parked.hear(key)
        return
    if key.startswith(FREED_PREFIX):
        namespace_id, name, semaphores = json.loads(key[len(FREED_PREFIX) :])
        for hook in list(_freed_hooks):
            try:
                hook(namespace_id, name, tuple(semaphores))
            except Exception:
                log.warning("a system_freed hook failed", exc_info=True)
        key = SYSTEM_KEY
    hub.wake(key)


def task_ready(namespace_id: int, queue: str, kind: str, count: int = 1) -> None:
    """Call inside the transaction that made ``count`` tasks of a queue
    dispatchable: at most that many parked pollers wake when it commits.
    In a service transaction the count is sent once, at its end, less the
    tasks of the queue it leased itself (``leased``: a result that leases
    the next step it made ready wakes no one)."""
    if kind == "system":
        _send(SYSTEM_CHANNEL, SYSTEM_KEY)
        return
    key = queue_key(namespace_id, queue)
    ready = transactions.pending(READY, _send_ready)
    if ready is None:
        _send_ready({key: count})
    else:
        ready[key] = ready.get(key, 0) + count


def leased(namespace_id: int, queue: str, count: int) -> None:
    """``count`` tasks of a queue were leased in this transaction: its ready
    notice (if it made any ready) counts that many fewer."""
    ready = transactions.pending(READY, _send_ready)
    key = queue_key(namespace_id, queue)
    if ready and key in ready:
        ready[key] -= count
        if ready[key] <= 0:
            del ready[key]


def _send_ready(ready: dict[str, int]) -> None:
    _meet(ready)  # less what it handed to this process's parked pollers
    if not ready:
        return
    if host_wake.enabled():  # through the host, not a notice every listening session reads
        made_ready = dict(ready)
        transaction.on_commit(lambda: host_wake.wake(made_ready))
        return
    notices = [f"{READY}{key}|{count}|{PROCESS}.{next(_sent)}" for key, count in ready.items()]
    if connection.vendor == "postgresql":
        announce(*notices, with_commit=True)  # heard by every listener, this process's too, in commit order
    else:
        transaction.on_commit(lambda: _hear_all(notices))


def _hear_all(notices: list[str]) -> None:
    for notice in notices:
        parked.hear(notice)


def announce(*notices: str, with_commit: bool = False) -> None:
    """Send notices on the task channel in the caller's transaction, in one
    statement (PostgreSQL): ready notices, and a long-poll's park or leave
    notice (``attempts.lease_queue``). ``with_commit``: in the same round
    trip as the service transaction's COMMIT (``transactions.with_commit``),
    where there is one."""
    calls = ", ".join("pg_notify(%s, %s)" for _ in notices)
    params = [value for notice in notices for value in (TASKS_CHANNEL, notice)]
    if with_commit and transactions.with_commit(calls, params):
        return
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {calls}", params)


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


# --- sync match ------------------------------------------------------------------
# A service transaction that made tasks of a queue ready, in a process where
# a long-poll of that queue is parked, leases them for that poll before it
# commits (as Temporal's matching service hands a new task to a waiting
# poller: a "sync match"), and the poll answers with them once it commits:
# no ready notice, no wake-up, no lease transaction of the poll's own. The
# lease is the poll's (its worker id, its count), taken through the same
# path and gate as every lease (the hook ``dispatch`` registers), so every
# control holds. Only while no other process listens: then this process's
# list of parked pollers is its own, and no other process's copy of it
# goes stale. A rolled-back transaction hands nothing; the poll looks again.
Leaser = Callable[[Any], list]  # a parked poll's ask → the tasks leased for it, in the caller's transaction
Matchable = Callable[[Any], bool]  # whether a sync match may lease for a poll with this ask
_matcher: tuple[Matchable, Leaser] | None = None


def on_sync_match(matchable: Matchable, lease: Leaser) -> None:
    """``lease(ask)`` leases for a parked poll (its ``ask``, given to
    ``Parked.begin``) in the transaction that made its queue's tasks ready,
    where ``matchable(ask)``."""
    global _matcher
    _matcher = (matchable, lease)


def _meet(ready: dict[str, int]) -> None:
    """Hand tasks of ``ready`` (queue key → how many became ready, in the
    current service transaction) to this process's parked polls of those
    queues, one poll at a time; what they leased is taken off ``ready``
    (``leased``)."""
    if _matcher is None or not transactions.active():
        return
    matchable, lease = _matcher
    for key in list(ready):
        while ready.get(key, 0) > 0:
            claimed = parked.claim(key, matchable)
            if claimed is None:
                break
            poller_id, poller = claimed
            transactions.after(functools.partial(parked.settle, poller_id))
            poller.handed = lease(poller.ask)
            if not poller.handed:
                break  # nothing it may lease now: the rest wait for the notice


# --- one wake-up per ready task ------------------------------------------------
# Notices on TASKS_CHANNEL, besides plain keys (which wake every waiter: a
# freed slot or permit, which the pollers a control holds back wait for):
#   r|<queue key>|<count>|<unique>   count tasks of the queue became ready
#   p|<poller>|<queue key>|<until>   a poller parked, until then (epoch s)
#   l|<poller>                       a parked poller left, having leased
#   c|<process>                      a process began to listen: every other
#                                    one parks its listed pollers again
#   h|<process>                      the answer to a census: it listens too
#   u|<process>                      a process stopped listening (no pollers)
READY, PARK, LEAVE, CENSUS, HERE, UNLISTENED = "r|", "p|", "l|", "c|", "h|", "u|"
_PARKED_NOTICES = frozenset({READY, PARK, LEAVE, UNLISTENED})
PROCESS = f"{os.getpid()}-{secrets.token_hex(3)}"
Epoch = tuple[int, int]  # (generation, ready notices heard of one queue key, or its host mark)
PollEvent = threading.Event | host_wake.Waiter  # what a long-poll waits on (``Parked.waiter``)
_MAX_KEYS = 10_000  # queue keys counted and marked empty, at most
_sent = itertools.count()
_pollers = itertools.count()


def _set_event() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


@dataclass
class _Poller:
    key: str
    until: float  # time.time() it gives up by
    event: PollEvent | None = None  # this process's pollers only
    woken: bool = False  # picked for a ready notice (no longer listed anywhere)
    ask: Any = None  # what a sync match leases for it (``on_sync_match``); this process's pollers only
    parked: bool = False  # waiting (between ``park`` and ``unpark``): it may be matched
    handed: list | None = None  # what a sync match's transaction leased for it, once it committed
    settled: threading.Event = field(default_factory=_set_event)  # clear while a sync match's transaction runs

    @property
    def host(self) -> host_wake.Waiter | None:
        """Its waiter when host-local wake-ups wake it (listed in the host's registry)."""
        return self.event if isinstance(self.event, host_wake.Waiter) else None

    def park_notice(self, poller_id: str) -> str:
        """``p|id|key|until``: lists the poller in every process that hears it."""
        return f"{PARK}{poller_id}|{self.key}|{self.until:.3f}"


class Parked:
    """The parked long-polls of every queue, longest parked first; a ready
    notice picks as many as it made tasks ready, and wakes those of them
    that are this process's. On PostgreSQL each process builds the same
    list from the notices (``hear``); on SQLite, or without a listener,
    this process's pollers only, listed directly (``park``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listed: dict[str, dict[str, _Poller]] = {}  # queue key → poller id → poller, in park order
        self._local: dict[str, _Poller] = {}  # this process's pollers, parked or about to be
        self._others: set[str] = set()  # the other processes listening, as the notices say
        self._idle_since = time.monotonic()  # when this process's last poller ended
        self.wanted = threading.Event()  # a poller began: the listener should be listening
        # Queues known empty (``known_empty``): the ready notices heard per
        # queue key since this process last began to hear them
        # (``_generation``), and per key the count a look that found nothing
        # more to lease began at, and when (time.monotonic()).
        self._generation = 0
        self._readies: dict[str, int] = {}
        self._empty: dict[str, tuple[Epoch, float]] = {}

    # --- this process's pollers ------------------------------------------
    @staticmethod
    def waiter() -> PollEvent:
        """What a poll waits on: with host-local wake-ups a socket that any
        process of the host can wake, else an event of this process."""
        return host_wake.Waiter() if host_wake.enabled() else threading.Event()

    def begin(self, key: str, until: float, event: PollEvent, ask: Any = None) -> str:
        """A poll of ``key`` that may park; its id names it in the notices.
        ``ask``: what a sync match leases for it (None: it is never matched)."""
        poller_id = f"{PROCESS}.{next(_pollers)}"
        with self._lock:
            self._local[poller_id] = _Poller(key, until, event, ask=ask)
            self.wanted.set()
        return poller_id

    def park(self, poller_id: str, epoch: Epoch) -> str:
        """List a poller of this process directly (SQLite, or no other
        process listening: no notices). Should another process have begun
        to listen since the poller looked (its census answered without this
        poller, not listed yet), it is not listed here: the park notice
        to send instead, which lists it everywhere. With host-local
        wake-ups it is listed in the host's registry, and set at once if
        its queue was marked ready since ``epoch`` (read before it looked)."""
        with self._lock:
            poller = self._local.get(poller_id)
            if poller is None:
                return ""
            if (waiter := poller.host) is not None:
                poller.woken, poller.parked = False, True
                waiter.park(poller.key)
                if self._epoch(poller.key) != epoch:
                    waiter.set()  # made ready meanwhile: look again
                return ""
            if self._others and poller_id not in self._listed.get(poller.key, {}):
                return poller.park_notice(poller_id)
            poller.woken = False
            poller.parked = True
            self._listed.setdefault(poller.key, {})[poller_id] = poller
            return ""

    def claim(self, key: str, matchable: Callable[[Any], bool]) -> tuple[str, _Poller] | None:
        """This process's longest-parked poll of ``key`` that a sync match
        may lease for (``matchable(ask)``), taken off the list; None if there
        is none, or while another process listens (its list would go stale),
        unless with host-local wake-ups (the host's registry is the list)."""
        now = time.time()
        with self._lock:
            host = host_wake.enabled()
            if self._others and not host:
                return None
            # With host-local wake-ups the parked polls are the host's: this
            # process's own, each claimed in the registry (another process's
            # waker may have taken it first).
            listed = {p: q for p, q in self._local.items() if q.key == key} if host else self._listed.get(key, {})
            for poller_id, poller in listed.items():
                if poller.ask is None or not poller.parked or poller.until < now:
                    continue
                if not matchable(poller.ask):
                    return None  # every poll of one key asks of the same queue
                if host and not ((waiter := poller.host) is not None and waiter.unpark()):
                    continue  # another process's waker took it: it looks again anyway
                if not host:
                    del listed[poller_id]
                    if not listed:
                        self._listed.pop(key, None)
                poller.parked, poller.woken, poller.handed = False, True, None
                poller.settled.clear()
                return poller_id, poller
        return None

    def settle(self, poller_id: str, committed: bool) -> None:
        """The transaction that claimed the poll ended: what it leased is the
        poll's if it committed (nothing if it rolled back); the poll wakes."""
        with self._lock:
            poller = self._local.get(poller_id)
            if poller is None:
                return
            if not committed:
                poller.handed = None
            poller.settled.set()
            event = poller.event
        if event is not None:
            event.set()

    def unpark(self, poller_id: str, wait_s: float) -> list:
        """The poll stops waiting (woken, or its wait is up): it may no longer
        be matched. What a sync match handed it, once the transaction that
        claimed it has ended (waiting up to ``wait_s`` for that)."""
        with self._lock:
            poller = self._local.get(poller_id)
            if poller is None:
                return []
            poller.parked = False
            if (waiter := poller.host) is not None and not waiter.unpark():
                self._empty.pop(poller.key, None)  # woken for a task: look, whatever the mark says
        if not poller.settled.wait(wait_s):
            # Its lease, if that transaction commits, runs out and the task is offered again.
            log.warning("a sync match's transaction did not end within %.0f s; the poll answers without it", wait_s)
        with self._lock:
            handed, poller.handed = poller.handed or [], None
        return handed

    def end(self, poller_id: str) -> None:
        """The poll returns: forget it here (other processes drop it when it
        leaves or its time is up)."""
        with self._lock:
            poller = self._local.pop(poller_id, None)
            if poller is not None:
                self._listed.get(poller.key, {}).pop(poller_id, None)
                if (waiter := poller.host) is not None:
                    waiter.close()
            if not self._local:
                self._idle_since = time.monotonic()

    # --- the notices -------------------------------------------------------
    def hear(self, notice: str) -> None:
        kind, rest = notice[:2], notice[2:]
        if kind == UNLISTENED:
            with self._lock:
                self._others.discard(rest)
                for listed in self._listed.values():
                    for poller_id in [p for p in listed if p.startswith(rest + ".")]:
                        del listed[poller_id]
        elif kind == PARK:
            poller_id, key, until = rest.split("|")
            self._listed_park(poller_id, key, float(until))
        elif kind == LEAVE:
            with self._lock:
                for listed in self._listed.values():
                    listed.pop(rest, None)
        elif kind == READY:
            key, count, _ = rest.split("|")
            for event in self.ready(key, int(count)):
                event.set()

    def _listed_park(self, poller_id: str, key: str, until: float) -> None:
        with self._lock:
            process = poller_id.rpartition(".")[0]
            if process != PROCESS:
                self._others.add(process)
            listed = self._listed.setdefault(key, {})
            listed.pop(poller_id, None)  # parked again: to the back
            poller = self._local.get(poller_id) or _Poller(key, until)
            poller.woken, poller.until = False, until
            listed[poller_id] = poller

    def ready(self, key: str, count: int) -> list[PollEvent]:
        """Pick up to ``count`` pollers of ``key``, longest parked first
        (the same in every process); the events of this process's picks.
        Were fewer listed than tasks made ready, this process's pollers of
        ``key`` not listed yet (their park is on its way) are woken too."""
        now = time.time()
        events = []
        with self._lock:
            self._heard_ready(key)
            listed = self._listed.get(key, {})
            picked = 0
            for poller_id in list(listed):
                if picked >= count:
                    break
                poller = listed.pop(poller_id)
                if poller.until < now:
                    continue  # gave up already
                picked += 1
                poller.woken = True
                if poller.event is not None:
                    events.append(poller.event)
            if picked < count:
                for poller_id, poller in self._local.items():
                    if picked >= count:
                        break
                    if poller.key == key and poller_id not in listed and not poller.woken and poller.event:
                        picked += 1
                        poller.woken = True
                        events.append(poller.event)
            if not listed:
                self._listed.pop(key, None)
        return events

    def notices(self, poller_id: str) -> tuple[str, str]:
        """(park, leave): what this poller's next lease statement says of it,
        on PostgreSQL: ``park`` if it leases nothing (it waits; '' when a
        park of it is listed already), ``leave`` if it leases something
        while listed. While no other process listens there is no one to
        tell: both are '', and the poller is listed here (``park``)."""
        with self._lock:
            poller = self._local.get(poller_id)
            if poller is None or not self._others or poller.host is not None:
                return "", ""
            listed = poller_id in self._listed.get(poller.key, {})
        park = "" if listed else poller.park_notice(poller_id)
        return park, (f"{LEAVE}{poller_id}" if listed else "")

    def waiting(self, key: str) -> int:
        """How many of this process's polls of ``key`` are parked (a sync match may lease for them)."""
        with self._lock:
            return sum(1 for poller in self._local.values() if poller.key == key and poller.parked)

    def listed(self, key: str) -> int:
        """How many pollers of ``key`` are listed (every process's, as heard
        here; with host-local wake-ups, as the host's registry lists them)."""
        if host_wake.enabled():
            return host_wake.parked(key)
        with self._lock:
            return len(self._listed.get(key, {}))

    # --- listening --------------------------------------------------------
    def heard_listener(self, process: str, *, census: bool) -> list[str]:
        """Another process listens: it began to (a census, answered with
        ``h|`` so it knows this one listens too) or answered this one's
        census. From now on parks are told; the park notices of this
        process's listed pollers, which it may not have heard."""
        with self._lock:
            self._others.add(process)
        return ([HERE + PROCESS] if census else []) + self.roll_call()

    def began_listening(self) -> list[str]:
        """This process (again) hears the notices: what it had listed may be
        stale. Its own pollers' park notices, to list them everywhere."""
        with self._lock:
            self._listed.clear()
            self._others.clear()
            self._forget_empty()
            return [poller.park_notice(poller_id) for poller_id, poller in self._local.items()]

    def idle_for(self, seconds: float) -> bool:
        """Whether this process has had no poller for ``seconds``; if so the
        listener stops listening (every notice it hears costs the database a
        transaction) until the next poller begins."""
        with self._lock:
            if self._local or time.monotonic() - self._idle_since < seconds:
                return False
            self.wanted.clear()
            self._listed.clear()
            self._others.clear()
            self._forget_empty()
            return True

    def roll_call(self) -> list[str]:
        """Park notices of this process's listed pollers, for a process that
        began to listen after they parked."""
        with self._lock:
            return [
                poller.park_notice(poller_id)
                for poller_id, poller in self._local.items()
                if poller_id in self._listed.get(poller.key, {})
            ]

    def clear(self) -> None:
        with self._lock:
            self._listed.clear()
            self._local.clear()
            self._forget_empty()

    # --- queues known empty -------------------------------------------------
    # A poll that comes back at once (a worker polls again for its free slots
    # after a lease) would look in a transaction that finds nothing when the
    # last look of its queue found nothing more and no ready notice of it has
    # been heard since (a sync match hands its tasks over without one). Such
    # a poll parks without looking, where this process hears every ready
    # notice of the queue: on PostgreSQL while it listens, on SQLite (its own
    # notices only) within the re-check that finds other processes' tasks
    # anyway. A mark is trusted for one re-check's time, so tasks made ready
    # without a notice (a retry's delay ending) are found as soon as before.
    def epoch(self, key: str) -> Epoch:
        """Read before a look; ``saw_empty`` takes it back."""
        with self._lock:
            return self._epoch(key)

    def _epoch(self, key: str) -> Epoch:
        """The ready notices heard of ``key``; with host-local wake-ups,
        when the host last marked it ready (``host_wake.mark``)."""
        if host_wake.enabled():
            return self._generation, host_wake.mark(key)
        return self._generation, self._readies.get(key, 0)

    def saw_empty(self, key: str, epoch: Epoch, looked_at: float) -> None:
        """A look that began at ``epoch`` (and ``looked_at``, time.monotonic())
        found nothing more to lease of ``key``."""
        with self._lock:
            if epoch == self._epoch(key):
                if len(self._empty) > _MAX_KEYS:
                    self._empty.clear()
                self._empty[key] = (epoch, looked_at)

    def known_empty(self, key: str, trust_s: float) -> float:
        """For how many more seconds ``key`` is known empty (0: it is not):
        a look found nothing more less than ``trust_s`` ago, and no ready
        notice of it has been heard since."""
        with self._lock:
            mark = self._empty.get(key)
            if mark is None or mark[0] != self._epoch(key):
                return 0.0
            return max(0.0, trust_s - (time.monotonic() - mark[1]))

    def _heard_ready(self, key: str) -> None:
        if len(self._readies) > _MAX_KEYS:
            self._forget_empty()
        self._readies[key] = self._readies.get(key, 0) + 1
        self._empty.pop(key, None)

    def _forget_empty(self) -> None:
        """Notices may have gone unheard: no queue is known empty."""
        self._generation += 1
        self._readies.clear()
        self._empty.clear()


parked = Parked()


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
        self.listening = threading.Event()  # LISTEN is in effect: its notices reach this process
        self.backend_pid: int | None = None  # its session's, in PostgreSQL (pg_stat_activity)

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._listen()
            except Exception:
                self.listening.clear()  # until a new connection listens again
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
        # A new connection (the first, or one after a lost one) listens to nothing yet.
        self.listening.clear()
        with psycopg.connect(**params, autocommit=True) as conn:
            self.backend_pid = conn.info.backend_pid
            if self.channel != TASKS_CHANNEL:
                conn.execute(f"LISTEN {self.channel}")
                self.listening.set()
            while not self.stopping.is_set():
                if self.channel == TASKS_CHANNEL and not self._tasks_listening(conn):
                    continue
                answers: list[str] = []
                # One packet at a time (stop_after), whole: a census is
                # answered at once, and breaking off a packet would lose the
                # rest of it.
                for note in conn.notifies(timeout=self.POLL_S, stop_after=1):
                    kind, process = note.payload[:2], note.payload[2:]
                    if kind not in (CENSUS, HERE):
                        _deliver(note.payload)
                    elif process != PROCESS:
                        answers += parked.heard_listener(process, census=kind == CENSUS)
                self._send(conn, answers)  # parked again, in every process's list

    def _tasks_listening(self, conn) -> bool:
        """The task channel is listened to only while this process has
        pollers (and IDLE_UNLISTEN_S after): every notice a listening
        session hears costs the database a transaction. On LISTEN it asks
        the others to say which of their pollers are parked (a census) and
        says which of its own are; after UNLISTEN it says it left."""
        if not self.listening.is_set():
            if not parked.wanted.wait(self.POLL_S):
                return False
            conn.execute(f"LISTEN {self.channel}")
            self._send(conn, [CENSUS + PROCESS, *parked.began_listening()])
            self.listening.set()
        elif parked.idle_for(IDLE_UNLISTEN_S):
            self.listening.clear()
            conn.execute(f"UNLISTEN {self.channel}")
            self._send(conn, [UNLISTENED + PROCESS])
            return False
        return True

    def _send(self, conn, notices: list[str]) -> None:
        for notice in notices:
            conn.execute("SELECT pg_notify(%s, %s)", [self.channel, notice])


LISTEN_START_S = 2.0
# A process with no poller this long stops listening to the task channel.
IDLE_UNLISTEN_S = 5.0
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
    # A poll that parked before LISTEN took effect would not hear its own park.
    listener.listening.wait(LISTEN_START_S)
    return True


def hears_tasks() -> bool:
    """Whether this process's listener listens to the task channel now."""
    listener = _listeners.get(TASKS_CHANNEL)
    return listener is not None and listener.listening.is_set()


def hears_ready() -> bool:
    """Whether this process learns of every task made ready on PostgreSQL:
    its listener listens to the task channel, or ready tasks are marked on
    the host (``host_wake``)."""
    return host_wake.enabled() or hears_tasks()


def stop_listeners() -> None:
    """Stop this process's listeners and close their connections (tests, shutdown)."""
    with _listener_lock:
        listeners = list(_listeners.values())
        _listeners.clear()
    for listener in listeners:
        listener.stopping.set()
    for listener in listeners:
        listener.join(timeout=5)
    parked.clear()
    parked.wanted.clear()
