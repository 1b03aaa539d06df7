"""Transaction-scoped locks on names (a queue, a definition, an admission
bucket). On PostgreSQL, ``pg_advisory_xact_lock`` on a 64-bit hash of the
name: held until the transaction ends, no row needed, released by a crash.
On SQLite every transaction begins IMMEDIATE and so already holds the one
database-wide write lock: there is nothing more to take.

Read what the lock protects in a statement *after* taking it: under READ
COMMITTED a statement's snapshot is taken when it starts, so counts read by
the statement that waited for the lock could predate the holder's commit.
"""

from __future__ import annotations

from django.db import connection


def lock_name(name: str) -> None:
    """Serialise this transaction with every other one that locks ``name``.
    A hash collision only serialises two unrelated names: never unsafe."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [name])


def queue_lock(namespace_id: int, queue: str) -> str:
    return f"queue:{namespace_id}:{queue}"


def definition_lock(namespace_id: int, workflow_name: str) -> str:
    return f"definition:{namespace_id}:{workflow_name}"


def admission_lock(namespace_id: int, bucket: str) -> str:
    return f"admission:{namespace_id}:{bucket}"
