"""Shared fixtures: namespaces, keys of each role, and an API client."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from django.db import connection, transaction
from rest_framework.test import APIClient

from metadata.taskdefs import forget_policies
from nodeflow import clock
from nodeflow.keys import clear_caches, create_api_key
from tests.metrics_helpers import scrape, value
from tools.stack import live_database_url, metrics_dir

# Fixtures of the system-task tests (a real HTTP server on loopback).
pytest_plugins = ["tests.system_helpers"]

T = TypeVar("T")

# The tests' servers listen on loopback, which outbound calls may not reach
# by default (docs/security.md): allowed here explicitly, for this process
# (the fixture below) and for the processes tests start (the environment).
LOOPBACK = ["127.0.0.0/8", "::1/128"]
os.environ.setdefault("NODE_FLOW_OUTBOUND_ALLOW_PRIVATE", ",".join(LOOPBACK))


@pytest.fixture(autouse=True)
def _outbound_to_loopback():
    # override_settings, not the ``settings`` fixture: some tests name a parameter "settings".
    from django.test import override_settings

    with override_settings(NODE_FLOW_OUTBOUND_ALLOW_PRIVATE=LOOPBACK):
        yield


@pytest.fixture(scope="session", autouse=True)
def _row_owners():
    """Only each engine table's owner module writes it (tests/row_owners.py)."""
    from tests import row_owners

    row_owners.install()
    yield


@pytest.fixture(autouse=True)
def _reset_process_state():
    """The clock, and what the process remembers of rows (rows are rolled
    back between tests; what was drawn from them must go with them)."""
    forget_process_state()
    yield
    forget_process_state()


def forget_process_state() -> None:
    """The clock back to real time, and every in-process memory of rows:
    keys and namespaces, task-definition policies and controls, recorded
    polls, throttles, and the executor's snapshot bodies, which it caches
    by id for the life of the process (rolled-back ids are reused on
    SQLite, so a body cached by an earlier test would be wrong)."""
    from executions import executor
    from nodeflow import throttling
    from quotas import controls, diagnostics

    clock.reset()
    clear_caches()
    forget_policies()
    controls.forget()
    diagnostics.forget_polls()
    throttling.forget()
    executor.snapshot_body.cache_clear()
    executor._pulls_messages.cache_clear()


@pytest.fixture
def make_key(db) -> Callable[..., str]:
    """make_key(role, namespace="default") → a raw key (namespace None: all)."""

    def make(role: str = "admin", namespace: str | None = "default") -> str:
        return create_api_key(role=role, namespace=namespace)[1]

    return make


class Api:
    """A thin JSON client bound to one key and namespace."""

    def __init__(self, key: str | None, namespace: str = "default") -> None:
        self.client = APIClient()
        self.key = key
        self.namespace = namespace

    def url(self, path: str) -> str:
        return path if path.startswith("/") else f"/v1/ns/{self.namespace}/{path}"

    def call(self, method: str, path: str, body=None, *, content_type="application/json", raw: str | None = None):
        headers = {"HTTP_X_API_KEY": self.key} if self.key else {}
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        kwargs = {"data": data, "content_type": content_type} if data is not None else {}
        return getattr(self.client, method.lower())(self.url(path), **kwargs, **headers)

    def get(self, path: str):
        return self.call("GET", path)

    def post(self, path: str, body=None, **kwargs):
        return self.call("POST", path, body if body is not None else {}, **kwargs)

    def put(self, path: str, body=None, **kwargs):
        return self.call("PUT", path, body, **kwargs)

    def patch(self, path: str, body=None, **kwargs):
        return self.call("PATCH", path, body, **kwargs)

    def delete(self, path: str):
        return self.call("DELETE", path)


@pytest.fixture(scope="module")
def module_rows(django_db_setup, django_db_blocker) -> Iterator[Callable[[Callable[[], T]], T]]:
    """``module_rows(make)`` → ``make()``, run in a transaction around the
    module's tests and rolled back at the module's end (Django's
    ``TestCase.setUpTestData``, for pytest): rows a module-scoped fixture
    makes through it are built once and seen by each of the module's tests,
    whose own ``db`` transaction nests in it and rolls back to them. As with
    ``db``, the rows are not committed: no other connection sees them."""
    with django_db_blocker.unblock():
        block = transaction.atomic()
        # As Django marks its test cases' blocks: the engine's durable blocks
        # (``transactions.outermost``) may nest in it, as they do in ``db``'s.
        block._from_testcase = True
        block.__enter__()

    def make_rows(make: Callable[[], T]) -> T:
        forget_process_state()  # an earlier test's, drawn from rows rolled back since
        with django_db_blocker.unblock():
            return make()

    try:
        yield make_rows
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            block.__exit__(None, None, None)
        forget_process_state()


@pytest.fixture
def api(make_key) -> Api:
    """An admin of namespace "default"."""
    return Api(make_key("admin"))


@pytest.fixture
def api_for(make_key) -> Callable[..., Api]:
    """api_for(role, namespace="default") → an Api with a fresh key."""

    def make(role: str = "admin", namespace: str | None = "default", *, url_namespace: str | None = None) -> Api:
        return Api(make_key(role, namespace), url_namespace or namespace or "default")

    return make


@pytest.fixture
def moved(api):
    """moved(name, **labels) → how much a sample grew since the test began
    (the /metrics scrapes of ``api``, tests/metrics_helpers.py)."""
    before = scrape(api)

    def grew(name: str, **labels: str) -> float:
        return value(scrape(api), name, **labels) - value(before, name, **labels)

    return grew


@pytest.fixture
def is_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture
def frozen_clock():
    """Freeze nodeflow.clock at a fixed instant; move it with clock.advance."""
    import datetime as dt

    instant = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
    with clock.travel_to(instant):
        yield instant


@pytest.fixture(scope="session", autouse=True)
def _fresh_process_metrics(request):
    """The processes tests start count into their test database's metrics
    directory (nodeflow/settings.py): emptied at the start of each session,
    so files of earlier runs' processes do not pile up there and into
    every scrape."""
    request.getfixturevalue("django_db_setup")
    shutil.rmtree(metrics_dir(live_database_url()), ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _close_notify_listener(request):
    """A poll on PostgreSQL starts the process's LISTEN thread, whose own
    connection would keep the test database from being dropped at the end of
    the session. Close that session first: requesting the database set-up
    makes this fixture's teardown run before the database is dropped."""
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        yield
        return
    request.getfixturevalue("django_db_setup")
    yield
    from executions import notify

    notify.stop_listeners()
