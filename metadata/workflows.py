"""Workflow-definition services: register a version, publish, roll back, delete.

Versions are immutable. The first version of a name is published when it is
created; later ones are drafts until published. Publishing bakes a snapshot
(``metadata.baking``); rolling back re-publishes a version's earlier snapshot
exactly as it was baked.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from metadata import conductor
from metadata.baking import bake
from metadata.models import WorkflowDefinition, WorkflowSnapshot, WorkflowVersion
from metadata.validation import DefinitionError, normalize_workflow
from nodeflow import clock
from nodeflow.errors import Conflict, NotFound
from nodeflow.models import Namespace
from quotas.namespace_quotas import check_new_workflow_definition


def get_definition(*, namespace: Namespace, name: str, lock: bool = False) -> WorkflowDefinition:
    query = WorkflowDefinition.objects.filter(namespace=namespace, name=name)
    found = (query.select_for_update() if lock else query).first()
    if found is None:
        raise NotFound(f"workflow definition '{name}' does not exist")
    return found


def get_version(*, namespace: Namespace, name: str, version: int | None = None) -> WorkflowVersion:
    """A stored version; without ``version``, the published one."""
    definition = get_definition(namespace=namespace, name=name)
    number = definition.published_version if version is None else version
    found = (
        WorkflowVersion.objects.select_related("definition", "snapshot")
        .filter(definition=definition, version=number)
        .first()
    )
    if found is None:
        raise NotFound(f"workflow '{name}' has no version {number}")
    return found


def resolver(namespace: Namespace):
    """How baking finds a child: the named version, else the published one."""

    def resolve(name: str, version: int | None) -> tuple[int, dict]:
        definition = WorkflowDefinition.objects.filter(namespace=namespace, name=name).first()
        if definition is None:
            raise LookupError(f"no workflow named '{name}'")
        number = version if version is not None else definition.published_version
        row = WorkflowVersion.objects.filter(definition=definition, version=number).first()
        if row is None:
            raise LookupError(f"workflow '{name}' has no version {number}")
        return number, row.body

    return resolve


def _lock_or_create(namespace: Namespace, name: str) -> WorkflowDefinition:
    for _ in range(2):  # a concurrent first registration of the same name
        try:
            with transaction.atomic():
                _definition, _ = WorkflowDefinition.objects.get_or_create(namespace=namespace, name=name)
            return get_definition(namespace=namespace, name=name, lock=True)
        except IntegrityError:
            continue
    return get_definition(namespace=namespace, name=name, lock=True)


@transaction.atomic
def register_workflow(*, namespace: Namespace, body: object) -> WorkflowVersion:
    """Validate and store a new version (published if it is the first). A
    body as Conductor writes it is translated first (``metadata.conductor``)
    and kept as posted; what the translation warns of is on the returned
    version's ``warnings``."""
    translated = conductor.translate_workflow(body)
    normalized = normalize_workflow(translated.body)
    _check_failure_workflow(namespace, normalized)
    # A new name counts against the namespace's maxWorkflowDefinitions.
    check_new_workflow_definition(namespace=namespace, name=normalized["name"])
    definition = _lock_or_create(namespace, normalized["name"])
    number = definition.latest_version + 1
    # Baking now checks children, cycles and depth for drafts too.
    snapshot_body = bake(name=definition.name, version=number, body=normalized, resolve=resolver(namespace))
    version = WorkflowVersion.objects.create(
        definition=definition, version=number, body=normalized, source=translated.source
    )
    fields = {"latest_version": number, "updated_at": clock.now()}
    if definition.published_version is None:
        _store_snapshot(version, snapshot_body)
        fields["published_version"] = number
    WorkflowDefinition.objects.filter(pk=definition.pk).update(**fields)
    definition.refresh_from_db()
    version.warnings = translated.warnings  # the registration's answer only, not stored
    return version


def _check_failure_workflow(namespace: Namespace, body: dict) -> None:
    """A ``failureWorkflow`` given by its literal name must name a workflow of
    the namespace (or the one being registered): a typo is refused now, not
    found when a run fails. One given as an expression is resolved then."""
    name = body.get("failureWorkflow")
    if not name or "${" in name or name == body["name"]:
        return
    if not WorkflowDefinition.objects.filter(namespace=namespace, name=name).exists():
        raise DefinitionError(
            "failureWorkflow",
            f"no workflow named '{name}' in this namespace: register it first "
            "(a name given as an expression, ${…}, is resolved when a run fails)",
        )


def _store_snapshot(version: WorkflowVersion, body: dict) -> WorkflowSnapshot:
    definition = version.definition
    snapshot = WorkflowSnapshot.objects.create(
        namespace_id=definition.namespace_id, name=definition.name, version=version.version, body=body
    )
    WorkflowVersion.objects.filter(pk=version.pk).update(snapshot=snapshot, published_at=clock.now())
    version.refresh_from_db()
    return snapshot


@transaction.atomic
def publish_workflow(*, namespace: Namespace, name: str, version: int | None = None) -> WorkflowVersion:
    """Bake ``version`` (default: the latest) afresh and make it the published one."""
    definition = get_definition(namespace=namespace, name=name, lock=True)
    row = get_version(namespace=namespace, name=name, version=version or definition.latest_version)
    body = bake(name=name, version=row.version, body=row.body, resolve=resolver(namespace))
    _store_snapshot(row, body)
    _set_published(definition, row.version)
    return get_version(namespace=namespace, name=name, version=row.version)


@transaction.atomic
def rollback_workflow(*, namespace: Namespace, name: str, version: int | None = None) -> WorkflowVersion:
    """Publish an earlier version with the snapshot it was baked with then.
    Default: the newest previously published version below the current one."""
    definition = get_definition(namespace=namespace, name=name, lock=True)
    if version is None:
        earlier = (
            WorkflowVersion.objects.filter(
                definition=definition, snapshot__isnull=False, version__lt=definition.published_version or 0
            )
            .order_by("-version")
            .first()
        )
        if earlier is None:
            raise Conflict(f"workflow '{name}' has no earlier published version to roll back to")
        version = earlier.version
    row = get_version(namespace=namespace, name=name, version=version)
    if row.snapshot_id is None:
        raise Conflict(f"version {version} of '{name}' was never published, so there is no snapshot to restore")
    _set_published(definition, row.version)
    return get_version(namespace=namespace, name=name, version=row.version)


def _set_published(definition: WorkflowDefinition, version: int) -> None:
    WorkflowDefinition.objects.filter(pk=definition.pk).update(published_version=version, updated_at=clock.now())


@transaction.atomic
def delete_workflow(*, namespace: Namespace, name: str) -> None:
    """Delete every version. Snapshots stay for executions still running them."""
    deleted, _ = WorkflowDefinition.objects.filter(namespace=namespace, name=name).delete()
    if not deleted:
        raise NotFound(f"workflow definition '{name}' does not exist")
