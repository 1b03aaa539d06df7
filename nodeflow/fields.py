"""Strict JSON field types for request bodies.

DRF's number fields accept strings ("3") and booleans (``true`` is 1); an API
that says "a number" should refuse both, naming the field.
"""

from __future__ import annotations

import math
import re

from rest_framework import serializers

from nodeflow.errors import InvalidField
from nodeflow.models import NAME_PATTERN

# The longest duration any timeout or delay may have: one year, in seconds.
MAX_DURATION_S = 31_536_000.0


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer. ``1.0`` is refused like ``1.5``: the schema says
    ``integer``, and the definition checks (metadata.validation) refuse it too."""

    default_error_messages = {"invalid": "must be an integer"}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


def _is_finite(value: int | float) -> bool:
    # JSON integers are unbounded; one past ~1e308 makes isfinite() raise
    # OverflowError instead of answering, which would be a 500.
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


class StrictFloatField(serializers.FloatField):
    default_error_messages = {"invalid": "must be a number"}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)) or not _is_finite(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class DurationField(StrictFloatField):
    """Seconds, ≥ 0, fractions allowed, at most a year."""

    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", MAX_DURATION_S)
        super().__init__(**kwargs)


class NameField(serializers.RegexField):
    default_error_messages = {"not_a_string": "must be a string"}

    def __init__(self, **kwargs):
        super().__init__(
            NAME_PATTERN, error_messages={"invalid": "use 1–128 characters from A–Z a–z 0–9 _ . -"}, **kwargs
        )

    def to_internal_value(self, data):
        # CharField would turn 123 into "123"; a name must arrive as a string.
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A string, never a number coerced to one."""

    default_error_messages = {"invalid": "must be a string"}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class EnumField(serializers.ChoiceField):
    """One of a fixed set of strings; the error lists them."""

    def __init__(self, choices, **kwargs):
        super().__init__(choices, **kwargs)
        allowed = ", ".join(str(key) for key in self.choices)
        self.error_messages["invalid_choice"] = f"must be one of {allowed}"


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"invalid": "must be true or false"}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictSerializer(serializers.Serializer):
    """Refuses keys it does not know (a typo like ``retryCont`` is an error, not
    a silently ignored field). Read-only fields are accepted and ignored so a
    GET body can be sent back as is."""

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["must be a JSON object"]})
        known = set(self.fields)
        unknown = [key for key in data if key not in known]
        if unknown:
            raise serializers.ValidationError({unknown[0]: ["unknown field"]})
        return super().to_internal_value(data)


def is_name(value: str) -> bool:
    return bool(re.fullmatch(NAME_PATTERN, value))


def checked_name(value: str, field: str = "name") -> str:
    """``value`` if it is a name (a path segment naming a resource), else a
    400 naming ``field``."""
    if not is_name(value):
        raise InvalidField(field, "use 1–128 characters from A–Z a–z 0–9 _ . -")
    return value
