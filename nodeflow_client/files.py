"""Definitions read from files: JSON, or YAML (the server parses YAML
itself, so a YAML file is posted as it is written).

A file holds one definition or a list of them (JSON: an array; YAML: a
sequence, or several ``---`` documents). A single YAML definition is sent
byte for byte, so the server's errors point into the file as written;
splitting a YAML list needs PyYAML, and without it the file goes to the
server whole (which takes one definition per request).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Document:
    """One definition to post: a JSON value, or YAML text."""

    value: Any = None
    yaml: str | None = None

    @property
    def content_type(self) -> str:
        return "application/json" if self.yaml is None else "application/yaml"

    def content(self) -> bytes:
        return (json.dumps(self.value) if self.yaml is None else self.yaml).encode()


def read_text(path: str | Path) -> str:
    """A file's text; ``-`` is standard input."""
    if str(path) == "-":
        return sys.stdin.read()
    return Path(path).read_text(encoding="utf-8")


def documents(path: str | Path) -> list[Document]:
    """The definitions in a file (``-``: standard input, JSON or YAML)."""
    text = read_text(path)
    if str(path).lower().endswith(YAML_SUFFIXES):
        return yaml_documents(text)
    if str(path).lower().endswith(".json"):
        return json_documents(text)
    try:
        return json_documents(text)
    except ValueError:
        return yaml_documents(text)


def json_documents(text: str) -> list[Document]:
    value = json.loads(text)
    return [Document(value=item) for item in value] if isinstance(value, list) else [Document(value=value)]


def yaml_documents(text: str) -> list[Document]:
    try:
        import yaml
    except ImportError:  # posted whole: the server parses YAML
        return [Document(yaml=text)]
    try:
        values = [value for value in yaml.safe_load_all(text) if value is not None]
    except yaml.YAMLError:
        return [Document(yaml=text)]  # the server says where it is wrong
    if len(values) == 1 and not isinstance(values[0], list):
        return [Document(yaml=text)]
    items = [item for value in values for item in (value if isinstance(value, list) else [value])]
    return [Document(yaml=yaml.safe_dump(item, sort_keys=False, allow_unicode=True)) for item in items]
