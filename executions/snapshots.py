"""Published snapshots: which baked body an execution runs, and reading it.

A snapshot never changes once baked, so each process keeps the bodies it
has read (``snapshot_body``); starting from the published version costs one
fixed statement for the snapshot's id (once per transaction: a bulk start's
hundred starts of one workflow read it once).
"""

from __future__ import annotations

import functools

from executions import sql
from executions.models import Execution
from metadata import workflows
from metadata.baking import bake
from metadata.models import WorkflowDefinition, WorkflowSnapshot, WorkflowVersion
from nodeflow import transactions
from nodeflow.models import Namespace


@functools.lru_cache(maxsize=512)
def snapshot_body(snapshot_id: int) -> dict:
    """Snapshots are immutable, so each process can keep them."""
    return WorkflowSnapshot.objects.values_list("body", flat=True).get(pk=snapshot_id)


def workflow_of(execution: Execution) -> dict:
    return snapshot_body(execution.snapshot_id)["workflows"][execution.workflow_key]


def snapshot_for(*, namespace: Namespace, name: str, version: int | None) -> WorkflowSnapshot:
    """The snapshot an execution of ``name`` runs: the published bake, or for a
    named version its last bake (a never-published draft is baked now)."""
    if version is None:
        # The hot path: one query for the published version's snapshot id;
        # the body comes from the process's cache (snapshots never change).
        found = transactions.once(published_key(namespace.id, name), lambda: _published_snapshot(namespace.id, name))
        if found is not None:
            return sql.new(
                WorkflowSnapshot,
                id=found[0],
                namespace=namespace,
                name=name,
                version=found[1],
                body=snapshot_body(found[0]),
            )
    row = workflows.get_version(namespace=namespace, name=name, version=version)
    if row.snapshot_id is not None:
        return row.snapshot
    body = bake(name=name, version=row.version, body=row.body, resolve=workflows.resolver(namespace))
    return WorkflowSnapshot.objects.create(namespace=namespace, name=name, version=row.version, body=body)


def published_key(namespace_id: int, name: str) -> str:
    """The ``transactions.once`` key of ``_published_snapshot``'s answer."""
    return f"published:{namespace_id}:{name}"


@functools.cache
def published_snapshot_sql() -> str:
    """(snapshot id, version) of a workflow's baked published version; the
    parameters are its namespace id and name."""
    version, definition = sql.table(WorkflowVersion), sql.table(WorkflowDefinition)
    return (
        f"SELECT v.snapshot_id, v.version FROM {version} v JOIN {definition} d ON d.id = v.definition_id "
        f"WHERE d.namespace_id = %s AND d.name = %s AND v.version = d.published_version AND v.snapshot_id IS NOT NULL"
    )


def _published_snapshot(namespace_id: int, name: str) -> tuple[int, int] | None:
    """(snapshot id, version) of the published version of workflow ``name``,
    if it has been baked: one fixed statement (the ORM compiled this join
    anew for every start)."""
    with sql.cursor() as cursor:
        cursor.execute(published_snapshot_sql(), [namespace_id, name])
        return cursor.fetchone()
