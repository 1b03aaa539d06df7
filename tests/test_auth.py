"""Who may call which definitions route (SPEC §2): roles × namespaces × routes,
plus missing, unknown and revoked keys and the browsable API's staff session."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from nodeflow.keys import revoke_api_key
from nodeflow.models import ApiKey, Namespace
from tests.conftest import Api

WORKFLOW = {"name": "wf", "tasks": [{"name": "t1", "taskReferenceName": "t1", "type": "SIMPLE"}]}

# (id, method, path, body, status when allowed). The `world` fixture makes each
# one succeed for a caller who may do it.
ROUTES = [
    ("taskdefs-get", "GET", "metadata/task-definitions", None, 200),
    ("taskdefs-post", "POST", "metadata/task-definitions", {"name": "new"}, 201),
    ("taskdef-get", "GET", "metadata/task-definitions/t1", None, 200),
    ("taskdef-patch", "PATCH", "metadata/task-definitions/t1", {"retryCount": 1}, 200),
    ("taskdef-delete", "DELETE", "metadata/task-definitions/t1", None, 204),
    ("workflows-get", "GET", "metadata/workflow-definitions", None, 200),
    ("workflows-post", "POST", "metadata/workflow-definitions", {**WORKFLOW, "description": "v3"}, 201),
    ("publish", "POST", "metadata/workflow-definitions/wf/publish", {}, 200),
    ("rollback", "POST", "metadata/workflow-definitions/wf/rollback", {}, 200),
]
ROUTE_IDS = [route[0] for route in ROUTES]
WORKER_MAY = {"taskdefs-get", "taskdef-get"}


def _allowed(role: str, route_id: str) -> bool:
    return role in ("admin", "developer") or route_id in WORKER_MAY


def call(client: Api, route: tuple):
    _, method, path, body, _ = route
    if method in ("POST", "PATCH"):
        return client.call(method, path, body)
    return client.call(method, path)


def assert_error(response, status: int, error: str) -> None:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"] == error
    assert isinstance(body["message"], str) and body["message"]


def _seed_namespace(client: Api) -> None:
    assert client.post("metadata/task-definitions", {"name": "t1"}).status_code == 201
    assert client.post("metadata/workflow-definitions", WORKFLOW).status_code == 201  # v1, published
    assert client.post("metadata/workflow-definitions", {**WORKFLOW, "description": "v2"}).status_code == 201
    assert client.post("metadata/workflow-definitions/wf/publish", {"version": 2}).status_code == 200


@pytest.fixture
def world(api_for) -> None:
    """Namespaces "default" and "other", each with task definition t1 and
    workflow wf (v1 and v2 published, v2 current, so rollback has a target)."""
    for namespace in ("default", "other"):
        _seed_namespace(api_for("admin", namespace))


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@pytest.mark.parametrize("role", ["admin", "developer", "worker"])
def test_it_applies_the_role_in_its_own_namespace(world, api_for, role, route):
    response = call(api_for(role, "default"), route)
    if _allowed(role, route[0]):
        assert response.status_code == route[4], response.content
    else:
        assert_error(response, 403, "FORBIDDEN")


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@pytest.mark.parametrize("role", ["admin", "developer", "worker"])
def test_it_refuses_a_key_for_another_namespace(world, api_for, role, route):
    assert_error(call(api_for(role, "other", url_namespace="default"), route), 403, "FORBIDDEN")


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@pytest.mark.parametrize("role", ["admin", "developer", "worker"])
def test_it_lets_an_all_namespaces_key_work_anywhere(world, api_for, role, route):
    for namespace in ("default", "other"):
        response = call(api_for(role, None, url_namespace=namespace), route)
        if _allowed(role, route[0]):
            assert response.status_code == route[4], response.content
        else:
            assert_error(response, 403, "FORBIDDEN")


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_it_answers_404_for_a_namespace_that_does_not_exist(world, api_for, route):
    assert_error(call(api_for("admin", None, url_namespace="ghost"), route), 404, "NOT_FOUND")
    assert not Namespace.objects.filter(name="ghost").exists()


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_it_checks_the_role_before_looking_up_the_namespace(world, api_for, route):
    response = call(api_for("worker", None, url_namespace="ghost"), route)
    if route[0] in WORKER_MAY:
        assert_error(response, 404, "NOT_FOUND")
    else:
        assert_error(response, 403, "FORBIDDEN")


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_it_refuses_a_namespaced_key_on_a_namespace_that_does_not_exist(world, api_for, route):
    # 403, not 404: a key for one namespace learns nothing about the others.
    assert_error(call(api_for("admin", "default", url_namespace="ghost"), route), 403, "FORBIDDEN")


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_it_answers_401_without_a_key(world, route):
    response = call(Api(None), route)
    assert_error(response, 401, "UNAUTHENTICATED")
    assert response.headers["WWW-Authenticate"] == "x-api-key"


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@pytest.mark.parametrize("raw", ["nf_not-a-real-key", "x", " "])
def test_it_answers_401_for_an_unknown_key(world, route, raw):
    assert_error(call(Api(raw), route), 401, "UNAUTHENTICATED")


def test_it_answers_401_for_an_empty_key(world):
    client = Api(None)
    response = client.client.get("/v1/ns/default/metadata/task-definitions", HTTP_X_API_KEY="")
    assert_error(response, 401, "UNAUTHENTICATED")


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_it_answers_401_for_a_revoked_key(world, make_key, route):
    raw = make_key("admin", "default")
    key = ApiKey.objects.order_by("-pk").first()
    assert revoke_api_key(key_id=key.pk)
    assert_error(call(Api(raw), route), 401, "UNAUTHENTICATED")


def test_it_does_not_change_anything_on_a_refused_write(world, api_for):
    worker = api_for("worker", "default")
    before = worker.get("metadata/task-definitions/t1").json()
    assert worker.patch("metadata/task-definitions/t1", {"retryCount": 9}).status_code == 403
    assert worker.delete("metadata/task-definitions/t1").status_code == 403
    assert (
        api_for("developer", "other", url_namespace="default")
        .post("metadata/task-definitions", {"name": "sneaky"})
        .status_code
        == 403
    )
    assert worker.get("metadata/task-definitions/t1").json() == before
    assert worker.get("metadata/task-definitions/sneaky").status_code == 404


# --- the browsable API (Django session) ---------------------------------------


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_user("staff", password="pw-staff-1234", is_staff=True)


@pytest.fixture
def member(db):
    return get_user_model().objects.create_user("member", password="pw-member-1234")


def test_it_serves_the_browsable_api_to_a_staff_user(world, client, staff):
    client.force_login(staff)
    response = client.get("/v1/ns/default/metadata/task-definitions", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert b"t1" in response.content


def test_it_treats_a_staff_user_as_an_admin_of_every_namespace(world, client, staff):
    client.force_login(staff)
    for namespace in ("default", "other"):
        response = client.get(f"/v1/ns/{namespace}/metadata/task-definitions/t1", HTTP_ACCEPT="application/json")
        assert response.status_code == 200
        assert response.json()["name"] == "t1"


def test_it_refuses_a_logged_in_user_who_is_not_staff(world, client, member):
    client.force_login(member)
    response = client.get("/v1/ns/default/metadata/task-definitions", HTTP_ACCEPT="application/json")
    assert response.status_code in (401, 403)
    assert response.json()["error"] in ("UNAUTHENTICATED", "FORBIDDEN")
    html = client.get("/v1/ns/default/metadata/task-definitions", HTTP_ACCEPT="text/html")
    assert html.status_code in (401, 403)
    # The definition's name as the page would show it, quoted; a bare "t1"
    # can occur by chance in the page's random CSRF token.
    assert b"&quot;t1&quot;" not in html.content and b'"t1"' not in html.content


def test_it_refuses_an_anonymous_browser(world, client):
    response = client.get("/v1/ns/default/metadata/task-definitions", HTTP_ACCEPT="text/html")
    assert response.status_code == 401
