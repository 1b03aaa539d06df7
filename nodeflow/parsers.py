"""Request body parsers: JSON, and YAML (``content-type: application/yaml``).

Both refuse bodies nested deeper than NODE_FLOW_MAX_JSON_DEPTH, strings
that are not text: unpaired UTF-16 surrogates (``"\\ud800"``) and NUL
(``"\\u0000"``, which PostgreSQL's jsonb refuses), and numbers that are not
finite (``1e400`` parses as infinity; YAML's ``.inf`` and ``.nan``), naming
the field; see nodeflow.nesting. YAML
also refuses aliases, whose shared nodes would multiply when the value is
stored as JSON (a few hundred bytes can expand to gigabytes).
"""

import yaml
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import get_encoding
from rest_framework.utils import json

from executions.json_values import is_storable, non_finite_at
from nodeflow.errors import InvalidField
from nodeflow.nesting import max_depth, too_deep


def _checked(value):
    path = non_finite_at(value)
    if path is not None:
        raise InvalidField(path, "must be a finite number (this one is too large for a JSON number, or not a number)")
    if too_deep(value):
        raise ParseError(f"the body is nested deeper than {max_depth()} levels (NODE_FLOW_MAX_JSON_DEPTH)")
    if not is_storable(value):
        raise ParseError(
            "the body holds a string that is not text: an unpaired UTF-16 surrogate "
            "(\\ud800-\\udfff) or a NUL (\\u0000)"
        )
    return value


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        return self.parse_bytes(stream.read(), get_encoding(parser_context or {}))

    def parse_bytes(self, body: bytes, encoding: str = "utf-8"):
        """``parse`` of a body already in hand (nodeflow.plain_json). As DRF's
        own JSON parser reads one (decoded whole, strict about NaN and
        Infinity), then checked."""
        try:
            value = json.loads(body.decode(encoding), parse_constant=json.strict_constant if self.strict else None)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        return _checked(value)


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
