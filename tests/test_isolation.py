"""Namespace isolation and roles, route by route (issue #8).

tests/test_auth.py covers keys themselves (missing, unknown, revoked, staff
sessions) on the definition routes; this file covers every route under
``/v1/ns/{ns}/``, enumerated from the URL resolver, so a route added without
a row in ``ROUTES`` fails ``test_every_route_has_a_case``:

- each role in its own namespace gets the status the table says (admin-only
  routes refuse developers, worker keys manage no definitions);
- a key for another namespace gets 403 and changes nothing;
- a key for namespace A learns nothing of namespace B: B's objects named
  through A's URLs (or through B's) answer exactly as objects that do not
  exist, and A's lists and filters never show B.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import pytest
from django.db import transaction
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from executions.models import BreakerState, Execution, Message, Task
from metadata.models import TaskDefinition, WorkflowVersion
from nodeflow.keys import create_api_key
from nodeflow.models import Namespace, Secret
from quotas.models import Schedule, Semaphore
from tests.conftest import Api, forget_process_state
from tests.engine_helpers import poll, register, start, task_at

API_PREFIX = "v1/ns/<str:ns>/"
ROLES = ("admin", "developer", "worker")
NAMESPACES = ("alpha", "beta")


def api_routes() -> set[tuple[str, str]]:
    """(METHOD, route under /v1/ns/<ns>/) for every handler the URLconf serves."""
    found: set[tuple[str, str]] = set()

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern) and (prefix + str(pattern.pattern)).startswith(API_PREFIX):
                view = pattern.callback.view_class
                for method in view.http_method_names:
                    if method not in ("head", "options") and hasattr(view, method):
                        found.add((method.upper(), (prefix + str(pattern.pattern)).removeprefix(API_PREFIX)))

    walk(get_resolver().url_patterns, "")
    return found


@dataclass(frozen=True)
class Case:
    """How to call a route in a namespace's world, and what each role gets."""

    path: str  # formatted with the world (see ``build_world``)
    body: object
    admin: int
    developer: int
    worker: int

    def expected(self, role: str) -> int:
        return getattr(self, role)


WF = "metadata/workflow-definitions"
TD = "metadata/task-definitions"
# Every role-refusal is 403 FORBIDDEN; every other status is what the world
# makes the call answer when the role may make it.
ROUTES: dict[tuple[str, str], Case] = {
    ("GET", f"{TD}"): Case(TD, None, 200, 200, 200),
    ("POST", f"{TD}"): Case(TD, {"name": "fresh"}, 201, 201, 403),
    ("PUT", f"{TD}"): Case(TD, {"name": "fresh"}, 201, 201, 403),
    ("GET", f"{TD}/<str:name>"): Case(TD + "/{taskdef}", None, 200, 200, 200),
    ("PATCH", f"{TD}/<str:name>"): Case(TD + "/{taskdef}", {"retryCount": 1}, 200, 200, 403),
    ("DELETE", f"{TD}/<str:name>"): Case(TD + "/{taskdef}", None, 204, 204, 403),
    ("GET", f"{WF}"): Case(WF, None, 200, 200, 403),
    ("POST", f"{WF}"): Case(WF, {"name": "fresh", "tasks": [{"name": "x", "taskReferenceName": "x"}]}, 201, 201, 403),
    ("PUT", f"{WF}"): Case(WF, {"name": "fresh", "tasks": [{"name": "x", "taskReferenceName": "x"}]}, 200, 200, 403),
    ("GET", f"{WF}/<str:name>"): Case(WF + "/{workflow}", None, 200, 200, 403),
    ("DELETE", f"{WF}/<str:name>"): Case(WF + "/{workflow}", None, 204, 204, 403),
    ("GET", f"{WF}/<str:name>/versions"): Case(WF + "/{workflow}/versions", None, 200, 200, 403),
    ("GET", f"{WF}/<str:name>/versions/<int:version>"): Case(WF + "/{workflow}/versions/1", None, 200, 200, 403),
    ("POST", f"{WF}/<str:name>/publish"): Case(WF + "/{workflow}/publish", {"version": 1}, 200, 200, 403),
    ("POST", f"{WF}/<str:name>/rollback"): Case(WF + "/{workflow}/rollback", {}, 200, 200, 403),
    ("GET", "executions"): Case("executions", None, 200, 200, 403),
    ("POST", "executions"): Case("executions", {"name": "{workflow}"}, 201, 201, 403),
    ("POST", "executions/batch"): Case("executions/batch", {"executions": [{"name": "{workflow}"}]}, 200, 200, 403),
    ("GET", "executions/<str:execution_id>"): Case("executions/{execution}", None, 200, 200, 403),
    ("GET", "executions/<str:execution_id>/tasks"): Case("executions/{execution}/tasks", None, 200, 200, 403),
    ("POST", "executions/<str:execution_id>/terminate"): Case("executions/{execution}/terminate", {}, 200, 200, 403),
    ("POST", "executions/<str:execution_id>/pause"): Case("executions/{execution}/pause", None, 200, 200, 403),
    ("POST", "executions/<str:execution_id>/resume"): Case("executions/{execution}/resume", None, 409, 409, 403),
    ("POST", "executions/<str:execution_id>/retry"): Case("executions/{execution}/retry", None, 409, 409, 403),
    ("POST", "executions/<str:execution_id>/restart"): Case("executions/{execution}/restart", None, 409, 409, 403),
    ("POST", "executions/<str:execution_id>/decide"): Case("executions/{execution}/decide", None, 200, 200, 403),
    ("POST", "executions/<str:execution_id>/messages"): Case(
        "executions/{execution}/messages", {"m": 1}, 201, 201, 403
    ),
    ("POST", "tasks/poll/<str:task_type>"): Case("tasks/poll/{taskdef}", {}, 200, 403, 200),
    ("POST", "tasks/results"): Case("tasks/results", {"results": "{batch}"}, 200, 403, 200),
    ("POST", "tasks/<str:task_id>/heartbeat"): Case("tasks/{task}/heartbeat", {"leaseToken": "{lease}"}, 200, 403, 200),
    ("POST", "tasks/<str:task_id>/result"): Case(
        "tasks/{task}/result", {"leaseToken": "{lease}", "status": "COMPLETED"}, 200, 403, 200
    ),
    ("POST", "webhooks/<str:name>"): Case("webhooks/{webhook}", {"id": 1}, 200, 200, 403),
    ("GET", "breakers"): Case("breakers", None, 200, 200, 403),
    ("GET", "semaphores"): Case("semaphores", None, 200, 200, 403),
    ("GET", "semaphores/<str:name>"): Case("semaphores/{semaphore}", None, 200, 200, 403),
    ("PUT", "semaphores/<str:name>"): Case("semaphores/{semaphore}", {"permits": 3}, 200, 403, 403),
    ("DELETE", "semaphores/<str:name>"): Case("semaphores/{semaphore}", None, 204, 403, 403),
    ("GET", "secrets"): Case("secrets", None, 200, 403, 403),
    ("GET", "secrets/<str:name>"): Case("secrets/{secret}", None, 200, 403, 403),
    ("PUT", "secrets/<str:name>"): Case("secrets/{secret}", {"value": "n3w"}, 200, 403, 403),
    ("DELETE", "secrets/<str:name>"): Case("secrets/{secret}", None, 204, 403, 403),
    ("GET", "quotas"): Case("quotas", None, 200, 403, 403),
    ("PUT", "quotas"): Case("quotas", {"maxSchedules": 5}, 200, 403, 403),
    ("GET", "schedules"): Case("schedules", None, 200, 200, 403),
    ("POST", "schedules"): Case(
        "schedules", {"name": "fresh", "cron": "0 3 * * *", "workflowName": "{workflow}"}, 201, 201, 403
    ),
    ("GET", "schedules/<str:name>"): Case("schedules/{schedule}", None, 200, 200, 403),
    ("PUT", "schedules/<str:name>"): Case(
        "schedules/{schedule}", {"cron": "0 4 * * *", "workflowName": "{workflow}"}, 200, 200, 403
    ),
    ("DELETE", "schedules/<str:name>"): Case("schedules/{schedule}", None, 204, 204, 403),
    ("POST", "schedules/<str:name>/pause"): Case("schedules/{schedule}/pause", None, 200, 200, 403),
    ("POST", "schedules/<str:name>/resume"): Case("schedules/{schedule}/resume", None, 200, 200, 403),
    ("GET", "queues"): Case("queues", None, 200, 200, 403),
    ("GET", "queues/workers"): Case("queues/workers", None, 200, 200, 403),
    ("GET", "queues/<str:task_type>/depth"): Case("queues/{taskdef}/depth", None, 200, 200, 403),
    # The Conductor-compatible routes (conductor_api/), same roles as their Node Flow counterparts.
    ("POST", "api/token"): Case("api/token", {"keyId": "0", "keySecret": "not-a-key"}, 401, 401, 401),
    ("POST", "api/tasks"): Case(
        "api/tasks", {"taskId": "{task}", "status": "IN_PROGRESS", "extendLease": True}, 200, 403, 200
    ),
    ("POST", "api/tasks/update-v2"): Case(
        "api/tasks/update-v2", {"taskId": "{task}", "status": "IN_PROGRESS", "extendLease": True}, 204, 403, 204
    ),
    ("GET", "api/tasks/poll/batch/<str:task_type>"): Case(
        "api/tasks/poll/batch/{taskdef}?workerid=w&timeout=0", None, 200, 403, 200
    ),
    ("GET", "api/tasks/poll/<str:task_type>"): Case("api/tasks/poll/{taskdef}?workerid=w", None, 204, 403, 204),
    ("POST", "api/tasks/<str:workflow_id>/<str:task_ref>/<str:status>"): Case(
        "api/tasks/{execution}/a/IN_PROGRESS?workerid={worker_id}", {"step": 1}, 200, 403, 200
    ),
    ("POST", "api/tasks/<str:workflow_id>/<str:task_ref>/<str:status>/sync"): Case(
        "api/tasks/{execution}/a/IN_PROGRESS/sync?workerid={worker_id}", {"step": 1}, 200, 403, 200
    ),
    ("GET", "api/tasks/<str:task_id>"): Case("api/tasks/{task}", None, 200, 200, 200),
    ("GET", "api/metadata/taskdefs"): Case("api/metadata/taskdefs", None, 200, 200, 200),
    ("POST", "api/metadata/taskdefs"): Case("api/metadata/taskdefs", [{"name": "fresh"}], 200, 200, 403),
    ("PUT", "api/metadata/taskdefs"): Case("api/metadata/taskdefs", {"name": "fresh"}, 200, 200, 403),
    ("GET", "api/metadata/taskdefs/<str:name>"): Case("api/metadata/taskdefs/{taskdef}", None, 200, 200, 200),
    ("DELETE", "api/metadata/taskdefs/<str:name>"): Case("api/metadata/taskdefs/{taskdef}", None, 200, 200, 403),
    ("GET", "api/metadata/workflow"): Case("api/metadata/workflow", None, 200, 200, 403),
    ("POST", "api/metadata/workflow"): Case(
        "api/metadata/workflow", {"name": "fresh", "tasks": [{"name": "x", "taskReferenceName": "x"}]}, 200, 200, 403
    ),
    ("PUT", "api/metadata/workflow"): Case(
        "api/metadata/workflow", [{"name": "fresh", "tasks": [{"name": "x", "taskReferenceName": "x"}]}], 200, 200, 403
    ),
    ("GET", "api/metadata/workflow/<str:name>"): Case("api/metadata/workflow/{workflow}", None, 200, 200, 403),
    ("POST", "api/workflow"): Case("api/workflow", {"name": "{workflow}"}, 200, 200, 403),
    ("POST", "api/workflow/<str:ident>"): Case("api/workflow/{workflow}", {"a": 1}, 200, 200, 403),
    ("GET", "api/workflow/<str:ident>"): Case("api/workflow/{execution}", None, 200, 200, 403),
    ("DELETE", "api/workflow/<str:ident>"): Case("api/workflow/{execution}?reason=x", None, 200, 200, 403),
    ("GET", "api/workflow/<str:workflow_id>/status"): Case("api/workflow/{execution}/status", None, 200, 200, 403),
    ("PUT", "api/workflow/<str:workflow_id>/pause"): Case("api/workflow/{execution}/pause", None, 200, 200, 403),
    ("PUT", "api/workflow/<str:workflow_id>/resume"): Case("api/workflow/{execution}/resume", None, 409, 409, 403),
    ("POST", "api/workflow/<str:workflow_id>/retry"): Case("api/workflow/{execution}/retry", None, 409, 409, 403),
    ("POST", "api/workflow/<str:workflow_id>/restart"): Case("api/workflow/{execution}/restart", None, 409, 409, 403),
    ("POST", "api/workflow/<str:name>/correlated"): Case(
        "api/workflow/{workflow}/correlated", ["order-1"], 200, 200, 403
    ),
    ("GET", "api/workflow/<str:name>/correlated/<str:correlation_id>"): Case(
        "api/workflow/{workflow}/correlated/{correlation}", None, 200, 200, 403
    ),
}
ROUTE_IDS = [f"{method} {route}" for method, route in ROUTES]


def test_every_route_has_a_case():
    """A new route must say, here, what each role gets from it."""
    assert api_routes() == set(ROUTES)


def build_world(admin: Api, worker: Api, ns: str) -> dict:
    """One of everything in namespace ``ns``, every name carrying ``ns`` so a
    leak into another namespace's answers is visible in its text."""
    world = {
        "taskdef": f"{ns}_t1",
        "workflow": f"{ns}_wf",
        "semaphore": f"{ns}_gate",
        "schedule": f"{ns}_nightly",
        "webhook": f"{ns}_paid",
        "correlation": f"{ns}_corr",
        "secret": f"{ns}_signing",
        "worker_id": f"{ns}_worker",
    }
    assert admin.post(TD, {"name": world["taskdef"]}).status_code == 201
    assert admin.put(f"semaphores/{world['semaphore']}", {"permits": 2}).status_code == 201
    assert admin.put(f"secrets/{world['secret']}", {"value": f"{ns}-value"}).status_code == 201
    tasks = [{"name": world["taskdef"], "taskReferenceName": "a"}]
    register(admin, world["workflow"], *tasks)
    register(admin, world["workflow"], *tasks, description="v2")
    assert admin.post(f"{WF}/{world['workflow']}/publish", {"version": 2}).status_code == 200
    register(
        admin,
        f"{ns}_hook",
        {
            "name": world["webhook"],
            "taskReferenceName": "w",
            "type": "WAIT_FOR_WEBHOOK",
            "inputParameters": {"matches": {"$.id": 1}},
        },
    )
    waiting = start(admin, f"{ns}_hook")
    world["webhook_task"] = task_at(waiting, "w")["taskId"]
    execution = start(admin, world["workflow"], correlationId=world["correlation"])
    world["execution"] = execution["id"]
    [leased] = poll(worker, world["taskdef"], worker=world["worker_id"])
    world["task"], world["lease"] = leased["taskId"], leased["leaseToken"]
    world["batch"] = [{"taskId": leased["taskId"], "leaseToken": leased["leaseToken"], "status": "IN_PROGRESS"}]
    assert (
        admin.post(
            "schedules", {"name": world["schedule"], "cron": "0 3 * * *", "workflowName": world["workflow"]}
        ).status_code
        == 201
    )
    assert admin.put("quotas", {"maxSchedules": 77 if ns == "beta" else 10}).status_code == 200
    BreakerState.objects.create(
        process="p1",
        namespace=Namespace.objects.get(name=ns),
        key=f"{ns}-host.example",
        state="OPEN",
        failures=5,
        requests=5,
        updated_at=timezone.now(),
    )
    return world


def fill(value, world: dict):
    """The case's path or body with the world's names and ids in it."""
    if isinstance(value, str):
        if value.startswith("{") and value.endswith("}") and value[1:-1] in world:
            return world[value[1:-1]]
        return value.format(**world)
    if isinstance(value, dict):
        return {key: fill(item, world) for key, item in value.items()}
    if isinstance(value, list):
        return [fill(item, world) for item in value]
    return value


@pytest.fixture(scope="module")
def built_worlds(module_rows) -> dict[str, dict]:
    """Namespaces alpha and beta, each with its world and a key of each role,
    built once for the module's tests (each rolls back to them)."""

    def make() -> dict[str, dict]:
        out = {}
        for ns in NAMESPACES:
            keys = {role: create_api_key(role=role, namespace=ns)[1] for role in ROLES}
            out[ns] = {"keys": keys, **build_world(Api(keys["admin"], ns), Api(keys["worker"], ns), ns)}
        return out

    return module_rows(make)


@pytest.fixture
def worlds(built_worlds, db) -> dict[str, dict]:
    return built_worlds


def call(key: str, url_ns: str, case: Case, world: dict):
    client = Api(key, url_ns)
    path, body = fill(case.path, world), fill(case.body, world)
    method = next(m for (m, route), c in ROUTES.items() if c is case)
    return client.call(method, path, body)


def call_and_roll_back(key: str, url_ns: str, case: Case, world: dict):
    """One call whose effects are undone, so the next call meets the same world."""
    # A bare savepoint, not an atomic block: the services open durable
    # transactions, which may nest in the test's own but in no other.
    savepoint = transaction.savepoint_create()
    try:
        response = call(key, url_ns, case, world)
    finally:
        transaction.savepoint_rollback(savepoint)
    forget_process_state()
    return response


def fingerprint() -> str:
    """Everything a refused call must leave as it was."""
    rows = {
        "executions": list(Execution.objects.order_by("id").values_list("id", "status", "run")),
        "tasks": list(Task.objects.order_by("id").values_list("id", "status", "lease_token", "output")),
        "taskdefs": list(TaskDefinition.objects.order_by("id").values_list("id", "name", "retry_count")),
        "versions": list(WorkflowVersion.objects.order_by("id").values_list("id", "version")),
        "messages": Message.objects.count(),
        "schedules": list(Schedule.objects.order_by("id").values_list("id", "cron", "paused")),
        "semaphores": list(Semaphore.objects.order_by("id").values_list("id", "permits")),
        "secrets": list(Secret.objects.order_by("id").values_list("id", "value")),
    }
    return json.dumps(rows, default=str)


def assert_error(response, status: int, error: str) -> None:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"] == error and body["message"], body


# --- roles in their own namespace ---------------------------------------------


@pytest.mark.parametrize("route", list(ROUTES), ids=ROUTE_IDS)
def test_each_role_gets_what_the_table_says_in_its_own_namespace(worlds, route):
    case, world = ROUTES[route], worlds["alpha"]
    for role in ROLES:
        response = call_and_roll_back(world["keys"][role], "alpha", case, world)
        assert response.status_code == case.expected(role), (role, response.content)
        if case.expected(role) == 403:
            assert_error(response, 403, "FORBIDDEN")


@pytest.mark.parametrize("route", list(ROUTES), ids=ROUTE_IDS)
def test_a_key_for_another_namespace_is_refused_and_changes_nothing(worlds, route):
    case, target = ROUTES[route], worlds["alpha"]
    before = fingerprint()
    for role in ROLES:
        # beta's key, alpha's URL and alpha's real names and ids.
        assert_error(call(worlds["beta"]["keys"][role], "alpha", case, target), 403, "FORBIDDEN")
    assert fingerprint() == before


# --- nothing to infer -----------------------------------------------------------

GHOST = {
    "taskdef": "ghost_t1",
    "workflow": "ghost_wf",
    "semaphore": "ghost_gate",
    "schedule": "ghost_nightly",
    "webhook": "ghost_paid",
    "correlation": "ghost_corr",
    "execution": str(uuid.UUID(int=1)),
    "task": str(uuid.UUID(int=2)),
    "webhook_task": str(uuid.UUID(int=3)),
    "lease": "0" * 32,
}


def _ghost_world(world: dict) -> dict:
    ghost = {**world, **GHOST}
    ghost["batch"] = [{"taskId": GHOST["task"], "leaseToken": GHOST["lease"], "status": "IN_PROGRESS"}]
    return ghost


def _scrubbed(response, world: dict, ghost: dict) -> tuple[int, str]:
    """Status and body with the names and ids that were asked for blanked out."""
    text = response.content.decode()
    for key in ("taskdef", "workflow", "semaphore", "schedule", "webhook", "execution", "task", "lease"):
        text = text.replace(str(world[key]), "<asked>").replace(str(ghost[key]), "<asked>")
    return response.status_code, text


@pytest.mark.parametrize("route", [r for r in ROUTES if "<" in r[1]], ids=[i for i in ROUTE_IDS if "<" in i])
@pytest.mark.parametrize("url_ns", NAMESPACES)
def test_a_foreign_object_answers_exactly_as_one_that_does_not_exist(worlds, route, url_ns):
    """alpha's keys name beta's objects, through alpha's URL (404 like a
    missing one) and through beta's (403 like a missing one): same status,
    same body."""
    case, beta = ROUTES[route], worlds["beta"]
    ghost = _ghost_world(beta)
    before = fingerprint()
    for role in ROLES:
        key = worlds["alpha"]["keys"][role]
        foreign = call_and_roll_back(key, url_ns, case, beta)
        missing = call_and_roll_back(key, url_ns, case, ghost)
        assert _scrubbed(foreign, beta, ghost) == _scrubbed(missing, beta, ghost), (role, foreign.content)
        if url_ns == "beta":
            assert foreign.status_code == 403
    assert fingerprint() == before


# --- lists, filters and queues show only the caller's namespace ----------------

LISTS = [
    "metadata/task-definitions",
    "metadata/workflow-definitions",
    "executions",
    "schedules",
    "semaphores",
    "queues",
    "queues/workers",
    "breakers",
    "quotas",
    "api/metadata/taskdefs",
    "api/metadata/workflow",
]


@pytest.mark.parametrize("path", LISTS)
def test_a_list_shows_nothing_of_another_namespace(worlds, path):
    response = Api(worlds["alpha"]["keys"]["admin"], "alpha").get(path)
    assert response.status_code == 200
    assert "beta" not in response.content.decode()


def test_breakers_are_the_namespaces_own(worlds):
    listed = Api(worlds["alpha"]["keys"]["admin"], "alpha").get("breakers").json()
    assert [breaker["key"] for breaker in listed] == ["alpha-host.example"]


def test_quotas_are_the_namespaces_own(worlds):
    assert Api(worlds["alpha"]["keys"]["admin"], "alpha").get("quotas").json()["maxSchedules"] == 10
    assert Api(worlds["beta"]["keys"]["admin"], "beta").get("quotas").json()["maxSchedules"] == 77


@pytest.mark.parametrize("query", ["name=beta_wf", "correlationId=beta_corr", "name=beta_hook"])
def test_execution_filters_do_not_reach_another_namespace(worlds, query):
    response = Api(worlds["alpha"]["keys"]["admin"], "alpha").get(f"executions?{query}")
    assert response.json() == {"results": [], "next": None}


def test_a_queue_of_another_namespace_is_empty_here(worlds):
    alpha = Api(worlds["alpha"]["keys"]["admin"], "alpha")
    assert alpha.get("queues/beta_t1/depth").json() == {"taskType": "beta_t1", "depth": 0, "inFlight": 0}
    assert alpha.get("queues/workers?taskType=beta_t1").json() == []


def test_a_worker_never_leases_another_namespaces_task(worlds):
    beta_admin = Api(worlds["beta"]["keys"]["admin"], "beta")
    start(beta_admin, "beta_wf")  # one more ready task in beta's queue beta_t1
    alpha_worker = Api(worlds["alpha"]["keys"]["worker"], "alpha")
    assert poll(alpha_worker, "beta_t1", count=10) == []
    assert Api(worlds["beta"]["keys"]["worker"], "beta").post("tasks/poll/beta_t1", {"count": 10}).json() != []


def test_a_webhook_completes_only_its_own_namespaces_waits(worlds):
    alpha = Api(worlds["alpha"]["keys"]["admin"], "alpha")
    assert alpha.post("webhooks/beta_paid", {"id": 1}).json() == {"matched": 0, "taskIds": []}
    assert Task.objects.get(pk=worlds["beta"]["webhook_task"]).status == "IN_PROGRESS"
    beta = Api(worlds["beta"]["keys"]["admin"], "beta")
    assert beta.post("webhooks/beta_paid", {"id": 1}).json()["matched"] == 1


def test_a_batch_with_another_namespaces_task_answers_not_found_for_it(worlds):
    beta = worlds["beta"]
    alpha_worker = Api(worlds["alpha"]["keys"]["worker"], "alpha")
    body = {"results": [{"taskId": beta["task"], "leaseToken": beta["lease"], "status": "COMPLETED"}]}
    answer = alpha_worker.post("tasks/results", body).json()
    assert answer == {"results": [{"taskId": beta["task"], "status": 404, "error": "NOT_FOUND"}]}
    assert Task.objects.get(pk=beta["task"]).status == "IN_PROGRESS"


def test_a_developer_cannot_complete_another_namespaces_human_task_through_its_own(worlds, make_key):
    beta_admin = Api(worlds["beta"]["keys"]["admin"], "beta")
    register(beta_admin, "beta_approval", {"name": "approve", "taskReferenceName": "h", "type": "HUMAN"})
    human = task_at(start(beta_admin, "beta_approval"), "h")
    developer = Api(worlds["alpha"]["keys"]["developer"], "alpha")
    response = developer.post(f"tasks/{human['taskId']}/result", {"status": "COMPLETED"})
    assert_error(response, 404, "NOT_FOUND")
    assert Task.objects.get(pk=human["taskId"]).status == "IN_PROGRESS"


def test_a_developer_cannot_report_a_leased_tasks_result(worlds):
    # A developer key with a worker's lease token completed the worker task:
    # the result route took HUMAN_TASKS as enough for any result.
    alpha = worlds["alpha"]
    developer = Api(alpha["keys"]["developer"], "alpha")
    response = developer.post(f"tasks/{alpha['task']}/result", {"leaseToken": alpha["lease"], "status": "COMPLETED"})
    assert_error(response, 403, "FORBIDDEN")
    assert Task.objects.get(pk=alpha["task"]).status == "IN_PROGRESS"
