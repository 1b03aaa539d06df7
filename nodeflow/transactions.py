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
rollback. Only Django's public API is used, and psycopg's for a
transaction whose first reads go with its ``BEGIN`` (``with_begin``): its
pipeline mode, and its private ``_exec_command`` to queue that ``BEGIN``
and the ``COMMIT`` (psycopg is pinned).

On PostgreSQL psycopg sends ``BEGIN`` before a transaction's first
statement, a round trip of its own, and ``COMMIT`` after its last, another.
A service whose first statements only read, and whose writes are all held
to its end (rows, ``sql.insert``; notices, ``with_commit``), sends them in
the round trips it makes anyway: its reads go in psycopg's pipeline mode
behind a ``BEGIN`` of its own (``with_begin``; psycopg's own would wait
for its answer), and its one closing statement (``closing``: the rows and
the notices) goes with the ``COMMIT`` and the pipeline's sync. One
transaction, two round trips: a start that locks nothing (no start quota,
no workflow limit, no idempotency or admission key), where it was four.
A statement fetched inside ``in_pipeline`` (a sync match's lease) stays
in it, with the rows held before it and the ``COMMIT`` after. Any other
statement first leaves the pipeline (its sync, the round trip the
``BEGIN`` took before), and it and all that follows run as in any
transaction.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
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
    # the pipeline its first reads went in, with its BEGIN (``with_begin``)
    pipelined: _Pipelined | None = None


@dataclass
class _Pipelined:
    """A transaction begun in psycopg's pipeline mode, its ``BEGIN`` queued
    by us with its first reads (``with_begin``)."""

    raw: Any  # the psycopg connection
    pipeline: ExitStack
    # statements sent now go in the pipeline: its reads, or its closing statement
    sending: bool = True


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
                if scope.pipelined is not None:  # it only read
                    with closing():
                        pass
            except BaseException as exc:
                if scope.pipelined is not None:  # Django then rolls back what was sent
                    _leave_pipeline(scope, exc)
                raise
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
    round trip as its ``COMMIT`` (PostgreSQL): as a statement of their own,
    or in a closing statement that takes them (``take_with_commit``).
    False outside one: the caller makes it itself."""
    scope = _scope.get()
    if scope is None:
        return False
    scope.last.append((call, params))
    return True


def take_with_commit() -> tuple[str, list]:
    """The calls of ``with_commit`` not yet made, as one select list and
    its parameters, taken from this transaction: the caller makes them in
    the statement that ends it (``sql``'s held rows, a closing statement)."""
    scope = _scope.get()
    if scope is None or not scope.last:
        return "", []
    calls, scope.last = scope.last, []
    return _joined(calls)


def _joined(calls: list[tuple[str, list]]) -> tuple[str, list]:
    """``with_commit``'s calls as one select list and its parameters."""
    return ", ".join(call for call, _ in calls), [value for _, values in calls for value in values]


def _send_last(calls: list[tuple[str, list]]) -> None:
    """The calls of ``with_commit``, and on PostgreSQL the COMMIT with
    them: one request in the simple protocol (the parameters bound in the
    client), so the commit costs no round trip of its own. Django's commit
    that follows finds the session idle and sends nothing (psycopg commits
    only a transaction in progress); a failed COMMIT (a deferred foreign
    key) raises here, inside the block, which Django then ends as it would
    any error: nothing was written. A block that is a savepoint in a
    caller's transaction (a test case's) keeps its own end. (A transaction
    Django must roll back refuses every statement, this one too.) In a
    transaction still in the pipeline its reads began it in, they are its
    closing statement."""
    select, params = _joined(calls)
    text = f"SELECT {select}"
    if pipelined():
        with closing(), connection.cursor() as cursor:
            cursor.execute(text, params)
        return
    # The transaction itself, not a savepoint in one.
    fold = connection.vendor == "postgresql" and len(connection.atomic_blocks) == 1
    with connection.cursor() as cursor:
        cursor.execute(f"{text}; COMMIT" if fold else text, params)


@contextmanager
def with_begin() -> Iterator[None]:
    """The block's reads go with this ``outermost()`` transaction's
    ``BEGIN``, if it has not begun (PostgreSQL, nothing sent yet, nothing
    held to send): in pipeline mode, behind a ``BEGIN`` that does not wait
    for its answer (see the module's docstring). Otherwise the block runs
    in the transaction as usual. Only reads whose rows are fetched belong
    in it (the fetch raises their errors; a statement not fetched would
    raise its error later); the next statement that is not the
    transaction's closing one leaves the pipeline first."""
    scope = _scope.get()
    raw = None if scope is None or scope.last or _holds(scope) else _idle_connection()
    if raw is None:
        yield
        return
    assert scope is not None
    pipeline = ExitStack()
    raw.autocommit = True  # the BEGIN is ours: psycopg's would sync
    pipeline.enter_context(raw.pipeline())
    state = scope.pipelined = _Pipelined(raw, pipeline)
    _queue(raw, b"BEGIN")
    wrap_statements(_leave_pipeline_first)
    try:
        yield
    finally:
        state.sending = False


@contextmanager
def in_pipeline() -> Iterator[None]:
    """The block's statements, whose rows it fetches, stay in the pipeline
    this ``outermost()`` transaction's reads began it in (``with_begin``):
    they go in one round trip with the rows it holds (``sql.insert``), and
    its ``COMMIT`` goes in the next, where a statement would first leave the
    pipeline (its sync), then send the rows, then itself (a sync match's
    lease, in the start that made the tasks ready). A transaction not in a
    pipeline runs the block as usual: entering one for a block costs more
    than the round trip it saves (docs/performance.md)."""
    scope = _scope.get()
    state = None if scope is None else scope.pipelined
    if state is None:
        yield
        return
    state.sending = True
    try:
        yield
    finally:
        state.sending = False


def pipelined() -> bool:
    """Whether this ``outermost()`` transaction runs in the pipeline its
    reads began it in (``with_begin``): its closing statement
    (``closing``) then ends it."""
    scope = _scope.get()
    return scope is not None and scope.pipelined is not None


@contextmanager
def closing() -> Iterator[None]:
    """The block's statements are the last of this ``outermost()``
    transaction: in the pipeline its reads began it in, they go in it with
    its ``COMMIT``, and the pipeline's sync sends them all (and raises any
    error of theirs). Otherwise they go as any statement."""
    scope = _scope.get()
    state = None if scope is None else scope.pipelined
    if scope is None or state is None:
        yield
        return
    state.sending = True
    try:
        yield
        _queue(state.raw, b"COMMIT")
    except BaseException as exc:
        _leave_pipeline(scope, exc)
        raise
    _leave_pipeline(scope)


def _queue(raw, command: bytes) -> None:
    """Queue ``command`` in the connection's pipeline, as psycopg queues its
    own ``BEGIN`` and ``COMMIT`` there (``_exec_command``: pinned psycopg's
    private API; a cursor's ``execute`` cost a cursor and a send each)."""
    with connection.wrap_database_errors, raw.lock:
        raw.wait(raw._exec_command(command))


def _leave_pipeline(scope: _Scope, exc: BaseException | None = None) -> None:
    """Sync and leave pipeline mode, raising any error of what it sent
    (unless ``exc`` is on its way). The transaction stays open unless its
    ``COMMIT`` went; the connection is left to Django's setting once idle."""
    state, scope.pipelined = scope.pipelined, None
    assert state is not None
    try:
        with connection.wrap_database_errors:
            if exc is None:
                state.pipeline.close()
            else:
                state.pipeline.__exit__(type(exc), exc, exc.__traceback__)
    finally:
        if not state.raw.closed and state.raw.info.transaction_status == _IDLE:
            state.raw.autocommit = False  # Django's own setting: any later statement begins a transaction


def wrap_statements(wrapper: Callable[..., Any]) -> None:
    """Have ``wrapper`` (a Django execute wrapper) see every statement of
    this ``outermost()`` transaction's connection until the transaction
    ends, once however often asked. First of the connection's wrappers: a
    Django ``execute_wrapper`` block removes the last one when it ends."""
    wrappers = connection.execute_wrappers  # the connection's own list
    if wrapper in wrappers:
        return
    wrappers.insert(0, wrapper)

    def unwrap(_committed: bool) -> None:
        if wrapper in wrappers:
            wrappers.remove(wrapper)

    after(unwrap)


def _leave_pipeline_first(execute, statement, params, many, context):
    """A statement that is neither a read of ``with_begin``, nor fetched in
    ``in_pipeline``, nor a closing one leaves the pipeline first (its sync:
    the round trip the ``BEGIN`` took before), and it and the rest run as
    in any transaction."""
    scope = _scope.get()
    if scope is not None and scope.pipelined is not None and not scope.pipelined.sending:
        _leave_pipeline(scope)
    return execute(statement, params, many, context)


def _holds(scope: _Scope) -> bool:
    return any(gathered for gathered, _ in scope.pending.values())


def _idle_connection():
    """The psycopg connection of this ``outermost()`` transaction while it
    has sent nothing (PostgreSQL with pipeline mode; the outermost atomic
    block the service's own, durable one, not a test case's; idle, not in
    autocommit: Django's transaction has not begun on the server); else
    None."""
    if connection.vendor != "postgresql" or not connection.atomic_blocks[0].durable:
        return None
    raw = connection.connection
    if raw is None or raw.autocommit or raw.info.transaction_status != _IDLE or not _pipelines():
        return None
    return raw


@functools.cache
def _pipelines() -> bool:
    import psycopg

    return psycopg.Pipeline.is_supported()


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
