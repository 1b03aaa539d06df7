"""System task types by name. Each module of this package registers its type
with ``@register``; ``get`` imports them all on first use."""

from __future__ import annotations

import importlib
import threading

from executions.system_tasks.base import SystemTask

MODULES = ("http", "http_poll", "webhook", "grpc", "inline", "jq", "start_workflow")

_types: dict[str, SystemTask] = {}
_lock = threading.Lock()
_loaded = False


def register(cls: type[SystemTask]) -> type[SystemTask]:
    _types[cls.type] = cls()
    return cls


def get(task_type: str) -> SystemTask:
    """The implementation of ``task_type``; KeyError for an unknown type."""
    _load()
    return _types[task_type]


def types() -> list[str]:
    _load()
    return sorted(_types)


def _load() -> None:
    global _loaded
    if _loaded:
        return
    with _lock:  # another thread must not see a half-filled registry
        if not _loaded:
            for module in MODULES:
                importlib.import_module(f"executions.system_tasks.{module}")
            _loaded = True
