"""The outermost transaction of a service call, and what is done once in it.

A service (a start, a task result, a timer's firing, a role's tick, an
operator's change) opens one transaction, ``outermost()``: durable, so
Django refuses to open it inside another, and a service can never be folded
into a caller's transaction by accident (its commit is its promise: what it
answers has been written). What it calls nests plain ``atomic()``
savepoints. Side effects that must wait for the commit (notifications, a
decision made right after) go through ``transaction.on_commit``.

``first_in_transaction`` scopes work done once per service transaction (one
wake-up per key however many rows a batch frees): a ContextVar set and
reset around the block, whether it commits or rolls back, so no stale key
outlives a rollback. Only Django's public API is used.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction

_done_once: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("nodeflow_done_once", default=None)


@contextmanager
def outermost() -> Iterator[None]:
    """``transaction.atomic(durable=True)``, scoping ``first_in_transaction``."""
    with transaction.atomic(durable=True):
        token = _done_once.set(set())
        try:
            yield
        finally:
            _done_once.reset(token)


def first_in_transaction(key: str) -> bool:
    """True the first time ``key`` is asked inside this ``outermost()``
    transaction; always True outside one (the work is then merely repeated)."""
    seen = _done_once.get()
    if seen is None:
        return True
    if key in seen:
        return False
    seen.add(key)
    return True
