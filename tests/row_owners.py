"""The row owners, enforced while the suite runs.

Each engine table has one owner module, the only product code that writes
it (docs/engine.md, "Who writes what"). Every connection the test process
opens gets an execute wrapper that looks at each INSERT, UPDATE and DELETE
on those tables and finds the product module that issued it (the first
frame of the project's own code, skipping the SQL helpers and Django); a
write from any other module raises ``NotTheOwner``, so the test that walked
that path fails. Tests themselves may write rows to set a scene.

Rows ``sql.insert`` holds for the transaction's next statement are checked
when they are held, against the module that inserts them; the statement
that later sends them (``sql._send_held``, before whichever statement comes
next, or ``sql._close_held`` at the transaction's end) is not checked again.
"""

from __future__ import annotations

import pathlib
import re
import sys

from django.db.backends.signals import connection_created

ROOT = pathlib.Path(__file__).resolve().parent.parent
OWNERS = {
    "executions_task": "executions/attempts.py",
    "executions_execution": "executions/runs.py",
    "executions_timer": "executions/runs.py",
    "executions_deciderequest": "executions/runs.py",
}
_WRITE = re.compile(r'\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"?(' + "|".join(OWNERS) + r')"?[\s(]', re.IGNORECASE)
# Project files that only carry a statement for their caller.
_CARRIERS = {"executions/sql.py", "nodeflow/transactions.py"}
# Sends rows held (and checked) earlier, before another module's statement.
_SENDS_HELD = {("executions/sql.py", "_send_held"), ("executions/sql.py", "_close_held")}


class NotTheOwner(AssertionError):
    pass


def writer(statement: str, depth: int = 1) -> tuple[str, str] | None:
    """(table, project file that issued the write) for a write to an owned
    table; None for anything else, or for a write from a test."""
    found = _WRITE.search(statement)
    if found is None:
        return None
    frame = sys._getframe(depth)
    while frame is not None:
        path = pathlib.Path(frame.f_code.co_filename)
        if path.is_relative_to(ROOT) and ".venv" not in path.parts:
            relative = path.relative_to(ROOT).as_posix()
            if (relative, frame.f_code.co_name) in _SENDS_HELD:
                return None
            if relative not in _CARRIERS and relative != "tests/row_owners.py":
                return None if relative.startswith("tests/") else (found.group(1).lower(), relative)
        frame = frame.f_back
    return None


def check(execute, sql, params, many, context):
    _check(writer(sql if isinstance(sql, str) else str(sql)))
    return execute(sql, params, many, context)


def _check(found: tuple[str, str] | None) -> None:
    if found is not None and OWNERS[found[0]] != found[1]:
        table, module = found
        raise NotTheOwner(f"{module} writes {table}; only {OWNERS[table]} may")


def _checked_insert(insert):
    """``sql.insert``, its rows' owner checked as it is called (held rows
    are sent later, from wherever the next statement comes)."""

    def checked(objs):
        objs = list(objs)
        if objs:
            _check(writer(f'INSERT INTO "{objs[0]._meta.db_table}" (', depth=2))
        return insert(objs)

    checked.__wrapped__ = insert
    return checked


def _install(sender, connection, **kwargs) -> None:
    if check not in connection.execute_wrappers:
        connection.execute_wrappers.append(check)


def install() -> None:
    """Guard every connection of this process, present and future."""
    from django.db import connections

    from executions import sql

    if not hasattr(sql.insert, "__wrapped__"):
        sql.insert = _checked_insert(sql.insert)
    connection_created.connect(_install, dispatch_uid="nodeflow-row-owners")
    for connection in connections.all(initialized_only=True):
        _install(None, connection)
