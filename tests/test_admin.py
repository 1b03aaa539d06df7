"""The Django admin (SPEC §10): every registered model's changelist and
change page render with data present; actions call the services and report
each row's success or refusal; nothing is editable around the services;
big changelists cost the same number of queries whatever their length."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import NoReverseMatch, reverse

from executions.models import BreakerState, DecideRequest, Execution, Message, Task, Timer, TimerKind
from metadata.models import TaskDefinition
from nodeflow import clock
from nodeflow.models import ApiKey, Namespace, Secret
from quotas.models import Admission, NamespaceQuota, RateWindow, Schedule, Semaphore, SemaphoreHolder, WorkerPoll
from tests.engine_helpers import fail, no_retries, poll_one, register, simple, start, task_at

OUR_APPS = ("nodeflow", "metadata", "executions", "quotas")
# Models whose rows the admin may delete, each through its service.
DELETABLE = {"taskdefinition", "workflowdefinition", "semaphore", "schedule"}


@pytest.fixture
def staff(db) -> Client:
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def data(api, frozen_clock):
    """At least one row of every model."""
    register(api, "child", simple("inner"))
    register(
        api,
        "parent",
        {"name": "call", "taskReferenceName": "sub", "type": "SUB_WORKFLOW", "subWorkflowParam": {"name": "child"}},
        simple("after"),
    )
    parent = start(api, "parent", {"order": 1}, correlationId="order-1")
    child_id = task_at(parent, "sub")["subWorkflowId"]
    now = clock.now()
    namespace = Namespace.objects.get(name="default")
    execution = Execution.objects.get(pk=parent["id"])
    task = Task.objects.filter(execution_id=child_id).first()
    Timer.objects.create(kind=TimerKind.WAIT, execution=execution, due_at=now + dt.timedelta(hours=1))
    Message.objects.create(execution=execution, payload={"hello": 1}, created_at=now)
    DecideRequest.objects.create(execution=execution, due_at=now - dt.timedelta(seconds=30))
    BreakerState.objects.create(process="p1", namespace=namespace, key="example.com", state="OPEN", updated_at=now)
    semaphore = Semaphore.objects.create(namespace=namespace, name="erp", permits=2, created_at=now, updated_at=now)
    SemaphoreHolder.objects.create(semaphore=semaphore, task=task, worker_id="w1", acquired_at=now)
    NamespaceQuota.objects.create(namespace=namespace, max_schedules=5, updated_at=now)
    Secret.objects.create(namespace=namespace, name="partner", value="s3cret", created_at=now, updated_at=now)
    Admission.objects.create(namespace=namespace, bucket="parent:x", execution=execution, admitted=True, created_at=now)
    RateWindow.objects.create(namespace=namespace, key="inner", window_start=0.0, used=1)
    WorkerPoll.objects.create(namespace=namespace, queue="inner", worker_id="w1", last_poll_at=now)
    assert api.post("schedules", {"name": "nightly", "cron": "0 2 * * *", "workflowName": "parent"}).status_code == 201
    assert api.post("metadata/task-definitions", {"name": "inner", "retryCount": 0}).status_code in (200, 201)
    return {"parent": parent["id"], "child": child_id}


def admin_url(model, view: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def act(client: Client, model, action: str, ids) -> list[tuple[str, str]]:
    """Run an admin action; (level, text) of each message it left."""
    response = client.post(
        admin_url(model, "changelist"), {"action": action, "_selected_action": [str(i) for i in ids]}, follow=True
    )
    assert response.status_code == 200
    return [(m.level_tag, m.message) for m in response.context["messages"]]


# --- every model ----------------------------------------------------------------


def test_every_model_of_every_app_is_registered():
    registered = set(admin.site._registry)
    from django.apps import apps

    missing = [m.__name__ for app in OUR_APPS for m in apps.get_app_config(app).get_models() if m not in registered]
    assert missing == []


def test_every_changelist_and_change_page_renders_with_data(staff, data):
    for model, model_admin in admin.site._registry.items():
        response = staff.get(admin_url(model, "changelist"))
        assert response.status_code == 200, model
        row = model_admin.get_queryset(response.wsgi_request).first()
        if model._meta.app_label in OUR_APPS:
            assert row is not None, f"no {model.__name__} row to render"
        if row is not None:
            page = staff.get(admin_url(model, "change", row.pk))
            assert page.status_code == 200, model
        searched = staff.get(admin_url(model, "changelist"), {"q": "x"})
        assert searched.status_code == 200, model


def test_nothing_is_added_edited_or_deleted_around_the_services(staff, data):
    request = staff.get(admin_url(Execution, "changelist")).wsgi_request
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label not in OUR_APPS or model in (Namespace, ApiKey):
            continue
        name = model._meta.model_name
        assert not model_admin.has_add_permission(request), name
        assert not model_admin.has_change_permission(request), name
        assert model_admin.has_delete_permission(request) == (name in DELETABLE), name
    # The change page of an execution is read-only: no save buttons, no inputs for its fields.
    page = staff.get(admin_url(Execution, "change", data["parent"])).content.decode()
    assert 'name="_save"' not in page and 'name="status"' not in page
    # A POST to it changes nothing.
    staff.post(admin_url(Execution, "change", data["parent"]), {"status": "COMPLETED"})
    assert Execution.objects.get(pk=data["parent"]).status == "RUNNING"


def test_search_by_uuid_or_by_a_malformed_one_never_errs(staff, data):
    found = staff.get(admin_url(Execution, "changelist"), {"q": data["child"]})
    assert found.status_code == 200
    assert list(found.context["cl"].result_list.values_list("pk", flat=True)) == [
        Execution.objects.get(pk=data["child"]).pk
    ]
    by_parent = staff.get(admin_url(Execution, "changelist"), {"q": data["parent"]})
    assert by_parent.context["cl"].result_count == 2  # the parent itself and its child
    tasks = staff.get(admin_url(Task, "changelist"), {"q": data["child"]})
    # The child's own task, and the parent's SUB_WORKFLOW task that started it.
    assert sorted(t.path for t in tasks.context["cl"].result_list) == ["sub", "sub.inner"]
    for model in (Execution, Task, Timer, Message):
        assert staff.get(admin_url(model, "changelist"), {"q": "0192-not-a-uuid"}).status_code == 200


# --- executions -----------------------------------------------------------------


def test_an_execution_page_links_to_its_tasks_parent_and_children(staff, data):
    page = staff.get(admin_url(Execution, "change", data["parent"])).content.decode()
    link = re.search(r'href="([^"]*/executions/task/\?execution__exact=[^"]+)"', page)
    assert link, "no link to the execution's tasks"
    tasks = staff.get(link.group(1).replace("&amp;", "&"))
    assert tasks.status_code == 200
    assert [t.path for t in tasks.context["cl"].result_list] == ["sub"]
    assert "parent_execution__exact=" in page  # its children
    try:
        console = reverse("console:execution", args=[data["parent"]])
    except NoReverseMatch:
        console = None  # no console app installed: no link to it
    if console is not None:
        assert f'href="{console}"' in page
    child_page = staff.get(admin_url(Execution, "change", data["child"])).content.decode()
    assert admin_url(Execution, "change", data["parent"]) in child_page


def test_actions_call_the_lifecycle_and_report_each_refusal(staff, api, data):
    parent, child = data["parent"], data["child"]

    assert act(staff, Execution, "retry", [parent]) == [
        ("error", f"execution {parent}: cannot retry an execution that is RUNNING")
    ]
    assert act(staff, Execution, "pause", [child]) == [("success", f"execution {child}: paused")]
    # One action over several rows reports each: one succeeds, one is refused.
    assert set(act(staff, Execution, "pause", [parent, child])) == {
        ("success", f"execution {parent}: paused"),
        ("error", f"execution {child}: cannot pause an execution that is PAUSED"),
    }
    assert Execution.objects.get(pk=parent).status == "PAUSED"
    assert set(act(staff, Execution, "resume", [parent, child])) == {
        ("success", f"execution {parent}: resumed"),
        ("success", f"execution {child}: resumed"),
    }

    assert act(staff, Execution, "terminate", [parent]) == [("success", f"execution {parent}: terminated")]
    # The child went with its parent's cascade: terminating it again is refused, by the service.
    assert act(staff, Execution, "terminate", [child]) == [
        ("error", f"execution {child}: execution is already TERMINATED")
    ]
    assert Execution.objects.get(pk=parent).reason_for_incompletion == "terminated in the admin by root"

    assert act(staff, Execution, "retry", [parent]) == [("success", f"execution {parent}: retried")]
    assert Execution.objects.get(pk=parent).status == "RUNNING"
    assert act(staff, Execution, "decide", [parent]) == [("success", f"execution {parent}: decided")]
    act(staff, Execution, "terminate", [parent])
    assert act(staff, Execution, "decide", [parent]) == [
        ("success", f"execution {parent}: nothing to decide (it is TERMINATED)")
    ]
    assert act(staff, Execution, "restart", [parent]) == [("success", f"execution {parent}: restarted")]
    restarted = Execution.objects.get(pk=parent)
    assert (restarted.status, restarted.run) == ("RUNNING", 2)


def test_retry_from_the_admin_resumes_a_failed_execution(staff, api, frozen_clock):
    no_retries(api, "charge")
    register(api, "orders", simple("charge"))
    started = start(api, "orders")
    fail(api, poll_one(api, "charge"), "card declined")
    assert Execution.objects.get(pk=started["id"]).status == "FAILED"

    assert act(staff, Execution, "retry", [started["id"]]) == [("success", f"execution {started['id']}: retried")]
    assert [t.status for t in Task.objects.filter(execution_id=started["id"]).order_by("seq")] == [
        "FAILED",
        "SCHEDULED",
    ]


def test_the_decide_queue_action_decides_and_removes_the_request(staff, data):
    messages = act(staff, DecideRequest, "decide", [data["parent"]])
    assert messages == [("success", f"execution {data['parent']}: decided")]
    assert not DecideRequest.objects.exists()


def test_a_view_only_staff_user_sees_but_cannot_act(db, data):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    for model in (Execution, Task, SemaphoreHolder, ApiKey):
        user.user_permissions.add(Permission.objects.get(codename=f"view_{model._meta.model_name}"))
    client = Client()
    client.force_login(user)
    response = client.get(admin_url(Execution, "changelist"))
    assert response.status_code == 200
    assert set(admin.site._registry[Execution].get_actions(response.wsgi_request)) == set()
    assert act(client, Execution, "terminate", [data["parent"]]) == []  # not offered, so not run
    assert Execution.objects.get(pk=data["parent"]).status == "RUNNING"


# --- controls and keys ------------------------------------------------------------


def test_releasing_a_semaphore_holder_goes_through_the_service(staff, data):
    holder = SemaphoreHolder.objects.get()
    assert act(staff, SemaphoreHolder, "release", [holder.pk]) == [("success", f"holder {holder.pk}: released")]
    assert not SemaphoreHolder.objects.exists()


def test_revoking_keys_reports_each_key(staff, make_key):
    make_key("worker")
    key = ApiKey.objects.get(role="worker")
    assert act(staff, ApiKey, "revoke", [key.pk]) == [("success", f"key {key.pk}: revoked")]
    assert act(staff, ApiKey, "revoke", [key.pk]) == [("success", f"key {key.pk}: already revoked")]
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    assert not admin.site._registry[ApiKey].has_delete_permission(None)


def test_pausing_a_schedule_and_deleting_definitions_use_the_services(staff, api, data):
    schedule = Schedule.objects.get(name="nightly")
    assert act(staff, Schedule, "pause", [schedule.pk]) == [("success", "schedule default/nightly: paused")]
    assert Schedule.objects.get(pk=schedule.pk).paused
    definition = TaskDefinition.objects.get(name="inner")
    response = staff.post(
        admin_url(TaskDefinition, "changelist"),
        {"action": "delete_selected", "_selected_action": [definition.pk], "post": "yes"},
        follow=True,
    )
    assert response.status_code == 200
    assert ("success", "default/inner: deleted") in [(m.level_tag, m.message) for m in response.context["messages"]]
    assert api.get("metadata/task-definitions/inner").status_code == 404


def test_a_namespace_added_in_the_admin_is_made_by_the_service(staff):
    response = staff.post(admin_url(Namespace, "add"), {"name": "payments"}, follow=True)
    assert response.status_code == 200
    assert Namespace.objects.filter(name="payments").exists()
    bad = staff.post(admin_url(Namespace, "add"), {"name": "has space"})
    assert bad.status_code == 200 and not Namespace.objects.filter(name="has space").exists()


# --- cost ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", [Execution, Task, SemaphoreHolder, ApiKey, TaskDefinition])
def test_a_changelist_costs_the_same_queries_for_few_or_many_rows(staff, api, frozen_clock, model, make_key):
    register(api, "one", simple("work"), simple("more"))

    def grow() -> None:
        started = start(api, "one")
        make_key("worker")
        api.post("metadata/task-definitions", {"name": f"def-{started['id'][-8:]}"})
        task = Task.objects.filter(execution_id=started["id"]).first()
        semaphore, _ = Semaphore.objects.get_or_create(
            namespace=Namespace.objects.get(name="default"),
            name="s",
            defaults={"permits": 9, "created_at": clock.now(), "updated_at": clock.now()},
        )
        SemaphoreHolder.objects.create(semaphore=semaphore, task=task, acquired_at=clock.now())

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert staff.get(admin_url(model, "changelist")).status_code == 200
        return len(captured)

    grow()
    few = queries()
    for _ in range(5):
        grow()
    assert queries() == few
