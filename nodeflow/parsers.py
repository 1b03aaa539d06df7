"""Request body parsers: JSON, and YAML (``content-type: application/yaml``).

Both refuse bodies nested deeper than NODE_FLOW_MAX_JSON_DEPTH, strings
that are not text: unpaired UTF-16 surrogates (``"\\ud800"``) and NUL
(``"\\u0000"``, which PostgreSQL's jsonb refuses), and numbers that are not
finite (``1e400`` parses as infinity; YAML's ``.inf`` and ``.nan``), naming
the field; see nodeflow.nesting. YAML
also refuses aliases, whose shared nodes would multiply when the value is
stored as JSON (a few hundred bytes can expand to gigabytes).

A JSON body is checked from its text where the text settles a check: its
numbers are read finite or refused as they parse, a body with no more
brackets than the depth allows cannot be too deep, and one without a
``\\u`` escape holds no NUL and no surrogate (strict JSON has no other way
to write them). The walks of the value run only where the text does not
settle it, and to name the number that is not finite.
"""

import math

import yaml
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import get_encoding
from rest_framework.utils import json

from executions.json_values import is_storable, non_finite_at
from nodeflow.errors import InvalidField
from nodeflow.nesting import max_depth, too_deep


def _checked(value, text: str | None = None):
    """``value``, refused if it is not what a body may hold. ``text``: the
    JSON it was parsed from, with every number known finite."""
    if text is None:
        path = non_finite_at(value)
        if path is not None:
            raise InvalidField(
                path, "must be a finite number (this one is too large for a JSON number, or not a number)"
            )
    limit = max_depth()
    if (text is None or text.count("{") + text.count("[") > limit) and too_deep(value):
        raise ParseError(f"the body is nested deeper than {limit} levels (NODE_FLOW_MAX_JSON_DEPTH)")
    if (text is None or "\\u" in text) and not is_storable(value):
        raise ParseError(
            "the body holds a string that is not text: an unpaired UTF-16 surrogate "
            "(\\ud800-\\udfff) or a NUL (\\u0000)"
        )
    return value


class _NotFinite(Exception):
    """A number too large for a float, met while parsing (not a ValueError,
    which would read as malformed JSON)."""


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # the only way a JSON number parses non-finite
        raise _NotFinite
    return value


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        return self.parse_bytes(stream.read(), get_encoding(parser_context or {}))

    def parse_bytes(self, body: bytes, encoding: str = "utf-8"):
        """``parse`` of a body already in hand (nodeflow.plain_json). As DRF's
        own JSON parser reads one (decoded whole, strict about NaN and
        Infinity), then checked."""
        constant = json.strict_constant if self.strict else None
        try:
            text = body.decode(encoding)
            try:
                value = json.loads(text, parse_constant=constant, parse_float=_finite_float)
            except _NotFinite:  # parsed again, for the walk to name the number
                return _checked(json.loads(text, parse_constant=constant))
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        return _checked(value, text if self.strict else None)  # not strict: NaN and Infinity parse


class _NoAliasLoader(yaml.SafeLoader):
    """safe_load's loader (no tags that build Python objects), without aliases."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted", event.start_mark)
        return super().compose_node(parent, index)


class YAMLParser(parsers.BaseParser):
    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            value = yaml.load(stream.read().decode("utf-8"), Loader=_NoAliasLoader)
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ParseError(f"invalid YAML: {exc}") from exc
        except RecursionError as exc:  # the loader recurses once per nesting level
            raise ParseError("invalid YAML: nested too deeply") from exc
        return _checked(value)


class XYAMLParser(YAMLParser):
    media_type = "application/x-yaml"
