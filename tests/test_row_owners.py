"""One owner per row kind: only ``executions.attempts`` writes task rows,
only ``executions.runs`` writes executions, their timers and their decide
requests.

Two checks. While the whole suite runs, every connection carries the guard
of tests/row_owners.py, so any path a test walks that writes an owned table
from another module fails that test; the first test here shows the guard
bites. The second reads the source of every product module and finds the
ORM writes and SQL statements aimed at those tables outside their owners,
for the paths no test walks.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest
from django.db import connection

from tests import row_owners

ROOT = row_owners.ROOT
# tools/ is not the product, but it writes through the same owners (as the guard holds it to).
APPS = ("executions", "quotas", "metadata", "nodeflow", "console", "tools")
MODELS = {
    "Task": "executions/attempts.py",
    "Execution": "executions/runs.py",
    "Timer": "executions/runs.py",
    "DecideRequest": "executions/runs.py",
}
# The control tables, each written by its control's module (docs/architecture.md,
# "Who writes what"); checked in the source only. The purge deletes the
# rows of the executions it removes (their holders, their tickets).
CONTROL_MODELS = {
    "Semaphore": "quotas/semaphores.py",
    "SemaphoreHolder": "quotas/semaphores.py",
    "RateWindow": "quotas/rate_limits.py",
    "NamespaceQuota": "quotas/namespace_quotas.py",
    "Admission": "quotas/admission.py",
    "Schedule": "quotas/schedules.py",
    "WorkerPoll": "quotas/diagnostics.py",
}
PURGE = "executions/purge.py"
WRITES = {"update", "delete", "create", "bulk_create", "get_or_create", "update_or_create", "save"}
SQL_WRITE = re.compile(
    r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(" + "|".join(row_owners.OWNERS) + r")\b", re.IGNORECASE
)


def _product_modules() -> list[pathlib.Path]:
    return sorted(p for app in APPS for p in (ROOT / app).rglob("*.py") if "migrations" not in p.parts)


def _root_name(node: ast.AST) -> str | None:
    """``Task`` in ``Task.objects.filter(…).update(…)``."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _writes_in(path: pathlib.Path, models: dict[str, str] = MODELS, *, sql: bool = True) -> list[tuple[str, int]]:
    """(model or table, line) of each write to one of ``models`` found in
    the module's source; with ``sql``, also each SQL statement writing an
    engine table (row_owners.OWNERS)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
            name = _root_name(node.func.value)
            if name in models:
                found.append((name, node.lineno))
        if (
            (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("update", "insert")
            )
            and _root_name(node.func.value) == "sql"
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in models
        ):
            found.append((node.args[0].id, node.lineno))
        if sql and isinstance(node, ast.Constant) and isinstance(node.value, str):
            for table in SQL_WRITE.findall(node.value):
                found.append((table.lower(), node.lineno))
    return found


def test_no_module_but_the_owner_writes_an_owned_table():
    owners = {**MODELS, **row_owners.OWNERS}
    strays = []
    for path in _product_modules():
        relative = path.relative_to(ROOT).as_posix()
        strays += [f"{relative}:{line} writes {what}" for what, line in _writes_in(path) if owners[what] != relative]
    assert strays == [], "\n".join(strays)


def test_no_module_but_its_control_writes_a_control_table():
    strays = []
    for path in _product_modules():
        relative = path.relative_to(ROOT).as_posix()
        strays += [
            f"{relative}:{line} writes {model}"
            for model, line in _writes_in(path, CONTROL_MODELS, sql=False)
            if CONTROL_MODELS[model] != relative and relative != PURGE
        ]
    assert strays == [], "\n".join(strays)


def test_the_owners_are_where_the_docs_say():
    for owner in set(row_owners.OWNERS.values()):
        assert (ROOT / owner).exists()
        assert owner in (ROOT / "docs" / "engine.md").read_text()


@pytest.mark.django_db
def test_the_guard_refuses_a_write_issued_from_another_module():
    """What a stray write looks like to the suite's guard: a statement on the
    task table issued from code that lives in executions/dispatch.py."""
    source = "def write(cursor):\n    cursor.execute('UPDATE executions_task SET held = held WHERE 1 = 0')\n"
    scope: dict = {}
    exec(compile(source, str(ROOT / "executions" / "dispatch.py"), "exec"), scope)
    with connection.cursor() as cursor, pytest.raises(row_owners.NotTheOwner, match=r"executions/dispatch\.py"):
        scope["write"](cursor)


@pytest.mark.django_db
def test_the_guard_lets_the_owner_write():
    source = "def write(cursor):\n    cursor.execute('UPDATE executions_task SET held = held WHERE 1 = 0')\n"
    scope: dict = {}
    exec(compile(source, str(ROOT / "executions" / "attempts.py"), "exec"), scope)
    with connection.cursor() as cursor:
        scope["write"](cursor)


@pytest.mark.django_db
def test_the_guard_refuses_rows_held_for_another_modules_statement():
    """Rows ``sql.insert`` holds go later, with whichever statement comes
    next; the guard checks them as they are held, against the module that
    inserts them."""
    from executions.models import Task
    from nodeflow import transactions

    source = "def write(sql, task):\n    sql.insert([task])\n"
    scope: dict = {}
    exec(compile(source, str(ROOT / "executions" / "dispatch.py"), "exec"), scope)
    from executions import sql

    with pytest.raises(row_owners.NotTheOwner, match=r"executions/dispatch\.py"), transactions.outermost():
        scope["write"](sql, Task())
