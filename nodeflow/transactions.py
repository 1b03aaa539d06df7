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
rollback. Only Django's public API is used.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction


@dataclass
class _Scope:
    done: set[str] = field(default_factory=set)
    # name → (what is gathered, what sends it before the commit), in the order first asked
    pending: dict[str, tuple[dict, Callable[[dict], None]]] = field(default_factory=dict)
    # called once the transaction has ended, with whether it committed
    after: list[Callable[[bool], None]] = field(default_factory=list)
    # key → what was read once in this transaction (``once``)
    read: dict[str, Any] = field(default_factory=dict)
    # statements sent with the COMMIT, in one round trip (``with_commit``)
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
                for gathered, flush in scope.pending.values():
                    if gathered:
                        flush(gathered)
                if scope.last:
                    _send_last(scope.last)
            finally:
                _scope.reset(token)
        committed = True
    finally:
        for callback in scope.after:
            callback(committed)


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


def with_commit(statement: str, params: list) -> bool:
    """Send ``statement`` (one that returns nothing the caller needs: a
    ``pg_notify``) at the end of this ``outermost()`` transaction, after
    every ``pending`` flush, in the same round trip as its ``COMMIT``
    (PostgreSQL). False outside one: the caller sends it itself."""
    scope = _scope.get()
    if scope is None:
        return False
    scope.last.append((statement, params))
    return True


def _send_last(statements: list[tuple[str, list]]) -> None:
    """The statements of ``with_commit``, and on PostgreSQL the COMMIT with
    them: one request in the simple protocol (the parameters bound in the
    client), so the commit costs no round trip of its own. Django's commit
    that follows finds the session idle and sends nothing (psycopg commits
    only a transaction in progress); a failed COMMIT (a deferred foreign
    key) raises here, inside the block, which Django then ends as it would
    any error: nothing was written. A block that is a savepoint in a
    caller's transaction (a test case's) keeps its own end. (A transaction
    Django must roll back refuses every statement, this one too.)"""
    text = "; ".join(statement for statement, _ in statements)
    params = [value for _, values in statements for value in values]
    # The transaction itself, not a savepoint in one.
    fold = connection.vendor == "postgresql" and len(connection.atomic_blocks) == 1
    with connection.cursor() as cursor:
        cursor.execute(f"{text}; COMMIT" if fold else text, params)


def pending(name: str, flush: Callable[[dict[Any, Any]], None]) -> dict[Any, Any] | None:
    """The dict ``name`` of this ``outermost()`` transaction, handed to
    ``flush`` at its end, before the commit, if it is not empty then; None
    outside one (the caller then acts at once)."""
    scope = _scope.get()
    if scope is None:
        return None
    if name not in scope.pending:
        scope.pending[name] = ({}, flush)
    return scope.pending[name][0]
