"""Definition routes (SPEC §3–§4). Thin: parse, authorise, call a service, render."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response

from metadata import schema_shapes, taskdef_bodies, taskdefs, workflows
from metadata.models import TaskDefinition, WorkflowVersion
from metadata.serializers import TaskDefinitionSerializer, WorkflowVersionSerializer
from nodeflow.auth import Scope
from nodeflow.errors import InvalidField
from nodeflow.fields import StrictIntegerField, StrictSerializer
from nodeflow.views import NamespacedView


class TaskDefinitionListView(NamespacedView):
    scopes = {"GET": Scope.TASKDEFS_READ, "POST": Scope.TASKDEFS_WRITE, "PUT": Scope.TASKDEFS_WRITE}
    serializer_class = TaskDefinitionSerializer

    @extend_schema(
        operation_id="list_task_definitions",
        summary="List task definitions",
        responses=TaskDefinitionSerializer(many=True),
    )
    def get(self, request, ns):
        rows = TaskDefinition.objects.filter(namespace=self.namespace).order_by("name")
        return Response([taskdef_bodies.answer(row) for row in rows])

    @extend_schema(
        summary="Create or replace a task definition",
        description=(
            "Replaces the whole definition: a field left out goes back to its default, whatever it was before "
            "(201 when created, 200 when an existing definition was replaced). To change some fields and keep "
            "the others, PATCH …/task-definitions/{name}."
        ),
        request=TaskDefinitionSerializer,
        responses={200: TaskDefinitionSerializer, 201: TaskDefinitionSerializer},
    )
    def post(self, request, ns):
        values, extras = taskdef_bodies.validated(request.data)
        row, created = taskdefs.upsert_task_definition(namespace=self.namespace, values={**values, "conductor": extras})
        return Response(taskdef_bodies.answer(row), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(
        operation_id="replace_task_definition",
        summary="Create or replace a task definition (as POST; Conductor updates a definition with PUT)",
        request=TaskDefinitionSerializer,
        responses={200: TaskDefinitionSerializer, 201: TaskDefinitionSerializer},
    )
    def put(self, request, ns):
        return self.post(request, ns)


class TaskDefinitionDetailView(NamespacedView):
    scopes = {"GET": Scope.TASKDEFS_READ, "PATCH": Scope.TASKDEFS_WRITE, "DELETE": Scope.TASKDEFS_WRITE}
    serializer_class = TaskDefinitionSerializer

    @extend_schema(
        summary="One task definition, every field with its effective value", responses=TaskDefinitionSerializer
    )
    def get(self, request, ns, name):
        row = taskdefs.get_task_definition(namespace=self.namespace, name=name)
        return Response(taskdef_bodies.answer(row))

    @extend_schema(
        summary="Change some fields of a task definition",
        request=TaskDefinitionSerializer,
        responses=TaskDefinitionSerializer,
    )
    def patch(self, request, ns, name):
        row = taskdefs.get_task_definition(namespace=self.namespace, name=name)
        values, extras = taskdef_bodies.validated(request.data, instance=row)
        if values.get("name", name) != name:
            raise InvalidField("name", "cannot be changed; create a new definition instead")
        if extras:
            kept = row.conductor or {}
            aliases = sorted({*kept.get("aliases", []), *extras.get("aliases", [])})
            values["conductor"] = {
                "fields": {**kept.get("fields", {}), **extras.get("fields", {})},
                **({"aliases": aliases} if aliases else {}),
            }
        row = taskdefs.patch_task_definition(namespace=self.namespace, name=name, values=values)
        return Response(taskdef_bodies.answer(row))

    @extend_schema(summary="Delete a task definition", responses={204: None})
    def delete(self, request, ns, name):
        taskdefs.delete_task_definition(namespace=self.namespace, name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _version_body(row: WorkflowVersion) -> dict:
    return WorkflowVersionSerializer(row).data


# Definitions are checked by metadata.validation; their schema is written
# from the same field sets (metadata/schema_shapes.py).
WORKFLOW_BODY = schema_shapes.WorkflowDefinitionShape
VERSION_SUMMARY = inline_serializer(
    "WorkflowVersionSummary",
    many=True,
    fields={
        "version": serializers.IntegerField(),
        "published": serializers.BooleanField(),
        "description": serializers.CharField(),
        "createdAt": serializers.DateTimeField(),
        "publishedAt": serializers.DateTimeField(allow_null=True),
    },
)


class VersionChoiceSerializer(StrictSerializer):
    version = StrictIntegerField(min_value=1, required=False)


def _registered_body(row: WorkflowVersion) -> dict:
    """A registration's answer: the version, and what its translation warns
    of (e.g. a DO_WHILE given the ceiling of iterations)."""
    body = _version_body(row)
    warnings = getattr(row, "warnings", None)
    return {**body, "warnings": warnings} if warnings else body


class WorkflowDefinitionListView(NamespacedView):
    scopes = {"GET": Scope.WORKFLOWS_READ, "POST": Scope.WORKFLOWS_WRITE, "PUT": Scope.WORKFLOWS_WRITE}

    @extend_schema(
        operation_id="list_workflow_definitions",
        summary="List workflow definitions (their published versions)",
        responses=schema_shapes.WorkflowDefinitionShape(many=True),
    )
    def get(self, request, ns):
        rows = (
            WorkflowVersion.objects.select_related("definition")
            .filter(definition__namespace=self.namespace, definition__published_version=F("version"))
            .order_by("definition__name")
        )
        return Response([_version_body(row) for row in rows])

    @extend_schema(
        summary="Register a new version of a workflow definition",
        description="JSON, or YAML with content-type application/yaml. The first version of a name is "
        "published at once; later versions are drafts until published.",
        request={"application/json": WORKFLOW_BODY, "application/yaml": WORKFLOW_BODY},
        responses={201: WORKFLOW_BODY},
    )
    def post(self, request, ns):
        row = workflows.register_workflow(namespace=self.namespace, body=request.data)
        return Response(_registered_body(row), status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="register_workflow_definitions",
        summary="Register a new version of each workflow definition given (one, or a list as Conductor's PUT sends)",
        request={"application/json": schema_shapes.one_or_many("WorkflowDefinitionRequest")},
        responses={200: schema_shapes.one_or_many("WorkflowDefinition")},
    )
    def put(self, request, ns):
        bodies = request.data if isinstance(request.data, list) else [request.data]
        if not bodies:
            raise InvalidField("body", "must be a workflow definition or a non-empty list of them")
        with transaction.atomic():  # all or none
            rows = [workflows.register_workflow(namespace=self.namespace, body=body) for body in bodies]
        answers = [_registered_body(row) for row in rows]
        return Response(answers if isinstance(request.data, list) else answers[0])


class WorkflowDefinitionDetailView(NamespacedView):
    scopes = {"GET": Scope.WORKFLOWS_READ, "DELETE": Scope.WORKFLOWS_WRITE}

    @extend_schema(summary="The published version of a workflow definition", responses=WORKFLOW_BODY)
    def get(self, request, ns, name):
        return Response(_version_body(workflows.get_version(namespace=self.namespace, name=name)))

    @extend_schema(summary="Delete a workflow definition and all its versions", responses={204: None})
    def delete(self, request, ns, name):
        workflows.delete_workflow(namespace=self.namespace, name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WorkflowVersionListView(NamespacedView):
    scopes = {"GET": Scope.WORKFLOWS_READ}

    @extend_schema(summary="Every version of a workflow definition", responses=VERSION_SUMMARY)
    def get(self, request, ns, name):
        definition = workflows.get_definition(namespace=self.namespace, name=name)
        rows = definition.versions.order_by("version")
        return Response(
            [
                {
                    "version": row.version,
                    "published": row.version == definition.published_version,
                    "description": row.body.get("description", ""),
                    "createdAt": serializers.DateTimeField().to_representation(row.created_at),
                    "publishedAt": serializers.DateTimeField().to_representation(row.published_at)
                    if row.published_at
                    else None,
                }
                for row in rows
            ]
        )


class WorkflowVersionDetailView(NamespacedView):
    scopes = {"GET": Scope.WORKFLOWS_READ}

    @extend_schema(summary="One version of a workflow definition", responses=WORKFLOW_BODY)
    def get(self, request, ns, name, version):
        return Response(_version_body(workflows.get_version(namespace=self.namespace, name=name, version=version)))


class WorkflowPublishView(NamespacedView):
    scopes = {"POST": Scope.WORKFLOWS_WRITE}

    @extend_schema(
        summary="Publish a version (default: the latest), baking its sub-workflows",
        request=VersionChoiceSerializer,
        responses=WORKFLOW_BODY,
    )
    def post(self, request, ns, name):
        choice = VersionChoiceSerializer(data=request.data or {})
        choice.is_valid(raise_exception=True)
        row = workflows.publish_workflow(
            namespace=self.namespace, name=name, version=choice.validated_data.get("version")
        )
        return Response(_version_body(row))


class WorkflowRollbackView(NamespacedView):
    scopes = {"POST": Scope.WORKFLOWS_WRITE}

    @extend_schema(
        summary="Re-publish an earlier version with the snapshot it was baked with",
        description="Default: the newest previously published version below the current one.",
        request=VersionChoiceSerializer,
        responses=WORKFLOW_BODY,
    )
    def post(self, request, ns, name):
        choice = VersionChoiceSerializer(data=request.data or {})
        choice.is_valid(raise_exception=True)
        row = workflows.rollback_workflow(
            namespace=self.namespace, name=name, version=choice.validated_data.get("version")
        )
        return Response(_version_body(row))
