"""``GET /v1/ns/{ns}/breakers``: the circuit breakers each process reported
for this namespace (SPEC §8). Thin: authorise, read, render."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from executions import breakers, schema_shapes
from nodeflow.auth import Scope
from nodeflow.views import NamespacedView

BREAKERS = schema_shapes.BreakerSerializer(many=True)  # the answer's shape, for the schema only


class BreakersView(NamespacedView):
    scopes = {"GET": Scope.CONTROLS_READ}

    @extend_schema(
        summary="Circuit breakers, per process, for the hosts and gRPC services this namespace calls",
        description="One entry per process and key, as each process last reported it (every few seconds); "
        "failures and requests count the current window.",
        responses=BREAKERS,
    )
    def get(self, request, ns):
        return Response(breakers.listed(self.namespace.id))
