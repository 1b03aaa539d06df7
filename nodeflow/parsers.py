"""YAML request bodies (``content-type: application/yaml``)."""
import yaml
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser


class YAMLParser(BaseParser):
    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            # safe_load: no tags that build Python objects.
            return yaml.safe_load(stream.read().decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ParseError(f"invalid YAML: {exc}") from exc
        except RecursionError as exc:  # the loader recurses once per nesting level
            raise ParseError("invalid YAML: nested too deeply") from exc


class XYAMLParser(YAMLParser):
    media_type = "application/x-yaml"
