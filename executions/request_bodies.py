"""Request bodies validated at the cost they deserve: through one bound
serializer per thread, or without DRF at all for a JSON body a plain
checker accepts (``executions.result_bodies``, ``executions.start_bodies``).
Every refusal is still the serializer's own 400."""

from __future__ import annotations

import threading

from rest_framework import serializers


class _Bound(threading.local):
    serializers: dict[type, serializers.Serializer]

    def __init__(self) -> None:
        self.serializers = {}


_bound = _Bound()


def validated(serializer_class: type[serializers.Serializer], data, *, plain=None) -> dict:
    """``serializer_class(data=data)``'s validated data. DRF deep-copies a
    serializer's fields for every instance, about a tenth of a worker
    request's CPU, so each thread keeps one bound instance to validate
    with; a body it refuses is validated again the ordinary way, so the
    400 is exactly the usual one. ``plain`` (result_bodies, start_bodies) accepts the
    plainly valid bodies of a JSON request without DRF at all."""
    if plain is not None and isinstance(data, dict):
        found = plain(data)
        if found is not None:
            return found
    serializer = _bound.serializers.get(serializer_class)
    if serializer is None:
        serializer = _bound.serializers[serializer_class] = serializer_class()
    try:
        return serializer.run_validation(data)
    except serializers.ValidationError:
        fresh = serializer_class(data=data)
        fresh.is_valid(raise_exception=True)
        return fresh.validated_data


def plain_if_json(request, plain):
    # Only JSON bodies hold nothing but JSON types (YAML may hold dates).
    return plain if request.content_type.split(";")[0].strip() == "application/json" else None
