"""``manage.py nodeflow_apikey create|list|revoke`` (SPEC §2)."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command

from nodeflow.models import ApiKey, Namespace
from tests.conftest import Api

TASKDEFS = "metadata/task-definitions"


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("nodeflow_apikey", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def create(*args: str) -> str:
    """Runs ``create`` and returns the key from the last stdout line."""
    out, _ = run("create", *args)
    return out.rstrip("\n").splitlines()[-1]


def test_it_prints_the_key_alone_on_the_last_line(db):
    out, err = run("create", "--namespace", "x", "--role", "worker")
    last = out.rstrip("\n").splitlines()[-1]
    assert re.fullmatch(r"nf_[A-Za-z0-9_-]{20,}", last)
    assert last == last.strip()
    assert "worker" in err and "x" in err


def test_it_creates_the_namespace(db):
    assert not Namespace.objects.filter(name="x").exists()
    create("--namespace", "x", "--role", "worker")
    assert Namespace.objects.filter(name="x").exists()


def test_it_reuses_an_existing_namespace(db):
    first = create("--namespace", "x", "--role", "worker")
    second = create("--namespace", "x", "--role", "admin")
    assert first != second
    assert Namespace.objects.filter(name="x").count() == 1
    assert ApiKey.objects.filter(namespace__name="x").count() == 2


def test_it_makes_a_key_that_works_against_the_api(db):
    client = Api(create("--namespace", "x", "--role", "worker"), "x")
    response = client.get(TASKDEFS)
    assert response.status_code == 200
    assert response.json() == []
    assert client.post(TASKDEFS, {"name": "t"}).status_code == 403
    assert Api(client.key, "default").get(TASKDEFS).status_code == 403


@pytest.mark.parametrize("role,post_status", [("admin", 201), ("developer", 201), ("worker", 403)])
def test_it_gives_the_key_its_role(db, role, post_status):
    client = Api(create("--namespace", "x", "--role", role), "x")
    assert client.post(TASKDEFS, {"name": "t"}).status_code == post_status


def test_it_stores_only_a_hash(db):
    raw = create("--namespace", "x", "--role", "worker")
    key = ApiKey.objects.get()
    assert raw not in (key.key_hash, key.prefix)
    assert raw.startswith(key.prefix)


def test_it_lists_keys_without_the_raw_key(db):
    raw = create("--namespace", "x", "--role", "developer", "--name", "ci")
    everywhere = create("--all-namespaces", "--role", "admin")
    out, _ = run("list")
    assert raw not in out and everywhere not in out
    assert raw[len("nf_") :] not in out
    lines = out.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].split("\t")[2:] == ["developer", "x", "active", "ci"]
    assert lines[1].split("\t")[2:5] == ["admin", "*", "active"]
    assert ApiKey.objects.get(namespace__name="x").prefix in lines[0]


def test_it_lists_one_namespace(db):
    create("--namespace", "x", "--role", "worker")
    create("--namespace", "y", "--role", "worker")
    out, _ = run("list", "--namespace", "y")
    assert [line.split("\t")[3] for line in out.strip().splitlines()] == ["y"]


def test_it_revokes_a_key(db):
    raw = create("--namespace", "x", "--role", "admin")
    client = Api(raw, "x")
    assert client.get(TASKDEFS).status_code == 200
    key = ApiKey.objects.get()
    out, _ = run("revoke", str(key.pk))
    assert f"revoked key {key.pk}" in out
    response = client.get(TASKDEFS)
    assert response.status_code == 401
    assert response.json()["error"] == "UNAUTHENTICATED"
    listing, _ = run("list")
    assert "\trevoked\t" in listing


def test_it_revokes_only_the_named_key(db):
    kept = create("--namespace", "x", "--role", "admin")
    create("--namespace", "x", "--role", "admin")
    run("revoke", str(ApiKey.objects.order_by("-pk").first().pk))
    assert Api(kept, "x").get(TASKDEFS).status_code == 200


def test_it_refuses_to_revoke_twice_or_an_unknown_key(db):
    create("--namespace", "x", "--role", "admin")
    key_id = str(ApiKey.objects.get().pk)
    run("revoke", key_id)
    with pytest.raises(CommandError, match="no active key"):
        run("revoke", key_id)
    with pytest.raises(CommandError, match="no active key"):
        run("revoke", "999999")


@pytest.mark.parametrize("role", ["root", "ADMIN", "superuser", ""])
def test_it_refuses_an_invalid_role(db, role):
    with pytest.raises(CommandError, match="role"):
        run("create", "--namespace", "x", "--role", role)
    assert not ApiKey.objects.exists()
    assert not Namespace.objects.filter(name="x").exists()


@pytest.mark.parametrize("namespace", ["bad name", "a/b", "", "x" * 129, "é"])
def test_it_refuses_an_invalid_namespace_name(db, namespace):
    with pytest.raises(CommandError, match="namespace"):
        run("create", "--namespace", namespace, "--role", "admin")
    assert not ApiKey.objects.exists()
    assert not Namespace.objects.exists()


def test_it_makes_an_all_namespaces_key(db, make_key):
    make_key("admin", "default")
    make_key("admin", "other")
    before = Namespace.objects.count()
    raw = create("--all-namespaces", "--role", "developer")
    assert Namespace.objects.count() == before
    assert ApiKey.objects.get(key_hash__isnull=False, namespace__isnull=True).role == "developer"
    for namespace in ("default", "other"):
        assert Api(raw, namespace).post(TASKDEFS, {"name": "t"}).status_code == 201
    assert Api(raw, "ghost").get(TASKDEFS).status_code == 404


def test_it_says_every_namespace_for_an_all_namespaces_key(db):
    _, err = run("create", "--all-namespaces", "--role", "admin")
    assert "every namespace" in err


@pytest.mark.parametrize(
    "args",
    [
        ("create", "--role", "admin"),
        ("create", "--namespace", "x", "--all-namespaces", "--role", "admin"),
        ("create", "--namespace", "x"),
        ("revoke",),
        ("revoke", "one"),
        (),
        ("rotate",),
    ],
    ids=repr,
)
def test_it_refuses_bad_arguments(db, args):
    with pytest.raises(CommandError):
        run(*args)
    assert not ApiKey.objects.exists()
