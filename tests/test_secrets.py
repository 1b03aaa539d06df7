"""Secrets per namespace (issue 15.4): set, list and delete by an admin key,
never shown back, and usable only by the namespace's own tasks."""

from __future__ import annotations

import pytest

from nodeflow.models import Secret

pytestmark = pytest.mark.django_db


def test_an_admin_sets_a_secret_and_never_sees_it_again(api):
    created = api.put("secrets/partner", {"value": "s3cret"})
    assert created.status_code == 201
    assert created.json() == {"name": "partner"}
    replaced = api.put("secrets/partner", {"value": "n3w"})
    assert replaced.status_code == 200
    for response in (api.get("secrets"), api.get("secrets/partner")):
        assert response.status_code == 200
        assert "s3cret" not in response.content.decode() and "n3w" not in response.content.decode()
    assert [row["name"] for row in api.get("secrets").json()] == ["partner"]
    assert Secret.objects.get(name="partner").value == "n3w"


def test_only_an_admin_may_touch_secrets(api_for):
    for role in ("developer", "worker"):
        client = api_for(role)
        assert client.put("secrets/partner", {"value": "x"}).status_code == 403
        assert client.get("secrets").status_code == 403
    assert not Secret.objects.exists()


def test_a_namespace_sees_only_its_own_secrets(api_for):
    api_for("admin", "alpha").put("secrets/shared-name", {"value": "alpha's"})
    beta = api_for("admin", "beta")
    assert beta.get("secrets").json() == []
    assert beta.get("secrets/shared-name").status_code == 404
    assert beta.delete("secrets/shared-name").status_code == 404
    assert Secret.objects.filter(name="shared-name").count() == 1


@pytest.mark.parametrize(
    "body, field", [({}, "value"), ({"value": ""}, "value"), ({"value": 7}, "value"), ({"value": "x" * 4097}, "value")]
)
def test_a_bad_value_is_a_400_naming_the_field(api, body, field):
    response = api.put("secrets/partner", body)
    assert response.status_code == 400 and response.json()["field"] == field
    assert not Secret.objects.exists()


def test_a_bad_name_is_a_400(api):
    response = api.put("secrets/bad name", {"value": "x"})
    assert response.status_code == 400 and response.json()["field"] == "name"


def test_a_deleted_secret_is_gone(api):
    api.put("secrets/partner", {"value": "x"})
    assert api.delete("secrets/partner").status_code == 204
    assert api.get("secrets/partner").status_code == 404
