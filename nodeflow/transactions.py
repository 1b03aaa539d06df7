"""The outermost transaction of a service call, and what is done once in it.

A service (a start, a task result, a timer's firing, a role's tick, an
operator's change) opens one transaction, ``outermost()``: durable, so
Django refuses to open it inside another, and a service can never be folded
into a caller's transaction by accident (its commit is its promise: what it
answers has been written). What it calls nests plain ``atomic()``
savepoints. Side effects that must wait for the commit (notifications, a
decision made right after) go through ``transaction.on_commit``.

``first_in_transaction`` scopes work done once per service transaction (one
wake-up per key however many rows a batch frees), ``pending`` gathers what
is sent once at its end, just before the commit (how many tasks of each
queue it made ready, less those it leased itself), and ``after`` is told
once it has ended whether it committed: a ContextVar set and reset around
the block, whether it commits or rolls back, so no stale key outlives a
rollback. Only Django's public API is used, and psycopg's public one for
what runs before the transaction begins (``before_begin``, ``on_its_own``).

On PostgreSQL the transaction begins with its first statement (psycopg
sends ``BEGIN`` then, a round trip of its own). A service whose first
statements only read, and whose writes are all held to its end (rows,
``sql.insert``; notices, ``with_commit``), need not begin one at all: its
reads run on their own (``before_begin``: under READ COMMITTED each
statement of a transaction takes its own snapshot anyway, and a read takes
no lock a later statement relies on), and what it writes goes as one
statement on its own, which PostgreSQL runs as a transaction of its own
(``on_its_own``). A start of a namespace with no start quota and no keys
is two round trips, not four. The first statement that writes or locks
begins the transaction as usual.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from psycopg.pq import TransactionStatus

_IDLE = TransactionStatus.IDLE


@dataclass
class _Scope:
    done: set[str] = field(default_factory=set)
    # name → (what is gathered, what sends it before the commit), in the order first asked
    pending: dict[str, tuple[dict, Callable[[dict], None]]] = field(default_factory=dict)
    # called once the transaction has ended, with whether it committed
    after: list[Callable[[bool], None]] = field(default_factory=list)
    # names of ``pending`` flushed after the others (``pending(last=True)``)
    flushed_last: list[str] = field(default_factory=list)
    # key → what was read once in this transaction (``once``)
    read: dict[str, Any] = field(default_factory=dict)
    # calls made with the COMMIT, in one round trip (``with_commit``)
    last: list[tuple[str, list]] = field(default_factory=list)


_scope: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("nodeflow_transaction_scope", default=None)


@contextmanager
def outermost() -> Iterator[None]:
    """``transaction.atomic(durable=True)``, scoping ``first_in_transaction``,
    ``pending`` (whose flushes run at the end of the block, inside the
    transaction, unless it raised) and ``after`` (told, once it has ended,
    whether it committed)."""
    scope = _Scope()
    committed = False
    try:
        with transaction.atomic(durable=True):
            token = _scope.set(scope)
            try:
                yield
                _flush_pending(scope)
                if scope.last:
                    _send_last(scope.last)
            finally:
                _scope.reset(token)
        committed = True
    finally:
        for callback in scope.after:
            callback(committed)


def _flush_pending(scope: _Scope) -> None:
    """Hand each ``pending`` dict to its flush, in order (those asked with
    ``last`` after the others), including any that a flush itself asks."""
    flushed: set[str] = set()
    while names := [name for name in scope.pending if name not in flushed]:
        name = min(names, key=scope.flushed_last.__contains__)  # the first not asked with ``last``, if any
        flushed.add(name)
        gathered, flush = scope.pending[name]
        if gathered:
            flush(gathered)


def first_in_transaction(key: str) -> bool:
    """True the first time ``key`` is asked inside this ``outermost()``
    transaction; always True outside one (the work is then merely repeated)."""
    scope = _scope.get()
    if scope is None:
        return True
    if key in scope.done:
        return False
    scope.done.add(key)
    return True


def once[T](key: str, read: Callable[[], T]) -> T:
    """``read()`` the first time ``key`` is asked inside this ``outermost()``
    transaction, what it gave after that; every time outside one. For what
    a service reads again and again in one transaction (each start of a
    bulk start reads its workflow's published snapshot and the namespace's
    quotas): read once, as one statement of the transaction would see it.
    A read inside a savepoint that rolls back stays good (it wrote nothing)."""
    scope = _scope.get()
    if scope is None:
        return read()
    if key not in scope.read:
        scope.read[key] = read()
    return scope.read[key]


def once_together(keys: tuple[str, ...], read: Callable[[], tuple]) -> None:
    """What ``keys`` name, read by one ``read()`` (their values, in order)
    for ``once`` to give, unless this ``outermost()`` transaction has read
    them all already; nothing outside one (each ``once`` then reads its own).
    For reads a service makes one after another that one statement can
    make: a round trip fewer."""
    scope = _scope.get()
    if scope is None or all(key in scope.read for key in keys):
        return
    for key, value in zip(keys, read(), strict=True):
        scope.read.setdefault(key, value)


def active() -> bool:
    """Whether the caller runs inside an ``outermost()`` transaction."""
    return _scope.get() is not None


def after(callback: Callable[[bool], None]) -> bool:
    """Call ``callback(committed)`` once this ``outermost()`` transaction
    has ended, committed or rolled back (Django's ``on_commit`` says nothing
    of a rollback). False outside one: nothing is registered."""
    scope = _scope.get()
    if scope is None:
        return False
    scope.after.append(callback)
    return True


def with_commit(call: str, params: list) -> bool:
    """Make ``call`` (an expression evaluated for what it does and returning
    nothing the caller needs: ``pg_notify(%s, %s)``) at the end of this
    ``outermost()`` transaction, after every ``pending`` flush, in the same
    round trip as its ``COMMIT`` (PostgreSQL), or in its one statement on
    its own (``take_with_commit``). False outside one: the caller makes it
    itself."""
    scope = _scope.get()
    if scope is None:
        return False
    scope.last.append((call, params))
    return True


def take_with_commit() -> tuple[str, list]:
    """The calls of ``with_commit`` not yet made, as one select list and
    its parameters, taken from this transaction: the caller makes them in
    the statement that ends it (``sql``'s held rows, sent on their own)."""
    scope = _scope.get()
    if scope is None or not scope.last:
        return "", []
    calls, scope.last = scope.last, []
    return ", ".join(call for call, _ in calls), [value for _, values in calls for value in values]


def _send_last(calls: list[tuple[str, list]]) -> None:
    """The calls of ``with_commit``, and on PostgreSQL the COMMIT with
    them: one request in the simple protocol (the parameters bound in the
    client), so the commit costs no round trip of its own; or, when the
    transaction has not begun (``unbegun``), the calls alone, on their own.
    Django's commit that follows finds the session idle and sends nothing
    (psycopg commits only a transaction in progress); a failed COMMIT (a
    deferred foreign key) raises here, inside the block, which Django then
    ends as it would any error: nothing was written. A block that is a
    savepoint in a caller's transaction (a test case's) keeps its own end.
    (A transaction Django must roll back refuses every statement, this one
    too.)"""
    text = "SELECT " + ", ".join(call for call, _ in calls)
    params = [value for _, values in calls for value in values]
    if unbegun():
        with on_its_own(), connection.cursor() as cursor:
            cursor.execute(text, params)
        return
    # The transaction itself, not a savepoint in one.
    fold = connection.vendor == "postgresql" and len(connection.atomic_blocks) == 1
    with connection.cursor() as cursor:
        cursor.execute(f"{text}; COMMIT" if fold else text, params)


def _idle_connection():
    """The psycopg connection of this ``outermost()`` transaction while it
    has sent nothing (PostgreSQL, idle, not in autocommit: the transaction
    is Django's own and has not begun on the server); else None."""
    if _scope.get() is None or connection.vendor != "postgresql":
        return None
    raw = connection.connection
    if raw is None or raw.autocommit or raw.info.transaction_status != _IDLE:
        return None
    return raw


def unbegun() -> bool:
    """Whether this ``outermost()`` transaction has not begun on the server:
    PostgreSQL, nothing sent yet (no ``BEGIN``, no savepoint). A test
    case's transaction, or any statement sent, has begun it."""
    return _idle_connection() is not None


@contextmanager
def on_its_own() -> Iterator[None]:
    """Statements in the block run on their own (autocommit), each its own
    transaction, while this ``outermost()`` transaction has not begun
    (``unbegun``); otherwise in it, as usual. For the one statement that
    ends a service whose work it all is (``sql``'s held rows with the
    ``with_commit`` calls), and for reads before it begins
    (``before_begin``). Django's own state is not touched: its commit then
    finds nothing to commit."""
    raw = _idle_connection()
    if raw is None:
        yield
        return
    raw.autocommit = True
    try:
        yield
    finally:
        if not raw.closed and raw.info.transaction_status == _IDLE:
            raw.autocommit = False


@contextmanager
def before_begin() -> Iterator[None]:
    """Reads in the block (statements that neither write nor lock) run
    before this ``outermost()`` transaction begins, on their own, if it has
    not begun and holds nothing to send (no ``pending`` gathered, no
    ``with_commit`` call): under READ COMMITTED a read inside the
    transaction would take its own snapshot too, and it takes no lock that
    a later statement relies on. The first statement that writes or locks
    begins the transaction after the block. Otherwise the block runs in the
    transaction, as usual. Only a caller that knows its block only reads
    may use it: a write in it would commit at once."""
    scope = _scope.get()
    if scope is None or scope.last or any(gathered for gathered, _ in scope.pending.values()):
        yield
        return
    with on_its_own():
        yield


def pending(name: str, flush: Callable[[dict[Any, Any]], None], *, last: bool = False) -> dict[Any, Any] | None:
    """The dict ``name`` of this ``outermost()`` transaction, handed to
    ``flush`` at its end, before the commit, if it is not empty then; None
    outside one (the caller then acts at once). Flushes run in the order
    their names were first asked, those asked with ``last`` after the
    others (``sql``'s held rows: the flushes before them may still hold
    rows or add ``with_commit`` calls)."""
    scope = _scope.get()
    if scope is None:
        return None
    if name not in scope.pending:
        scope.pending[name] = ({}, flush)
        if last:
            scope.flushed_last.append(name)
    return scope.pending[name][0]
